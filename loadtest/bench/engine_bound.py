"""The upper bound on prefix-cache hits in the engine's own tokens, for engines whose tokenization and output the
benchmark cannot replicate (llama.cpp's llama-server; the simulator in its llamacpp dialect is bounded the same
way). Pure functions; the token ids come from the engine itself after the run (fleet.py: `/apply-template` then
`/tokenize {"content", "add_special": true, "parse_special": true}` for each prompt as it was sent, which is what
llama-server charges as usage.prompt_tokens: the run checks it on every request).

The bound: had every request gone to a pod holding the longest previously seen token prefix of its prompt, with a
cache that never evicts, how many of its prompt tokens could have been served from cache?

- "Seen" follows the run's send order: once a request is sent, what the engine holds after serving it counts, as
  in upper_bound.py. That is its prompt and its reply but the last generated token (whose KV is never computed).
- The reply's token ids are not visible to the client (it streams text). A conversation's next turn carries the
  reply as text, which the engine tokenizes again; the bound takes the next turn's tokens after the previous prompt
  (completion_tokens - 1 of them) as the reply's ids, which is the best case: llama.cpp's slot holds the ids it
  generated, and where the text tokenizes differently the engine matches less than the bound allows. A last turn's
  reply is seen by no later request of its conversation and counts as nothing.
- Granularity: llama.cpp caches whole prompts per slot, token by token (no blocks), and never reports more than
  prompt_tokens - 1 cached (the last prompt token is always evaluated again): a request's bound is
  min(longest common prefix, prompt - 1). The simulator's slots model caches the same way; its paged model caches
  full blocks (`block` tokens): the bound is then rounded down to full blocks within prompt - 1, as its
  cached_tokens are.
- Both bounds are of an infinite cache: under KV pressure (a llama-server holding only its slots' prompts, a small
  simulated cache) the engines cannot reach them, and the gap is the capacity's doing, not the routing's alone.
"""
import struct

WIDTH = 4   # bytes per packed token id


def pack(tokens):
    """Token ids as bytes (4 per id), so prefixes compare with one memcmp."""
    return struct.pack(f"<{len(tokens)}I", *tokens)


def lcp(a, b):
    """Tokens in the longest common prefix of two packed sequences (binary search over slice equality)."""
    lo, hi = 0, min(len(a), len(b)) // WIDTH
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid * WIDTH] == b[:mid * WIDTH]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def held_after(prompt, completion_tokens, next_turn=None):
    """What the engine holds after serving `prompt` (token ids) with `completion_tokens` generated: the prompt, and
    when the conversation's next turn (its token ids) begins with the whole prompt, the next completion_tokens - 1
    tokens of that turn (the reply as the next turn carries it, standing for the generated ids; the last generated
    token has no KV)."""
    prompt = list(prompt)
    if next_turn is None or completion_tokens <= 1 or list(next_turn[:len(prompt)]) != prompt:
        return prompt
    return list(next_turn[:len(prompt) + completion_tokens - 1])


def cacheable(matched, prompt_tokens, block=1):
    """Cached tokens an engine can report for a prefix match of `matched` tokens: within prompt - 1, in full
    blocks (block 1: llama.cpp, token by token)."""
    usable = min(matched, max(0, prompt_tokens - 1))
    return usable // block * block


def bound_tokens(sent, block=1):
    """[tokens that could have hit] for `sent` = [(prompt ids, held ids)] in send order (held: held_after)."""
    seen, out = [], []
    for prompt, held in sent:
        packed = pack(prompt)
        best = max((lcp(packed, other) for other in seen), default=0)
        out.append(cacheable(best, len(prompt), block))
        seen.append(pack(held))
    return out


def conversation_successors(items):
    """{index: index of the next turn of the same conversation} for items = [(conversation key or None, turn)]
    (None: a request that is no conversation's turn)."""
    by_turn = {(key, turn): i for i, (key, turn) in enumerate(items) if key is not None}
    return {i: by_turn[(key, turn + 1)] for (key, turn), i in by_turn.items() if (key, turn + 1) in by_turn}


def run_bound(requests, block=1):
    """The bound of one run. requests = [{"tokens": prompt ids, "completion_tokens", "conversation": key or None,
    "turn": int}] in send order. Returns {"possible": tokens, "prompt": tokens, "ratio", "prompts_only_ratio" (the
    same bound without any reply tokens: what the engines can reach when no reply re-tokenizes as generated),
    "per_request": [possible tokens]}."""
    successors = conversation_successors([(r.get("conversation"), r.get("turn", 0)) for r in requests])
    sent, prompts_only = [], []
    for i, r in enumerate(requests):
        nxt = requests[successors[i]]["tokens"] if i in successors else None
        sent.append((r["tokens"], held_after(r["tokens"], r.get("completion_tokens", 0), nxt)))
        prompts_only.append((r["tokens"], r["tokens"]))
    per_request = bound_tokens(sent, block)
    total = sum(len(r["tokens"]) for r in requests)
    without = sum(bound_tokens(prompts_only, block))
    return {"possible": sum(per_request), "prompt": total, "ratio": sum(per_request) / total if total else 0.0,
            "prompts_only_ratio": without / total if total else 0.0, "per_request": per_request}


MISS_KINDS = ("first", "hit", "busy_slot", "evicted", "moved")


def classify_misses(records, bound_by_rid, hit_share=0.5):
    """Why each ok request of a run hit or missed, in send order, by its group (a prefix group or a conversation):
    {"first": its group's first request, "hit": cached at least `hit_share` of its bound, and the misses of a group
    seen before: "busy_slot" (its pod had served the group and a request of the same group was in flight there when
    it was sent: a slot engine (llama.cpp) keeps each slot's own cache, so the second request gets the other slot
    and computes the prefix again), "evicted" (its pod had served the group, none in flight: the prompt was
    replaced), "moved" (its pod had never served the group)}: counts."""
    ok = sorted((r for r in records if r.ok), key=lambda r: (r.send_s, r.rid))
    out = dict.fromkeys(MISS_KINDS, 0)
    served = {}
    for rec in ok:
        bound = bound_by_rid.get(rec.rid) or 0
        pods = served.setdefault(rec.group, set())
        if not pods:
            kind = "first"
        elif bound > 0 and rec.cached_tokens >= hit_share * bound:
            kind = "hit"
        elif rec.pod not in pods:
            kind = "moved"
        elif any(o is not rec and o.pod == rec.pod and o.group == rec.group and o.send_s < rec.send_s < o.end_s
                 for o in ok):
            kind = "busy_slot"
        else:
            kind = "evicted"
        out[kind] += 1
        pods.add(rec.pod)
    return out
