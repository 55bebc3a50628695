"""Turning one strategy's records into the figures of a report row (pure functions, no I/O).

Two rules live here, both stated in the report:
- lag: the load generator records how late each send was against its schedule (wall ms); a run whose lag p99
  exceeds LAG_LIMIT_MS is invalid (the client, not the server, shaped its arrivals);
- steady state of a stepped-rate stage: requests scheduled in the first WARMUP_FRACTION of a stage are warm-up
  (the queue left by the previous stage drains or builds there) and excluded; the stage's TTFT is the percentile
  over the rest; a stage whose TTFT p90 moved between its middle and last thirds by more than a factor
  NOT_STEADY_FACTOR or by more than NOT_STEADY_GROWTH_S is flagged "not steady": its queue was still growing (or
  draining), so its figure depends on the stage length. The absolute rule catches a large queue carried over from
  the previous stage that still grows by seconds, which the factor alone would let pass.
"""
from collections import Counter

from bench.upper_bound import upper_bound_ratio

LAG_LIMIT_MS = 10.0
WARMUP_FRACTION = 1.0 / 3.0
NOT_STEADY_FACTOR = 1.5
NOT_STEADY_GROWTH_S = 1.0


def percentile(values, q):
    """Linear-interpolated percentile (q in 0..100) of a list; NaN when empty."""
    if not values:
        return float("nan")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def pod_inflight_series(records, points=200):
    """{pod: [in-flight count at each sample time]}, and the sample times (simulated s): requests in flight per
    pod as the client saw them (send to last byte)."""
    ok = [r for r in records if r.pod]
    if not ok:
        return [], {}
    end = max(r.end_s for r in ok)
    times = [end * i / (points - 1) for i in range(points)]
    series = {}
    for pod in sorted({r.pod for r in ok}):
        spans = [(r.send_s, r.end_s) for r in ok if r.pod == pod]
        series[pod] = [sum(1 for s, e in spans if s <= t < e) for t in times]
    return times, series


def lag_summary(records, limit_ms=LAG_LIMIT_MS):
    """Send lag p50/p99/max (wall ms) over every request sent, and whether the run is valid (p99 <= limit)."""
    lags = [r.lag_ms for r in records]
    p99 = percentile(lags, 99)
    return {"lag_p50_ms": percentile(lags, 50), "lag_p99_ms": p99, "lag_max_ms": max(lags, default=float("nan")),
            "valid": bool(lags) and p99 <= limit_ms}


def stage_bounds(stages):
    """[(start, end)] of each stage, in simulated seconds since the run started (stages are back to back)."""
    out, t = [], 0.0
    for _, seconds in stages:
        out.append((t, t + seconds))
        t += seconds
    return out


def stage_part(at_s, start, end):
    """0 = warm-up (the first WARMUP_FRACTION of the stage), 1 = the middle part, 2 = the last third."""
    position = (at_s - start) / (end - start)
    if position < WARMUP_FRACTION:
        return 0
    return 1 if position < 1.0 - (1.0 - WARMUP_FRACTION) / 2.0 else 2


def is_steady(middle, last):
    """Whether a stage's TTFT percentile held between its middle and last thirds (see the module docstring)."""
    low, high = min(middle, last), max(middle, last)
    return not (high > NOT_STEADY_FACTOR * low or high - low > NOT_STEADY_GROWTH_S)


def steady_stages(records, stages, requests_by_rid, q=90):
    """Per stage, the steady-state TTFT percentile (warm-up excluded) and the steadiness check:
    [{"rate", "ttft": p over the middle and last parts, "middle", "last": p over each part, "n": requests used,
      "steady": False when last and middle differ by more than a factor NOT_STEADY_FACTOR or NOT_STEADY_GROWTH_S
      seconds, None when a part has no request}]."""
    parts = [[[], [], []] for _ in stages]
    bounds = stage_bounds(stages)
    for rec in records:
        if not rec.ok or rec.ttft_s < 0 or not 0 <= rec.stage < len(stages):
            continue
        start, end = bounds[rec.stage]
        parts[rec.stage][stage_part(requests_by_rid[rec.rid].at_s, start, end)].append(rec.ttft_s)
    out = []
    for (rate, _), (_, middle, last) in zip(stages, parts):
        mid_p, last_p = percentile(middle, q), percentile(last, q)
        steady = None if not middle or not last else is_steady(mid_p, last_p)
        out.append({"rate": rate, "ttft": percentile(middle + last, q), "middle": mid_p, "last": last_p,
                    "n": len(middle) + len(last), "steady": steady})
    return out


def tpot_values(records, token_scale=1.0):
    """Time per output token of each served request with two output tokens or more: (e2e - TTFT) / (output tokens
    - 1), the decode time after the first token spread over the rest (what decode interference slows, and what
    disaggregation removes), per full-size token (x token_scale, as ITL)."""
    return [(r.e2e_s - r.ttft_s) / (r.completion_tokens - 1) * token_scale for r in records
            if r.ok and r.completion_tokens >= 2 and 0 <= r.ttft_s <= r.e2e_s]


def summarize(strategy, records, requests_by_rid, wall_s, engine_hit_ratio=None, token_scale=1.0):
    """The report row of one strategy's run: throughput, latency percentiles, hit ratios, pod load, errors.
    Output tokens/s and ITL are given per full-size token: a workload at token scale k sends one token for every
    1/k of the full-size workload's, each taking 1/k as long to decode (see workloads.py)."""
    ok = [r for r in records if r.ok]
    sent_total = len(requests_by_rid)
    errors = len(records) - len(ok) + (sent_total - len(records))   # failed + never sent before the deadline
    first = min((r.send_s for r in records), default=0.0)
    last = max((r.end_s for r in ok), default=first)
    duration = max(last - first, 1e-9)
    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)
    hit = cached / prompt if prompt else 0.0
    _, _, bound = upper_bound_ratio(requests_by_rid, records)
    ttfts = [r.ttft_s for r in ok if r.ttft_s >= 0]
    itls = [gap for r in ok for gap in r.itl_s]
    tpots = tpot_values(ok, token_scale)
    prefill_pods = Counter(r.prefill_pod for r in ok if r.prefill_pod)
    per_pod = Counter(r.pod for r in ok)
    _, series = pod_inflight_series(ok)
    counts = list(per_pod.values())
    mean_load = sum(counts) / len(counts) if counts else 0.0
    error_kinds = Counter((r.error or f"HTTP {r.status}")[:60] for r in records if not r.ok)
    return {
        "strategy": strategy,
        "requests": sent_total, "ok": len(ok), "errors": errors,
        "error_kinds": dict(error_kinds.most_common(3)),
        "duration_s": duration, "wall_s": wall_s,
        "throughput_rps": len(ok) / duration,
        "output_tps": sum(r.completion_tokens for r in ok) / duration / token_scale,
        "ttft_p50": percentile(ttfts, 50), "ttft_p90": percentile(ttfts, 90), "ttft_p99": percentile(ttfts, 99),
        "itl_p50": percentile(itls, 50) * token_scale, "itl_p99": percentile(itls, 99) * token_scale,
        "e2e_p50": percentile([r.e2e_s for r in ok], 50),
        "tpot_p50": percentile(tpots, 50), "tpot_p90": percentile(tpots, 90),
        "hit_ratio": hit, "upper_bound": bound, "of_bound": hit / bound if bound else float("nan"),
        "engine_hit_ratio": engine_hit_ratio,
        "prompt_tokens_mean": prompt / len(ok) if ok else 0.0,
        "prompt_tokens_match": all(r.prompt_tokens == r.expected_prompt_tokens for r in ok),
        "pod_requests": dict(sorted(per_pod.items())),
        "prefill_pod_requests": dict(sorted(prefill_pods.items())),   # the prefill-pod header (pd runs), else {}
        "pod_load_max": max(counts, default=0), "pod_load_mean": mean_load,
        "pod_inflight_peak": max((max(v) for v in series.values()), default=0),
    } | lag_summary(records)


def stage_ttft(records, stages, q=90):
    """TTFT percentile per rate stage over all its requests (warm-up included): [(rate, value)]."""
    out = []
    for index, (rate, _) in enumerate(stages):
        values = [r.ttft_s for r in records if r.ok and r.stage == index and r.ttft_s >= 0]
        out.append((rate, percentile(values, q)))
    return out
