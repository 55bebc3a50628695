"""Smoke test of the flow-control idle-path benchmark (loadtest/overhead/flow_idle.py --tiny): both gateways serve
the same fast upstream, the flow-on one queues nothing (every request straight through) and the report carries
both gateways' figures and their per-round ratio. No timing thresholds (docs/benchmarks.md has the measured run)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_flow_idle_benchmark_compares_flow_off_and_on_with_nothing_queued(tmp_path):
    out = subprocess.run([sys.executable, "loadtest/overhead/flow_idle.py", "--tiny", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = json.loads((tmp_path / "flow-idle.json").read_text())
    assert results["flow_dispatched"] == 0
    assert len(results["phases"]) == 2
    for phase in results["phases"]:
        for target in ("flow-off", "flow-on"):
            cell = phase["cells"][target]
            assert cell["rps"]["median"] > 0 and cell["errors"] == 0, (phase["label"], target, cell)
        assert phase["on_over_off"]["rps"]["median"] > 0
    report = (tmp_path / "flow-idle.md").read_text()
    assert "| flow-on |" in report and "on / off (per round)" in report and "**Provenance**" in report
