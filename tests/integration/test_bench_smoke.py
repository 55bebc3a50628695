"""Smoke tests of the benchmark suite: the quality runner and the proxy-overhead benchmark run end to end in tiny
mode and produce their reports. No timing thresholds: the figures only have to be well formed and sane."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest" / "overhead"))
from servers import missing_tools  # noqa: E402

STRATEGIES = ["random", "prefix-cache"]
RUN_TIMEOUT_S = 240


def run(args):
    """Runs a benchmark script with this Python (the environment, PREFIXGATE_BIN included, passes through)."""
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 0, f"{args[0]} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def test_quality_runner_writes_a_report_with_a_sane_row_per_strategy(tmp_path):
    """Ensures the quality runner streams every tiny workload through two strategies and reports sane figures."""
    run(["loadtest/bench/quality.py", "--tiny", "--pods", "2", "--strategies", ",".join(STRATEGIES),
         "--progress", "never", "--out", str(tmp_path)])
    report = (tmp_path / "REPORT.md").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["workloads"]) == {"shared-prefix", "multi-turn", "capacity-pressure", "trace"}
    for name, workload in summary["workloads"].items():
        assert (tmp_path / f"{name}-ttft-cdf.png").stat().st_size > 1000
        assert (tmp_path / f"{name}-pod-load.png").stat().st_size > 1000
        rows = {row["strategy"]: row for row in workload["rows"]}
        assert list(rows) == STRATEGIES
        for strategy, row in rows.items():
            where = f"{name}/{strategy}"
            assert row["errors"] == 0, (where, row["error_kinds"])
            assert row["ok"] == row["requests"] > 0, where
            assert 0.0 <= row["hit_ratio"] <= 1.0 and 0.0 <= row["upper_bound"] <= 1.0, where
            assert row["hit_ratio"] <= row["upper_bound"] + 1e-9, where
            assert row["engine_hit_ratio"] == pytest.approx(row["hit_ratio"]), where   # usage agrees with /metrics
            assert row["prompt_tokens_match"], where   # the replicated tokenization matches the engine's
            assert 0 < row["ttft_p50"] <= row["ttft_p90"] <= row["ttft_p99"], where
            assert row["throughput_rps"] > 0 and row["output_tps"] > 0, where
            assert sum(row["pod_requests"].values()) == row["ok"], where
            assert f"| {strategy} |" in report
    # Unloaded shared-prefix groups: prefix-cache routing reaches the bound, which random cannot exceed.
    shared = {row["strategy"]: row for row in summary["workloads"]["shared-prefix"]["rows"]}
    assert shared["prefix-cache"]["hit_ratio"] >= shared["random"]["hit_ratio"]


@pytest.mark.skipif(bool(missing_tools()),
                    reason=f"the overhead benchmark needs nginx, haproxy and wrk; missing: {', '.join(missing_tools())}")
def test_overhead_benchmark_reports_ratios_to_nginx(tmp_path):
    """Ensures the overhead benchmark drives every target through wrk and reports ratios to nginx."""
    run(["loadtest/overhead/overhead.py", "--tiny", "--phases", "throughput,fixed-rate", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "overhead.json").read_text())
    targets = ["direct", "nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]
    (row,) = results["throughput"]
    for target in targets:
        assert row[target]["rps"] > 0, target
        assert row[target]["rps_vs_nginx"] > 0, target
        assert row[target]["errors"] == 0, target
    assert row["nginx"]["rps_vs_nginx"] == pytest.approx(1.0)
    fixed = results["fixed-rate"]
    for target in targets:
        assert fixed[target]["requests"] > 0 and fixed[target]["p99_us"] >= fixed[target]["p50_us"] > 0, target
        assert "added_p99_vs_nginx" in fixed[target], target
    report = (tmp_path / "overhead.md").read_text()
    assert "## Throughput" in report and "## Against the target" in report
