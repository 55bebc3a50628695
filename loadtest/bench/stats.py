"""Turning one strategy's records into the figures of a report row (pure functions, no I/O)."""
from collections import Counter

from bench.upper_bound import upper_bound_ratio


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
        "hit_ratio": hit, "upper_bound": bound, "of_bound": hit / bound if bound else float("nan"),
        "engine_hit_ratio": engine_hit_ratio,
        "prompt_tokens_mean": prompt / len(ok) if ok else 0.0,
        "prompt_tokens_match": all(r.prompt_tokens == r.expected_prompt_tokens for r in ok),
        "pod_requests": dict(sorted(per_pod.items())),
        "pod_load_max": max(counts, default=0), "pod_load_mean": mean_load,
        "pod_inflight_peak": max((max(v) for v in series.values()), default=0),
    }


def stage_ttft(records, stages, q=90):
    """TTFT percentile per rate stage: [(rate, value)] for stepped-rate workloads."""
    out = []
    for index, (rate, _) in enumerate(stages):
        values = [r.ttft_s for r in records if r.ok and r.stage == index and r.ttft_s >= 0]
        out.append((rate, percentile(values, q)))
    return out
