"""upper_bound: the infinite-cache bound on small hand-made request lists (keys are plain labels here)."""
from bench.model import BenchRequest, Record
from bench.upper_bound import upper_bound_ratio, upper_bound_tokens


def req(rid, prompt_tokens, keys, cache_keys=()):
    return BenchRequest(rid=rid, path="/v1/chat/completions", body=b"{}", prompt_tokens=prompt_tokens, max_tokens=1,
                        block_keys=list(keys), cache_keys=list(cache_keys))


def test_each_request_matches_the_longest_prefix_seen_before_it():
    """Ensures a request hits the blocks of its longest previously seen prefix, capped by the engine's rule."""
    reqs = [req(0, 48, "abc"),          # cold: 0
            req(1, 40, "ax"),           # a seen, x not: 1 block = 16
            req(2, 48, "abc"),          # 3 blocks seen but 47 // 16 = 2 usable: 32
            req(3, 70, "abcd"),         # d never seen: 3 blocks = 48
            req(4, 70, "ybcd"),         # the first block never seen: 0, whatever follows
            req(5, 70, "abcd")]         # d was seen with request 3: 4 blocks = 64
    assert upper_bound_tokens(reqs) == {0: 0, 1: 16, 2: 32, 3: 48, 4: 0, 5: 64}


def test_reply_blocks_count_as_seen_after_the_request():
    """Ensures the blocks of a request's reply (cache_keys) count as seen for later requests, and only later."""
    first = req(0, 48, "abc", cache_keys="abcde")     # the reply completes blocks d and e
    turn2 = req(1, 100, "abcdef")                     # the next turn carries the reply: d and e can hit
    assert upper_bound_tokens([first, turn2]) == {0: 0, 1: 80}
    no_reply = req(0, 48, "abc")                      # without cache keys only the prompt's blocks are seen
    assert upper_bound_tokens([no_reply, turn2]) == {0: 0, 1: 48}
    # The reply's own blocks do not help the request itself.
    assert upper_bound_tokens([req(0, 100, "abcdef", cache_keys="abcdefg")]) == {0: 0}


def test_ratio_follows_the_send_order_of_the_records():
    """Ensures the bound uses the records' send order, and failed requests count as sent."""
    by_rid = {0: req(0, 48, "ab"), 1: req(1, 96, "abcd")}
    r0, r1 = Record(rid=0, group=0, stage=0, send_s=1.0), Record(rid=1, group=0, stage=0, send_s=2.0)
    r1.error = "timeout"
    assert upper_bound_ratio(by_rid, [r1, r0]) == (32, 144, 32 / 144)   # 0 first: 1 hits a, b = 32 of 96
    r0.send_s = 3.0                                                     # 1 first: 0 hits a (47 // 16 = 2): 32
    assert upper_bound_ratio(by_rid, [r0, r1]) == (32, 144, 32 / 144)
    by_rid[0] = req(0, 48, "abc")
    assert upper_bound_ratio(by_rid, [r0, r1]) == (32, 144, 32 / 144)
    assert upper_bound_ratio(by_rid, []) == (0, 0, 0.0)
