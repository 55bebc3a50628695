"""Figures over seeds: mean and 95 % confidence interval (Student t, n - 1 degrees of freedom) per strategy, and
each strategy's hit ratio as a fraction of the finite-cache oracle's in the same seed. Pure functions.

Which runs count: only valid ones (send lag p99 within the limit, see stats.py); an invalid run is rerun by the
runner, and one still invalid is left out of the aggregates, which say how many seeds they use.
"""
import math

# Two-sided 95 % quantiles of Student's t: t such that P(|T| <= t) = 0.95, by degrees of freedom (standard tables;
# tests/unit/bench/test_aggregate.py checks them against a numerical integral of the t density).
T95 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
       10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199, 17: 2.1098, 18: 2.1009,
       19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639, 25: 2.0595, 26: 2.0555, 27: 2.0518,
       28: 2.0484, 29: 2.0452, 30: 2.0423, 40: 2.0211, 60: 2.0003, 120: 1.9799}
Z95 = 1.9600


def t95(df):
    """The 95 % two-sided t quantile for df degrees of freedom (between table rows: linear in 1/df)."""
    if df < 1:
        raise ValueError("a confidence interval needs at least 2 values")
    if df in T95:
        return T95[df]
    rows = sorted(T95)
    if df > rows[-1]:
        lo, hi, t_lo, t_hi = rows[-1], math.inf, T95[rows[-1]], Z95
    else:
        hi = next(r for r in rows if r > df)
        lo = max(r for r in rows if r < df)
        t_lo, t_hi = T95[lo], T95[hi]
    weight = (1 / lo - 1 / df) / (1 / lo - (0 if hi == math.inf else 1 / hi))
    return t_lo + (t_hi - t_lo) * weight


def mean_ci(values):
    """(mean, half-width of the 95 % confidence interval, n) of the finite values; half-width NaN when n < 2,
    everything NaN when n = 0."""
    data = [v for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]
    n = len(data)
    if n == 0:
        return float("nan"), float("nan"), 0
    mean = sum(data) / n
    if n < 2:
        return mean, float("nan"), n
    sd = math.sqrt(sum((v - mean) ** 2 for v in data) / (n - 1))
    return mean, t95(n - 1) * sd / math.sqrt(n), n


# Row fields aggregated over seeds (numbers in every run's row).
FIELDS = ["throughput_rps", "output_tps", "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p99", "e2e_p50",
          "tpot_p50", "tpot_p90", "prefill_hit_ratio", "pd_prefill_s_mean", "pd_handoff_s_mean",
          "hit_ratio", "upper_bound", "of_bound", "of_oracle", "engine_hit_ratio", "prediction_accuracy", "pod_load_max", "pod_load_mean",
          "pod_inflight_peak", "lag_p50_ms", "lag_p99_ms", "lag_max_ms", "preemptions", "errors", "wall_s",
          # several replicas (bench/replicas.py; absent otherwise)
          "sync_lag_p99_s", "sync_records_sent", "sync_records_received", "sync_records_dropped",
          "sync_bytes_per_request", "sync_redis_errors", "sync_reconnects", "redis_used_memory",
          # the decisions (bench/decisions.py)
          "follow_rate", "hit_followed", "hit_moved", "ttft_p90_followed", "ttft_p90_moved", "moved_share_of_misses",
          "inflight_gap_moved", "pods_per_group", "pod_load_cv", "match_moved_mean"]


def add_oracle_ratios(runs, oracle="oracle"):
    """Sets each run's `of_oracle` = its hit ratio / the oracle's valid run's in the same seed (None without one).
    `runs` = the run rows of one workload, each with "strategy", "seed", "valid" and "hit_ratio"."""
    best = {r["seed"]: r["hit_ratio"] for r in runs if r["strategy"] == oracle and r["valid"]}
    for r in runs:
        ref = best.get(r["seed"])
        r["of_oracle"] = r["hit_ratio"] / ref if ref else None
    return runs


def aggregate(runs, strategies, extra_fields=()):
    """{strategy: {"seeds": valid seeds used, "invalid": invalid runs, FIELD: [mean, half-width, n], "stages":
    [{"rate", "ttft": [mean, hw, n], "not_steady": runs flagged, "runs": runs with a verdict}]}} over the valid runs
    (the last attempt per seed); `extra_fields`: more row fields aggregated the same way."""
    out = {}
    for name in strategies:
        mine = [r for r in runs if r["strategy"] == name]
        valid = [r for r in mine if r["valid"]]
        entry = {"seeds": sorted(r["seed"] for r in valid), "invalid": sum(1 for r in mine if not r["valid"])}
        for key in [*FIELDS, *extra_fields]:
            entry[key] = list(mean_ci([r.get(key) for r in valid]))
        stages = [r["stages"] for r in valid if r.get("stages")]
        if stages:
            entry["stages"] = []
            for index, first in enumerate(stages[0]):
                cells = [s[index] for s in stages]
                entry["stages"].append({
                    "rate": first["rate"], "ttft": list(mean_ci([c["ttft"] for c in cells])),
                    "not_steady": sum(1 for c in cells if c["steady"] is False),
                    "runs": sum(1 for c in cells if c["steady"] is not None)})
        out[name] = entry
    return out


def short_of_seeds(aggregates, minimum):
    """Strategies with fewer than `minimum` valid seeds: [(strategy, valid seeds)]."""
    return [(name, len(a["seeds"])) for name, a in aggregates.items() if len(a["seeds"]) < minimum]
