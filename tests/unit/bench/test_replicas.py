"""bench/replicas.py: sums over several gateways' /metrics and the sync lag p99 from histogram buckets, against
hand-computed cases."""
import pytest

from bench.replicas import counter_sum, gateway_notes, histogram_buckets, histogram_quantile, sync_notes

LAG = "prefixgate_state_sync_lag_seconds"


def replica_text(sent, received, buckets, sent_bytes, connected=1):
    """One replica's state sync series in Prometheus text format; `buckets` = cumulative counts for le 0.01, 0.1,
    1 and +Inf."""
    lines = ["# TYPE prefixgate_state_sync_records_total counter",
             f'prefixgate_state_sync_records_total{{direction="sent"}} {sent}',
             f'prefixgate_state_sync_records_total{{direction="received"}} {received}',
             "# TYPE prefixgate_state_sync_records_dropped_total counter",
             'prefixgate_state_sync_records_dropped_total{reason="over_rate"} 2',
             'prefixgate_state_sync_records_dropped_total{reason="unknown_pod"} 1',
             "# TYPE prefixgate_state_sync_bytes_total counter",
             f'prefixgate_state_sync_bytes_total{{direction="sent"}} {sent_bytes}',
             'prefixgate_state_sync_bytes_total{direction="received"} 5',
             "# TYPE prefixgate_state_sync_connected gauge", f"prefixgate_state_sync_connected {connected}",
             f"# TYPE {LAG} histogram"]
    lines += [f'{LAG}_bucket{{le="{le}"}} {n}' for le, n in zip(("0.01", "0.1", "1", "+Inf"), buckets)]
    lines += [f"{LAG}_sum 1.5", f"{LAG}_count {buckets[-1]}",
              "# TYPE prefixgate_remote_tokenizer_requests_total counter",
              'prefixgate_remote_tokenizer_requests_total{outcome="ok"} 40',
              'prefixgate_remote_tokenizer_requests_total{outcome="timeout"} 2',
              'prefixgate_remote_tokenizer_requests_total{outcome="no_pod"} 1']
    return "\n".join(lines) + "\n"


def test_histogram_quantile_interpolates_within_the_bucket_like_prometheus():
    """Ensures the rank's bucket is found and the value interpolated linearly from the bucket below's bound (0
    for the first), the +Inf bucket gives the highest finite bound, and no observations give None."""
    buckets = [(0.01, 50.0), (0.1, 90.0), (1.0, 100.0), (float("inf"), 100.0)]
    assert histogram_quantile(buckets, 0.5) == pytest.approx(0.01)
    assert histogram_quantile(buckets, 0.25) == pytest.approx(0.005)
    assert histogram_quantile(buckets, 0.7) == pytest.approx(0.01 + 0.09 * 20 / 40)
    assert histogram_quantile(buckets, 0.99) == pytest.approx(0.1 + 0.9 * 9 / 10)
    assert histogram_quantile([(0.1, 1.0), (float("inf"), 10.0)], 0.99) == pytest.approx(0.1)
    assert histogram_quantile([(0.1, 0.0), (float("inf"), 0.0)], 0.99) is None
    assert histogram_quantile([], 0.99) is None


def test_buckets_and_counters_are_summed_over_replicas():
    """Ensures two replicas' buckets add up per bound (so the p99 is the fleet's, not an average of p99s), counters
    add up per label value, and a series no replica exports is None."""
    texts = [replica_text(10, 20, (0, 90, 99, 100), 1000), replica_text(30, 5, (100, 100, 100, 100), 3000, 0)]
    assert histogram_buckets(texts, LAG) == [(0.01, 100.0), (0.1, 190.0), (1.0, 199.0), (float("inf"), 200.0)]
    assert counter_sum(texts, "prefixgate_state_sync_records_total", direction="sent") == 40
    assert counter_sum(texts, "prefixgate_state_sync_records_total", direction=("sent", "received")) == 65
    assert counter_sum(texts, "prefixgate_state_sync_reconnects_total") is None
    notes = sync_notes(texts, answered=50)
    assert notes["sync_records_sent"] == 40 and notes["sync_records_received"] == 25
    assert notes["sync_records_dropped"] == 6 and notes["sync_connected"] == 1  # every reason, both replicas
    assert notes["sync_bytes_per_request"] == pytest.approx(4000 / 50)
    assert notes["sync_lag_p99_s"] == pytest.approx(0.1 + 0.9 * (198 - 190) / 9)
    assert notes["sync_redis_errors"] is None
    assert gateway_notes(texts) == {"tokenize_failures": 6, "kv_resets": 0, "kv_gaps": 0}


def test_without_sync_series_every_sync_figure_is_none():
    """Ensures replicas without state sync (or a build without it) report no sync figures rather than zeros."""
    texts = ['# TYPE prefixgate_requests_total counter\nprefixgate_requests_total{pod="a"} 3\n'] * 2
    assert set(sync_notes(texts, answered=6).values()) == {None}
