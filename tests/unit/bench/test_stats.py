"""stats: percentiles, the send-lag validity rule, the steady-state stage rule and a report row, by hand."""
import math

import pytest

from bench.model import BenchRequest, Record
from bench.stats import (LAG_LIMIT_MS, is_steady, lag_summary, percentile, stage_bounds, stage_part, stage_ttft,
                         steady_stages, summarize, tpot_values)


def rec(rid, ttft=0.1, stage=0, lag=0.0, send=0.0, **kw):
    r = Record(rid=rid, group=0, stage=stage, send_s=send, status=200, ttft_s=ttft, e2e_s=ttft + 1.0, lag_ms=lag)
    for key, value in kw.items():
        setattr(r, key, value)
    return r


def breq(rid, at=0.0, prompt=100, keys=(), stage=0):
    return BenchRequest(rid=rid, path="/", body=b"", prompt_tokens=prompt, max_tokens=10, block_keys=list(keys),
                        at_s=at, stage=stage)


def test_percentile_interpolates_linearly():
    """Ensures the percentile is linear between order statistics: position (n - 1) x q / 100."""
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)     # position 2.7
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 100) == 4
    assert percentile([5], 99) == 5
    assert math.isnan(percentile([], 50))
    assert percentile(list(range(101)), 99) == 99


def test_a_run_is_invalid_when_lag_p99_exceeds_the_limit():
    """Ensures lag p50/p99/max are computed over every send and the run is valid iff lag p99 <= 10 ms."""
    assert LAG_LIMIT_MS == 10.0
    one_late = lag_summary([rec(i, lag=1.0) for i in range(99)] + [rec(99, lag=50.0)])
    assert one_late["lag_p99_ms"] == pytest.approx(1.49)     # position 98.01: 1 + 0.01 x 49
    assert one_late["lag_max_ms"] == 50.0 and one_late["lag_p50_ms"] == 1.0 and one_late["valid"]
    two_late = lag_summary([rec(i, lag=1.0) for i in range(98)] + [rec(98, lag=50.0), rec(99, lag=50.0)])
    assert two_late["lag_p99_ms"] == 50.0 and not two_late["valid"]
    assert lag_summary([rec(0, lag=10.0)])["valid"]          # the limit itself is allowed
    assert not lag_summary([rec(0, lag=10.01)])["valid"]
    assert not lag_summary([])["valid"]                      # nothing sent: nothing to trust


def test_stage_parts_split_each_stage_in_thirds():
    """Ensures a stage's first third is warm-up (0), then the middle (1) and last (2) thirds."""
    assert stage_bounds([(6, 9.0), (12, 9.0)]) == [(0.0, 9.0), (9.0, 18.0)]
    assert [stage_part(t, 9.0, 18.0) for t in (9.0, 11.9, 12.1, 14.9, 15.1, 17.9)] == [0, 0, 1, 1, 2, 2]


def test_steady_state_excludes_warm_up_and_flags_a_growing_queue():
    """Ensures the stage TTFT is the p90 of the middle and last thirds only, and a stage whose last third's p90
    exceeds 1.5x the middle third's, or exceeds it by more than 1 s, is flagged not steady."""
    stages = [(6.0, 9.0), (12.0, 9.0), (14.0, 9.0)]
    reqs, recs = {}, []

    def add(at, ttft, stage):
        rid = len(reqs)
        reqs[rid] = breq(rid, at=at, stage=stage)
        recs.append(rec(rid, ttft=ttft, stage=stage))

    for i in range(10):
        add(0.5 + i * 0.2, 100.0, 0)      # warm-up of stage 0: huge TTFT, excluded
        add(3.5 + i * 0.2, 1.0, 0)        # middle
        add(6.5 + i * 0.2, 1.4, 0)        # last: 1.4 <= 1.5 x 1.0: steady
        add(9.5 + i * 0.2, 100.0, 1)
        add(12.5 + i * 0.2, 1.0, 1)
        add(15.5 + i * 0.2, 1.6, 1)       # last: 1.6 > 1.5: not steady
        add(21.5 + i * 0.2, 10.0, 2)      # a queue carried over: middle 10 s,
        add(24.5 + i * 0.2, 11.5, 2)      # last 11.5 s: only 1.15x, but 1.5 s more than the middle: not steady
    failed = rec(999, ttft=-1.0, stage=0, error="HTTP 500")
    reqs[999] = breq(999, at=4.0)
    s0, s1, s2 = steady_stages(recs + [failed], stages, reqs)
    assert s0["rate"] == 6.0 and s0["n"] == 20 and s0["middle"] == 1.0 and s0["last"] == pytest.approx(1.4)
    assert s0["ttft"] == pytest.approx(1.4) and s0["steady"] is True
    assert s1["steady"] is False and s1["last"] == pytest.approx(1.6)
    assert s2["steady"] is False and s2["middle"] == 10.0
    # Warm-up included (the old per-stage figure), the p90 would be 100.
    assert stage_ttft(recs, stages)[0] == (6.0, 100.0)


def test_a_stage_is_steady_when_its_p90_holds_within_1_5x_and_1_s_either_way():
    """Ensures the steadiness rule by hand: growth or draining by more than 1.5x, or by more than 1 s, is not
    steady; the limits themselves are."""
    assert is_steady(1.0, 1.5) and is_steady(1.5, 1.0) and is_steady(10.0, 11.0) and is_steady(11.0, 10.0)
    assert not is_steady(1.0, 1.51) and not is_steady(1.51, 1.0)           # the factor, both ways
    assert not is_steady(10.0, 11.01) and not is_steady(60.0, 40.0)          # the seconds, both ways
    assert is_steady(0.2, 0.3) and not is_steady(0.2, 0.31)


def test_a_stage_without_requests_in_a_part_has_no_verdict():
    """Ensures a stage with an empty middle or last third is neither steady nor not steady."""
    reqs = {0: breq(0, at=4.0)}
    (only,) = steady_stages([rec(0, ttft=0.5)], [(1.0, 9.0)], reqs)
    assert only["steady"] is None and only["ttft"] == 0.5 and only["n"] == 1


def test_summarize_reports_hits_bound_lag_and_errors():
    """Ensures a row's hit ratio, bound, errors (failed + never sent), pod load and lag figures."""
    by_rid = {0: breq(0, prompt=48, keys="ab"), 1: breq(1, prompt=48, keys="ab"), 2: breq(2, prompt=48, keys="ab")}
    r0 = rec(0, send=0.0, lag=1.0, pod="p1", prompt_tokens=48, cached_tokens=0, completion_tokens=10)
    r1 = rec(1, send=1.0, lag=3.0, pod="p2", prompt_tokens=48, cached_tokens=32, completion_tokens=10)
    row = summarize("x", [r0, r1], by_rid, wall_s=2.0, token_scale=0.5)
    assert row["errors"] == 1 and row["ok"] == 2 and row["requests"] == 3
    assert row["hit_ratio"] == pytest.approx(32 / 96)
    assert row["upper_bound"] == pytest.approx(32 / 96) and row["of_bound"] == pytest.approx(1.0)
    assert row["pod_requests"] == {"p1": 1, "p2": 1} and row["pod_load_max"] == 1
    assert row["output_tps"] == pytest.approx(20 / 2.1 / 0.5)     # first send 0 to last end 1.1 + 1.0
    assert row["lag_max_ms"] == 3.0 and row["valid"] and row["prompt_tokens_match"] is False


def test_tpot_spreads_the_decode_time_after_the_first_token_over_the_rest():
    """Ensures time per output token = (e2e - TTFT) / (output tokens - 1) per full-size token (x token scale), that
    requests with fewer than two output tokens, failed ones and ones without a first token are left out, and that
    the row's TPOT p50/p90 are percentiles of it."""
    a = rec(0, ttft=0.5, completion_tokens=11)            # e2e 1.5: 1.0 s over 10 tokens
    b = rec(1, ttft=0.2, completion_tokens=5)             # e2e 1.2: 1.0 s over 4 tokens
    one = rec(2, ttft=0.3, completion_tokens=1)
    failed = rec(3, ttft=0.1, completion_tokens=9, status=500)
    no_token = rec(4, ttft=-1.0, completion_tokens=9)
    assert tpot_values([a, b, one, failed, no_token]) == pytest.approx([0.1, 0.25])
    assert tpot_values([a], token_scale=0.25) == pytest.approx([0.025])
    by_rid = {r.rid: breq(r.rid) for r in (a, b, one)}
    row = summarize("x", [a, b, one], by_rid, wall_s=1.0, token_scale=0.5)
    assert row["tpot_p50"] == pytest.approx(percentile([0.05, 0.125], 50))
    assert row["tpot_p90"] == pytest.approx(percentile([0.05, 0.125], 90))
    assert row["prefill_pod_requests"] == {}
    a.prefill_pod, b.prefill_pod = "prefill-0", "prefill-0"
    assert summarize("x", [a, b], by_rid, wall_s=1.0)["prefill_pod_requests"] == {"prefill-0": 2}
