"""The quality report's TPOT columns and its disaggregated prefill/decode table (bench/report.py), and the runner's
--output-tokens and pd options (bench/quality.py), from hand-made rows and aggregates."""
import math

import pytest

from bench import quality, report
from bench.aggregate import FIELDS, aggregate


def row(strategy, seed=1, pd=False, tpot=0.02, ttft=1.0, hit=0.5, prefill_hit=0.5, **extra):
    base = {"strategy": strategy, "seed": seed, "valid": True, "attempt": 0, "position": 0, "errors": 0,
            "hit_ratio": hit, "engine_hit_ratio": prefill_hit, "preemptions": 0, "pd": pd,
            "fleet": "2 prefill + 2 decode" if pd else "4 both", "prefill_hit_ratio": prefill_hit,
            "tpot_p50": tpot / 2, "tpot_p90": tpot, "ttft_p50": ttft / 2, "ttft_p90": ttft, "ttft_p99": ttft,
            "pd_outcomes": {"disaggregated": 7, "no_transfer_params": 1, "prefill_failed": 0, "sidecar": 0,
                            "aggregated": 0} if pd else {o: 0 for o in ("disaggregated", "aggregated")},
            "pd_prefill_s_mean": 0.25 if pd else None, "pd_handoff_s_mean": 0.01 if pd else None,
            "prefill_pod_requests": {"prefill-0": 5, "prefill-1": 3} if pd else {},
            "lag_p50_ms": 1.0, "lag_p99_ms": 2.0, "lag_max_ms": 3.0, "upper_bound": 0.9, "wall_s": 1.0,
            "pod_load_max": 4, "pod_load_mean": 2.0}
    return base | extra


def test_tpot_and_the_prefill_figures_are_aggregated_over_seeds():
    """Ensures the new row fields are in the aggregates (mean ± CI over the valid seeds)."""
    assert {"tpot_p50", "tpot_p90", "prefill_hit_ratio", "pd_prefill_s_mean", "pd_handoff_s_mean"} <= set(FIELDS)
    agg = aggregate([row("pd-x", seed=1, pd=True, tpot=0.010), row("pd-x", seed=2, pd=True, tpot=0.020)], ["pd-x"])
    assert agg["pd-x"]["tpot_p90"][0] == pytest.approx(0.015) and agg["pd-x"]["tpot_p90"][2] == 2


def test_the_aggregate_table_shows_tpot_and_hides_usage_hits_of_pd_strategies():
    """Ensures the table has TPOT p50/p90 columns (in ms) for every strategy, and "-" for the usage-based hit
    columns of a pd strategy (its decode legs report the pulled prompt as cached), the aggregated one's shown."""
    rows = [row("prefix-cache", tpot=0.030, hit=0.6), row("pd-prefix-cache", pd=True, tpot=0.015, hit=0.99)]
    table = report.aggregate_table(aggregate(rows, ["prefix-cache", "pd-prefix-cache"]))
    head, _, plain, pd = table.splitlines()
    titles = [c.strip() for c in head.split("|")[1:-1]]
    assert "TPOT p50 ms" in titles and "TPOT p90 ms" in titles
    cells = {name: dict(zip(titles, [c.strip() for c in line.split("|")[1:-1]])) for name, line in
             (("plain", plain), ("pd", pd))}
    assert cells["plain"]["TPOT p90 ms"] == "30.0" and cells["pd"]["TPOT p90 ms"] == "15.0"
    assert cells["pd"]["TPOT p50 ms"] == "7.5"
    assert cells["plain"]["token hit ratio"] == "60.0 %" and cells["pd"]["token hit ratio"] == "-"
    assert cells["pd"]["% of upper bound"] == "-"


def test_the_pd_section_lists_fleets_figures_outcomes_and_the_comparison():
    """Ensures the disaggregation table has a line per gateway strategy with its fleet, TTFT/TPOT, prefill-pod hit
    ratio, legs, the first seed's outcomes and prefill-pod spread, and the comparison line with the targets'
    verdicts (TPOT 30 -> 15 ms = 2.00x met; TTFT 1.0 -> 1.3 s = 1.30x not met; hit 50 -> 48 % = -2.0 points met)."""
    rows = [row("prefix-cache", tpot=0.030, ttft=1.0, prefill_hit=0.50),
            row("pd-prefix-cache", pd=True, tpot=0.015, ttft=1.3, prefill_hit=0.48),
            {"strategy": "oracle", "seed": 1, "valid": True, "pd": False}]
    aggregates = aggregate([r for r in rows if r["strategy"] != "oracle"], ["prefix-cache", "pd-prefix-cache"])
    aggregates["oracle"] = aggregate([], ["oracle"])["oracle"]
    text = "\n".join(report.pd_section(rows, aggregates, 1))
    assert "### Disaggregated prefill/decode" in text
    assert "| pd-prefix-cache | 2 prefill + 2 decode | 1 | 0.650 | 1.300 | 7.5 | 15.0 | 48.0 % | 0.250 | 0.010 | " \
           "disaggregated 7, no_transfer_params 1 | [5, 3] |" in text
    assert "| prefix-cache | 4 both | 1 | 0.500 | 1.000 | 15.0 | 30.0 | 50.0 % | - | - | none | - |" in text
    assert "| oracle |" not in text
    assert "| pd-prefix-cache | prefix-cache | 2.00x | yes | 1.30x | **no** | -2.0 | yes |" in text
    assert "split no request" not in text
    rows[1]["pd_outcomes"] = {"disaggregated": 0, "no_transfer_params": 8}
    assert "split no request** (no `disaggregated` outcome: their figures are not disaggregated serving's): " \
           "pd-prefix-cache seed 1" in "\n".join(report.pd_section(rows, aggregates, 1))


def test_runs_table_has_tpot_and_pd_runs_are_not_engine_disagreements():
    """Ensures each run's line shows its TPOT p90 (ms; "-" when NaN) and that a pd run whose usage hit ratio
    differs from its engines' is not flagged (an aggregated one is)."""
    rows = [row("pd-x", pd=True, tpot=0.0125, hit=0.99, prefill_hit=0.4),
            row("x", tpot=math.nan, hit=0.5, prefill_hit=0.4)]
    lines = report.runs_table(rows)
    assert "TPOT p90 ms" in lines[0] and lines[0].count("|") == lines[1].count("|")
    assert "| 1.000 | 12.5 | 99.0 % |" in lines[2]
    assert "| 1.000 | - | 50.0 % |" in lines[3]
    assert [r["strategy"] for r in report.engine_disagreements(rows)] == ["x"]


def test_output_tokens_sets_each_workloads_output_parameter_below_its_own_param():
    """Ensures --output-tokens sets shared-prefix/capacity-pressure output_tokens and multi-turn answer_tokens (over
    --tiny's), leaves the trace alone, and that an explicit --param for the same parameter wins."""
    assert quality.workload_params("shared-prefix", False, 512, {}) == {"output_tokens": "512"}
    assert quality.workload_params("multi-turn", True, 512, {})["answer_tokens"] == "512"
    assert quality.workload_params("capacity-pressure", False, 512,
                                   {"capacity-pressure": {"output_tokens": "64"}}) == {"output_tokens": "64"}
    assert quality.workload_params("trace", False, 512, {}) == {}
    assert quality.workload_params("multi-turn", True, 0, {})["answer_tokens"] == quality.TINY["multi-turn"][
        "answer_tokens"]
    for name in quality.OUTPUT_PARAMS:   # each names a real parameter of its workload
        workload = quality.build_workload(name, quality.workload_params(name, True, 40, {}), 2, 1)
        assert workload.params[quality.OUTPUT_PARAMS[name]] == 40


def test_pd_options_are_checked_against_the_fleet():
    """Ensures --prefill-pods and --kv-transfer-ms-per-1k-tokens default to 2 and the simulator's 2.0, and that a pd
    strategy with no decode or no prefill pod left is refused (aggregated runs do not care)."""
    args = quality.parse_args(["--strategies", "prefix-cache,pd-prefix-cache"])
    assert args.prefill_pods == 2 and args.kv_transfer_ms_per_1k_tokens == 2.0 and args.pods == 8
    assert quality.parse_args(["--strategies", "pd-random", "--pods", "4", "--prefill-pods", "3"]).prefill_pods == 3
    for bad in (["--pods", "2", "--prefill-pods", "2"], ["--prefill-pods", "0"]):
        with pytest.raises(SystemExit):
            quality.parse_args(["--strategies", "pd-prefix-cache", *bad])
    assert quality.parse_args(["--strategies", "random", "--prefill-pods", "0"]).prefill_pods == 0


def test_a_pd_runs_decisions_follow_its_prefill_pods():
    """Ensures the decisions of a pd run are taken on each request's prefill pod among the prefill pods (the pod its
    strategy chose), an aggregated run's on its target pod among every pod."""
    from argparse import Namespace

    from bench.model import Record
    records = [Record(rid=0, group=0, stage=0, send_s=0.0, pod="decode-3", prefill_pod="prefill-1")]
    args = Namespace(pods=8, prefill_pods=2)
    pd_records, pods = quality.decided(records, True, args)
    assert [r.pod for r in pd_records] == ["prefill-1"] and pods == 2 and records[0].pod == "decode-3"
    same, pods = quality.decided(records, False, args)
    assert same is records and pods == 8
