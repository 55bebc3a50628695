"""What the gateways of a run say in their /metrics, summed over the replicas when there are several: the counters
the run's row carries, the requests each replica answered, and the state sync figures (records and bytes exchanged
through Redis, and the sync lag p99 from the replicas' histogram buckets added up). Pure functions over the
Prometheus text each gateway served."""
import math

from prometheus_client.parser import text_string_to_metric_families

SYNC = "prefixgate_state_sync"
# Gateway series summed into a run's row: what went wrong on the way to a decision, if anything. name: (series,
# {label: accepted values}).
GATEWAY_COUNTERS = {
    "tokenize_failures": ("prefixgate_remote_tokenizer_requests_total", {"outcome": ("error", "timeout", "no_pod")}),
    "kv_resets": ("prefixgate_kv_events_resets_total", {}),
    "kv_gaps": ("prefixgate_kv_events_gaps_total", {}),
}


def samples(texts):
    """Every sample of every text, as (name, labels, value)."""
    return [(s.name, s.labels, s.value) for text in texts for family in text_string_to_metric_families(text)
            for s in family.samples]


def counter_sum(texts, name, **match):
    """The sum of the samples called `name` whose labels take one of the accepted values (a value or a tuple) over
    every text; None when no text has the series (a gateway that does not export it)."""
    wanted = {k: v if isinstance(v, tuple) else (v,) for k, v in match.items()}
    values = [value for sample, labels, value in samples(texts)
              if sample == name and all(labels.get(k) in ok for k, ok in wanted.items())]
    return sum(values) if values else None


def histogram_buckets(texts, name):
    """[(upper bound, cumulative count)] of histogram `name`, every series of every text added up, by bound."""
    counts = {}
    for sample, labels, value in samples(texts):
        if sample == name + "_bucket":
            le = float(labels["le"])
            counts[le] = counts.get(le, 0.0) + value
    return sorted(counts.items())


def histogram_quantile(buckets, q):
    """The q-quantile (0..1) of cumulative buckets as Prometheus estimates it: linear within the bucket the rank
    falls in (from 0 for the first); the highest finite bound when it falls in +Inf. None without observations."""
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = le, count
    return lower


def requests_answered(text):
    """The requests one gateway counted (prefixgate_requests_total, every pod and status)."""
    return int(counter_sum([text], "prefixgate_requests_total") or 0)


def gateway_notes(texts):
    """Row fields of GATEWAY_COUNTERS summed over the gateways (0 where a series is missing)."""
    return {key: int(counter_sum(texts, name, **match) or 0) for key, (name, match) in GATEWAY_COUNTERS.items()}


def sync_notes(texts, answered):
    """Row fields of the state sync between the replicas: records sent / received / dropped, bytes sent per
    request answered (`answered`: by the load generator), the sync lag p99 in seconds, snapshot loads, Redis errors
    and reconnections, and how many replicas are connected to Redis at the end. None where the gateways export no
    such series (sync off, or a build without it)."""
    sent_bytes = counter_sum(texts, f"{SYNC}_bytes_total", direction="sent")
    connected = counter_sum(texts, f"{SYNC}_connected")
    return {
        "sync_records_sent": counter_sum(texts, f"{SYNC}_records_total", direction="sent"),
        "sync_records_received": counter_sum(texts, f"{SYNC}_records_total", direction="received"),
        "sync_records_dropped": counter_sum(texts, f"{SYNC}_records_dropped_total"),
        "sync_bytes_sent": sent_bytes,
        "sync_bytes_per_request": sent_bytes / answered if sent_bytes is not None and answered else None,
        "sync_lag_p99_s": histogram_quantile(histogram_buckets(texts, f"{SYNC}_lag_seconds"), 0.99),
        "sync_snapshot_loads": counter_sum(texts, f"{SYNC}_snapshot_loads_total"),
        "sync_redis_errors": counter_sum(texts, f"{SYNC}_redis_errors_total"),
        "sync_reconnects": counter_sum(texts, f"{SYNC}_reconnects_total"),
        "sync_connected": None if connected is None else int(connected),
    }
