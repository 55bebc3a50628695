"""The upper bound on prefix-cache hits: the fraction of prompt tokens that could have been cached had every request
gone to a pod holding the longest previously seen prefix of its prompt, with a cache that never evicts.

Computed in the engine's own units: full 16-token blocks of the simulator's token ids (textgen), capped like the
engine's cached_tokens (full blocks within the first prompt - 1 tokens). Once a request is sent, the blocks of its
prompt and of its reply (the engine caches generated tokens' blocks too, all but the last token's; a multi-turn
history resends the reply) count as seen. "Previously seen" follows the order the requests were sent in the run being bounded, so it is the
best any routing could have done for that run.
"""
from bench.textgen import cacheable_tokens


def upper_bound_tokens(requests_in_send_order):
    """{rid: tokens that could have hit} for BenchRequests given in the order they were sent."""
    seen, out = set(), {}
    for req in requests_in_send_order:
        matched = 0
        for key in req.block_keys:
            if key not in seen:
                break
            matched += 1
        out[req.rid] = cacheable_tokens(matched, req.prompt_tokens)
        seen.update(req.cache_keys or req.block_keys)
    return out


def upper_bound_ratio(requests_by_rid, records):
    """(possible hit tokens, prompt tokens, ratio) over the requests in `records`, in their send order.
    Failed requests count too: the bound describes the workload as sent, not what the engines served."""
    ordered = [requests_by_rid[r.rid] for r in sorted(records, key=lambda r: (r.send_s, r.rid))]
    possible = upper_bound_tokens(ordered)
    hit = sum(possible.values())
    total = sum(req.prompt_tokens for req in ordered)
    return hit, total, (hit / total if total else 0.0)
