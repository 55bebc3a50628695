"""Disaggregated prefill/decode runs (issue 26): a strategy named `pd-<strategy>` runs <strategy>'s routing on a
fleet of the same size split by role, the first `--prefill-pods` P pods `role: prefill` (simulator `--role
prefill`) and the rest `role: decode`; the gateway's config is <strategy>'s (its `disaggregation` defaults:
connector mode, decode legs by least-request, every request split). The aggregated run of the same strategy is the
comparison: every pod `both`. Pure functions: the roles, the simulator flags and pods-file entries they give, the
gateway's `prefixgate_pd_*` figures, the prefill pods' hit ratio and the comparison the report prints.

Why a separate hit ratio: a decode leg's usage reports the pulled prompt as cached (`cached_tokens` = prompt - 1,
as vLLM's `num_cached_tokens` does), so the client-side token hit ratio of a pd run says nothing about routing. The
prefill pods' own `vllm:prefix_cache_hits_total` / `queries_total` count each prefill leg's lookup, the figure to
compare with the aggregated fleet's (whose pods' counters count every request's).
"""
from bench.replicas import counter_sum

PD_PREFIX = "pd-"
PREFILL, DECODE, BOTH = "prefill", "decode", "both"
DEFAULT_PREFILL_PODS = 2
DEFAULT_KV_TRANSFER_MS_PER_1K = 2.0   # the simulator's own default
PD_OUTCOMES = ("disaggregated", "no_transfer_params", "prefill_failed", "sidecar", "aggregated", "prefill_busy")
# The targets of issue 26 item 7, reported (never asserted): TPOT p90 at least 1.5x better disaggregated, TTFT p90
# no more than 1.2x worse, the prefill pods' hit ratio within 5 points of the aggregated strategy's.
TPOT_GAIN_TARGET, TTFT_LOSS_LIMIT, HIT_POINTS_LIMIT = 1.5, 1.2, 5.0


def is_pd(name):
    """Whether a strategy name (settings after ':' allowed) asks for a disaggregated fleet."""
    return name.startswith(PD_PREFIX)


def base_strategy(name):
    """The aggregated strategy a pd name runs (`pd-prefix-cache:x=1` -> `prefix-cache:x=1`); other names as given."""
    return name[len(PD_PREFIX):] if is_pd(name) else name


def fleet_roles(pods, prefill_pods, pd):
    """Each pod's role, in pod order: for a pd run the first `prefill_pods` prefill and the rest decode; else
    every pod both (an aggregated fleet). A pd fleet needs at least one of each."""
    if not pd:
        return [BOTH] * pods
    if not 1 <= prefill_pods < pods:
        raise ValueError(f"--prefill-pods {prefill_pods}: a disaggregated fleet of {pods} pods needs 1 to "
                         f"{pods - 1} prefill pods")
    return [PREFILL] * prefill_pods + [DECODE] * (pods - prefill_pods)


def sim_role_args(role, kv_transfer_ms_per_1k):
    """The simulator flags of a pod of `role`: none for `both` (the default, as before pd runs existed)."""
    if role == BOTH:
        return []
    return ["--role", role, "--kv-transfer-ms-per-1k-tokens", f"{kv_transfer_ms_per_1k:g}"]


def with_role(entry, role):
    """A pods-file entry with its `role` (none for `both`: the gateway's default, so aggregated runs' pods files
    stay as they were)."""
    return entry if role == BOTH else {**entry, "role": role}


def prefill_hit_ratio(per_pod, roles):
    """Engine-reported cached / queried prompt tokens summed over the prefill pods (over every pod when the fleet
    has none: the aggregated run's figure). `per_pod`: [{"hits", "queries"}] in pod order, or None when a pod did
    not answer its scrape. None without queries."""
    if per_pod is None:
        return None
    chosen = [c for c, role in zip(per_pod, roles) if role == PREFILL] if PREFILL in roles else per_pod
    queries = sum(c["queries"] for c in chosen)
    return sum(c["hits"] for c in chosen) / queries if queries else None


def _mean_seconds(texts, name, time_scale):
    """A histogram's mean (sum / count) over the gateways, in simulated seconds (the gateway measures wall time);
    None without observations."""
    count = counter_sum(texts, f"{name}_count")
    total = counter_sum(texts, f"{name}_sum")
    if not count or total is None:
        return None
    return total / count / time_scale


def pd_notes(texts, time_scale):
    """Row fields from the gateways' /metrics texts: requests per `prefixgate_pd_requests_total` outcome (None for
    a gateway without the series), and the mean prefill leg and KV hand-off in simulated seconds."""
    if counter_sum(texts, "prefixgate_pd_requests_total") is None:
        outcomes = None
    else:
        outcomes = {o: int(counter_sum(texts, "prefixgate_pd_requests_total", outcome=o) or 0) for o in PD_OUTCOMES}
    return {"pd_outcomes": outcomes,
            "pd_prefill_s_mean": _mean_seconds(texts, "prefixgate_pd_prefill_seconds", time_scale),
            "pd_handoff_s_mean": _mean_seconds(texts, "prefixgate_pd_handoff_seconds", time_scale)}


def _mean(agg, key):
    stat = agg.get(key) or [None, None, 0]
    return stat[0] if stat[2] else None


def pd_comparison(aggregates):
    """Each pd strategy against its aggregated strategy when both ran, from the means over the valid seeds:
    [{"pd", "aggregated", "tpot_gain": aggregated TPOT p90 / pd's (>= TPOT_GAIN_TARGET wanted), "ttft_ratio": pd
    TTFT p90 / aggregated's (<= TTFT_LOSS_LIMIT wanted), "hit_points": (pd prefill pods' hit ratio - aggregated
    fleet's) x 100 (within HIT_POINTS_LIMIT either way wanted), and "meets": {target: True/False/None}}]."""
    out = []
    for name, agg in aggregates.items():
        base = base_strategy(name)
        if not is_pd(name) or base not in aggregates:
            continue
        ref = aggregates[base]
        tpot_pd, tpot_ref = _mean(agg, "tpot_p90"), _mean(ref, "tpot_p90")
        ttft_pd, ttft_ref = _mean(agg, "ttft_p90"), _mean(ref, "ttft_p90")
        hit_pd, hit_ref = _mean(agg, "prefill_hit_ratio"), _mean(ref, "prefill_hit_ratio")
        gain = tpot_ref / tpot_pd if tpot_pd and tpot_ref is not None else None
        ratio = ttft_pd / ttft_ref if ttft_ref and ttft_pd is not None else None
        points = (hit_pd - hit_ref) * 100.0 if hit_pd is not None and hit_ref is not None else None
        out.append({"pd": name, "aggregated": base, "tpot_gain": gain, "ttft_ratio": ratio, "hit_points": points,
                    "meets": {"tpot": None if gain is None else gain >= TPOT_GAIN_TARGET,
                              "ttft": None if ratio is None else ratio <= TTFT_LOSS_LIMIT,
                              "hit": None if points is None else abs(points) <= HIT_POINTS_LIMIT}})
    return out
