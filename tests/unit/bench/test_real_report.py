"""real_report: the real fleet's rows aggregated over seeds, the simulated fleets' paired errors against it, the
calibration tally, and the docs block it replaces."""
import json
import math

import pytest

from bench.aggregate import aggregate
from bench.real_report import (DOCS_BEGIN, DOCS_END, EXTRA_FIELDS, calibration_summary, calibration_table, dumps,
                               error_pct, last_valid, paired_errors, replace_docs, within_target)


def row(fleet, strategy, seed, ttft_p50, ttft_p90=None, valid=True, attempt=0, **extra):
    return {"fleet": fleet, "strategy": strategy, "seed": seed, "valid": valid, "attempt": attempt,
            "ttft_p50": ttft_p50, "ttft_p90": ttft_p90 if ttft_p90 is not None else 2 * ttft_p50, **extra}


def test_error_pct_and_the_target():
    """Ensures the error is (simulated - real) / real in %, None without a real figure, and the 20 % target is
    judged on the mean."""
    assert error_pct(1.2, 1.0) == pytest.approx(20.0) and error_pct(0.5, 1.0) == pytest.approx(-50.0)
    assert error_pct(1.0, 0.0) is None and error_pct(None, 1.0) is None and error_pct(float("nan"), 1.0) is None
    assert within_target([19.9, 50.0, 3]) and within_target([-20.0, 1.0, 2]) and not within_target([-20.1, 0.0, 2])
    assert not within_target([0.0, 0.0, 0])


def test_paired_errors_compare_the_same_seed_and_skip_invalid_runs():
    """Ensures each seed's simulated run is compared with the real run of the same seed and strategy, that an
    invalid run (or a seed without a real run) is left out, and the last valid attempt counts."""
    rows = [row("llama", "pc", 1, 1.0), row("llama", "pc", 2, 2.0), row("llama", "pc", 3, 1.0, valid=False),
            row("sim", "pc", 1, 1.1), row("sim", "pc", 2, 1.6), row("sim", "pc", 3, 1.0),
            row("sim", "pc", 4, 9.0),
            row("sim", "rnd", 1, 5.0), row("llama", "rnd", 1, 4.0, valid=False), row("llama", "rnd", 1, 4.0,
                                                                                      attempt=1)]
    mean, half, n = paired_errors(rows, "ttft_p50", "sim", "pc")
    assert n == 2 and mean == pytest.approx((10.0 - 20.0) / 2) and half > 0
    assert paired_errors(rows, "ttft_p50", "sim", "rnd")[:1] == [pytest.approx(25.0)]
    assert paired_errors(rows, "ttft_p50", "sim", "none")[2] == 0
    assert set(last_valid(rows)) >= {("llama", "rnd", 1), ("sim", "pc", 4)}


def workload(rows, fleets=("llama", "sim")):
    aggs = {f: aggregate([r for r in rows if r["fleet"] == f], ["pc", "rnd"], EXTRA_FIELDS) for f in fleets}
    return {"fleets": {f: {"flags": []} for f in fleets}, "aggregates": aggs, "runs": rows}


def full_rows(strategy, real, sim, seeds=(1, 2, 3)):
    out = []
    for seed in seeds:
        out.append(row("llama", strategy, seed, real, hit_ratio=0.5, retries=seed, deferred_mean=0.1 * seed))
        out.append(row("sim", strategy, seed, sim, hit_ratio=0.6))
    return out


def test_rows_aggregate_over_seeds_with_the_extra_fields():
    """Ensures the real fleet's rows aggregate per strategy over the valid seeds (mean ± t-interval), the extra
    fields (retries, the pods' queue) included."""
    rows = full_rows("pc", 1.0, 1.1) + full_rows("rnd", 2.0, 3.0)
    aggs = workload(rows)["aggregates"]
    assert aggs["llama"]["pc"]["seeds"] == [1, 2, 3]
    mean, half, n = aggs["llama"]["pc"]["retries"]
    assert (mean, n) == (2.0, 3) and half == pytest.approx(4.3027 * 1.0 / math.sqrt(3), rel=1e-4)
    assert aggs["llama"]["pc"]["deferred_mean"][0] == pytest.approx(0.2)
    assert aggs["sim"]["rnd"]["ttft_p50"][:1] == [3.0]


def test_calibration_table_and_tally():
    """Ensures the comparison table gives per strategy the real and simulated TTFT with the paired error, bold when
    outside ±20 %, and the tally counts the p50/p90 figures within the target per simulated fleet."""
    w = workload(full_rows("pc", 1.0, 1.1) + full_rows("rnd", 2.0, 3.0))
    table = calibration_table(w)
    assert table[0].startswith("| strategy | real p50 s | sim p50 (error) | real p90 s | sim p90 (error) |")
    pc = next(line for line in table if line.startswith("| pc |"))
    assert "1.100 ± 0.000 (+10 ± 0 %)" in pc and "2.200 ± 0.000 (+10 ± 0 %)" in pc
    rnd = next(line for line in table if line.startswith("| rnd |"))
    assert "3.000 ± 0.000 (**+50 ± 0 %**)" in rnd
    assert calibration_summary({"w": w}) == {"sim": (2, 4, pytest.approx(50.0))}
    assert calibration_table(workload(full_rows("pc", 1.0, 1.1), fleets=("sim",))) == []


def test_docs_block_is_replaced_between_the_markers():
    """Ensures only the text between the markers changes (markers kept), and missing markers stop the render."""
    text = f"intro\n{DOCS_BEGIN}\nold table\n{DOCS_END}\noutro\n"
    assert replace_docs(text, ["| a |", "| b |"]) == f"intro\n{DOCS_BEGIN}\n| a |\n| b |\n{DOCS_END}\noutro\n"
    with pytest.raises(SystemExit):
        replace_docs("no markers", ["x"])


def test_summary_json_writes_nan_as_null():
    """Ensures NaN (a figure with nothing to measure) becomes null in summary.json, nested or not."""
    assert json.loads(dumps({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": (2, float("nan"))}})) == \
        {"a": None, "b": [1.0, None], "c": {"d": [2, None]}}
