"""engine_bound: the upper bound in the engine's own tokens (llama.cpp: token by token within prompt - 1; the
simulator: full blocks), the reply extension of a conversation's turns, on hand-made token lists."""
from bench.engine_bound import (bound_tokens, cacheable, conversation_successors, held_after, lcp, pack,
                                run_bound)


def test_longest_common_prefix_of_packed_token_ids():
    """Ensures lcp counts whole tokens (never a partial 4-byte id) and handles empty and equal sequences."""
    assert lcp(pack([1, 2, 3, 4]), pack([1, 2, 9])) == 2
    assert lcp(pack([1, 2, 3]), pack([1, 2, 3])) == 3
    assert lcp(pack([]), pack([1])) == 0
    assert lcp(pack([256]), pack([512])) == 0          # first bytes equal (0), ids differ: no match
    assert lcp(pack([7] * 1000 + [1]), pack([7] * 1000 + [2])) == 1000


def test_cacheable_is_within_prompt_minus_one_and_rounds_to_blocks():
    """Ensures a whole-prompt match reports prompt - 1 token by token (llama.cpp) and full blocks within prompt - 1
    for a paged engine."""
    assert cacheable(100, 100) == 99 and cacheable(40, 100) == 40 and cacheable(0, 1) == 0
    assert cacheable(100, 100, block=16) == 96 and cacheable(47, 100, block=16) == 32
    assert cacheable(5, 0) == 0


def test_a_request_hits_the_longest_prefix_seen_before_it():
    """Ensures each request matches its longest token prefix with anything sent before it (never itself, never
    later ones), the first request nothing."""
    a = [1, 2, 3, 4, 5, 6]
    sent = [(a, a), ([1, 2, 3, 9, 9], [1, 2, 3, 9, 9]), (a + [7], a + [7]), ([1, 2, 3, 9, 8], [1, 2, 3, 9, 8])]
    assert bound_tokens(sent) == [0, 3, 6, 4]
    assert bound_tokens(sent, block=2) == [0, 2, 6, 4]
    assert bound_tokens([(a, a), (a, a)]) == [0, 5]    # an exact repeat: prompt - 1


def test_the_reply_counts_as_held_only_as_the_next_turn_carries_it():
    """Ensures an engine is taken to hold the prompt and the next turn's completion_tokens - 1 tokens after it (the
    reply as re-sent, the last generated token having no KV), and only the prompt when the next turn does not begin
    with it or there is no next turn."""
    prompt, next_turn = [1, 2, 3], [1, 2, 3, 40, 41, 42, 43, 50, 51]
    assert held_after(prompt, 4, next_turn) == [1, 2, 3, 40, 41, 42]
    assert held_after(prompt, 4, None) == prompt
    assert held_after(prompt, 4, [1, 2, 8, 40]) == prompt       # re-tokenized differently: only the prompt
    assert held_after(prompt, 1, next_turn) == prompt           # one generated token: none of it has KV
    assert held_after(prompt, 20, next_turn) == next_turn       # never beyond the next turn's tokens


def test_conversation_successors_link_each_turn_to_the_next():
    """Ensures turn t of a conversation points at turn t + 1 of the same one, whatever the send order, and requests
    outside conversations point nowhere."""
    items = [("u1", 1), ("u0", 0), (None, 0), ("u1", 0), ("u0", 1), ("u1", 2)]
    assert conversation_successors(items) == {3: 0, 1: 4, 0: 5}


def test_run_bound_of_a_conversation_counts_the_reply_and_the_prompts_only_variant_does_not():
    """Ensures the run's bound lets turn 2 hit turn 1's prompt and reply (but the last reply token), that the
    prompts-only bound stops at turn 1's prompt, and the per-request list follows the send order."""
    t1 = list(range(100, 110))                          # 10 tokens
    t2 = t1 + [200, 201, 202, 203] + [300, 301]          # reply of 4 tokens, then the new question
    requests = [{"tokens": t1, "completion_tokens": 4, "conversation": 0, "turn": 0},
                {"tokens": t2, "completion_tokens": 4, "conversation": 0, "turn": 1}]
    got = run_bound(requests)
    assert got["per_request"] == [0, 13]                 # 10 prompt tokens + 3 of the 4 reply tokens
    assert got["possible"] == 13 and got["prompt"] == 26 and got["ratio"] == 13 / 26
    assert got["prompts_only_ratio"] == 10 / 26
    assert run_bound(requests, block=4)["per_request"] == [0, 12]
    assert run_bound([]) == {"possible": 0, "prompt": 0, "ratio": 0.0, "prompts_only_ratio": 0.0, "per_request": []}


def test_shared_prefix_groups_bound_is_the_group_prefix_after_its_first_request():
    """Ensures independent requests (no conversation) sharing a system prompt can hit it after its group's first
    request, and that another group's prompt does not help."""
    system_a, system_b = [1] + list(range(10, 30)), [1] + list(range(50, 70))
    reqs = [{"tokens": system_a + [900 + i], "completion_tokens": 16, "conversation": None} for i in range(3)]
    reqs.insert(1, {"tokens": system_b + [800], "completion_tokens": 16, "conversation": None})
    got = run_bound(reqs)
    assert got["per_request"] == [0, 1, 21, 21]          # b shares only the BOS with a; a's repeats the system
    assert got["ratio"] == got["prompts_only_ratio"]


def test_misses_are_told_apart_by_where_the_group_was():
    """Ensures each ok request is its group's first, a hit (half its bound cached or more), or a miss because a
    request of its group was in flight on the same pod (a slot engine's other slot), because its pod had served the
    group but no longer held it, or because it went to a pod that never served the group."""
    from bench.engine_bound import classify_misses
    from bench.model import Record

    def rec(rid, group, pod, send, end, cached):
        return Record(rid=rid, group=group, stage=0, send_s=send, status=200, pod=pod, e2e_s=end - send,
                      cached_tokens=cached)

    records = [rec(0, "g", "a", 0.0, 1.0, 0),       # first of g
               rec(1, "g", "a", 0.5, 1.5, 0),       # g in flight on a: the other slot, cold
               rec(2, "g", "a", 2.0, 3.0, 90),      # hit
               rec(3, "g", "b", 3.5, 4.0, 0),       # b never served g
               rec(4, "g", "a", 5.0, 6.0, 10),      # a served g, nothing in flight: evicted
               rec(5, "h", "a", 5.5, 6.0, 0)]       # first of h
    failed = rec(6, "g", "a", 7.0, 8.0, 0)
    failed.status = 500
    bound = {i: 100 for i in range(7)}
    assert classify_misses(records + [failed], bound) == {"first": 2, "hit": 1, "busy_slot": 1, "evicted": 1,
                                                          "moved": 1}
