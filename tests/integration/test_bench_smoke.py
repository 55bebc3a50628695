"""Smoke tests of the benchmark suite: the quality runner (two seeds, the oracle included; and with two gateway
replicas), the real-engine runner (two llama-servers against the calibrated simulator) and the proxy-overhead
benchmark run end to end in tiny mode and produce their reports. No timing thresholds: the figures only have to be
well formed and sane, and the send-lag validity only has to be consistent (a loaded machine may make runs
invalid, which the full run reports and reruns)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "loadtest" / "overhead"))
from servers import missing_tools  # noqa: E402


STRATEGIES = ["random", "prefix-cache", "oracle"]
WORKLOADS = ["shared-prefix", "multi-turn", "capacity-pressure", "capacity-pressure-repeating", "trace"]
STEPPED = {"capacity-pressure", "capacity-pressure-repeating"}
RUN_TIMEOUT_S = 240


def run(args):
    """Runs a benchmark script with this Python (the environment, PREFIXGATE_BIN included, passes through)."""
    out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.returncode == 0, f"{args[0]} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def check_run(where, row, pods):
    """One run's row: every request served, figures within their ranges, usage agreeing with the engines."""
    assert row["errors"] == 0 and not row["crashed"], (where, row["error_kinds"], row["crashed"])
    assert row["ok"] == row["requests"] > 0, where
    assert 0.0 <= row["hit_ratio"] <= row["upper_bound"] + 1e-9 <= 1.0 + 1e-9, where
    if row["preemptions"] == 0:   # a preempted request is looked up again, so only then must they agree
        assert row["engine_hit_ratio"] == pytest.approx(row["hit_ratio"]), where
    assert row["prompt_tokens_match"], where   # the replicated tokenization matches the engine's
    assert 0 < row["ttft_p50"] <= row["ttft_p90"] <= row["ttft_p99"], where
    assert row["throughput_rps"] > 0 and row["output_tps"] > 0, where
    assert sum(row["pod_requests"].values()) == row["ok"] and len(row["pod_requests"]) <= pods, where
    assert 0 <= row["lag_p50_ms"] <= row["lag_p99_ms"] <= row["lag_max_ms"], where
    assert row["valid"] == (row["lag_p99_ms"] <= 10.0), where


def test_quality_runner_writes_a_report_with_seeds_oracle_stages_and_provenance(tmp_path):
    """Ensures the quality runner streams every tiny workload through two strategies and the oracle for two seeds
    (order rotated), and reports per-run rows, aggregates with confidence intervals, % of oracle, the per-stage
    steady-state table, the send lag and the provenance."""
    run(["loadtest/bench/quality.py", "--tiny", "--pods", "2", "--strategies", ",".join(STRATEGIES),
         "--progress", "never", "--min-valid-seeds", "0", "--out", str(tmp_path)])
    report = (tmp_path / "REPORT.md").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seeds"] == [1, 2] and list(summary["workloads"]) == WORKLOADS
    for name, workload in summary["workloads"].items():
        assert (tmp_path / f"{name}-ttft-cdf.png").stat().st_size > 1000
        assert (tmp_path / f"{name}-pod-load.png").stat().st_size > 1000
        runs = workload["runs"]
        assert {(r["strategy"], r["seed"]) for r in runs} == {(s, n) for s in STRATEGIES for n in (1, 2)}, name
        order = {seed: [r["strategy"] for r in sorted(runs, key=lambda r: r["position"]) if r["seed"] == seed
                        and r["attempt"] == 0] for seed in (1, 2)}
        assert order[1] == STRATEGIES and order[2] == STRATEGIES[1:] + STRATEGIES[:1], name   # interleaved
        for row in runs:
            check_run(f"{name}/{row['strategy']}/s{row['seed']}", row, pods=2)
            if row["strategy"] == "oracle":
                assert row["oracle_queries"] == 2 * row["requests"], name   # every pod asked per request
                if row["valid"]:
                    assert row["of_oracle"] == pytest.approx(1.0)
        aggregates = workload["aggregates"]
        assert list(aggregates) == STRATEGIES
        for strategy, agg in aggregates.items():
            mean, half, n = agg["hit_ratio"]
            assert n == len(agg["seeds"]) and (n < 2 or half >= 0), (name, strategy)
            assert f"| {strategy} | {n}" in report
        if name in STEPPED:
            assert len(workload["stages"]) == 2
            for row in runs:
                assert [s["rate"] for s in row["stages"]] == [4.0, 8.0] and all(s["n"] >= 0 for s in row["stages"])
    assert report.count("Steady-state TTFT p90 (s) per rate stage") == 2
    assert "% of oracle" in report and "send lag p99 ms" in report and "repeating prompts" in report
    prov = summary["provenance"]
    assert len(prov["git"]["commit"] or "") == 40 and isinstance(prov["git"]["dirty"], bool)
    assert prov["command"].startswith("loadtest/bench/quality.py --tiny") and prov["host"]["cores"] >= 1
    assert prov["load"]["max_1m"] >= 0 and prov["load"]["after"]
    assert "**Provenance**: commit `" + prov["git"]["commit"] in report and "Build type `" in report
    # Unloaded shared-prefix groups: prefix-cache routing reaches the bound, which random cannot exceed.
    shared = summary["workloads"]["shared-prefix"]["runs"]
    for seed in (1, 2):
        hit = {r["strategy"]: r["hit_ratio"] for r in shared if r["seed"] == seed}
        assert hit["prefix-cache"] >= hit["random"] and hit["oracle"] >= hit["random"], seed


@pytest.mark.parametrize("sync", [False, True], ids=["no-sync", "sync"])
def test_quality_runner_spreads_requests_over_replicas_and_reports_their_sync(tmp_path, sync):
    """Ensures --replicas 2 starts two gateways (and, with sync, a Redis they share), each answering half the
    requests (round-robin), and that the report and summary record the replicas and what they exchanged: with sync
    records sent and received, bytes per request, the lag p99 and both replicas connected; without, no sync
    figures at all."""
    run(["loadtest/bench/quality.py", "--tiny", "--pods", "2", "--replicas", "2", *([] if sync else ["--no-sync"]),
         "--strategies", "prefix-cache", "--workloads", "multi-turn,shared-prefix", "--seeds", "1",
         # One run each, valid or not (a loaded sanitizer build can lag past the limit; validity is not checked here).
         "--rerun-invalid", "0", "--progress", "never", "--min-valid-seeds", "0", "--out", str(tmp_path)])
    report = (tmp_path / "REPORT.md").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["replicas"] == 2 and summary["state_sync"] is sync
    for name, workload in summary["workloads"].items():
        (row,) = workload["runs"]
        check_run(f"{name}/x2", row, pods=2)
        assert row["replicas"] == 2 and row["replica_requests"] == [row["ok"] // 2] * 2, (name, row["ok"])
        if sync:
            assert row["sync_records_sent"] > 0 and row["sync_records_received"] > 0, name
            assert row["sync_bytes_per_request"] > 0 and row["sync_lag_p99_s"] is not None, name
            assert row["sync_connected"] == 2 and row["sync_redis_errors"] == 0, name
            assert row["redis_used_memory"] > 0, name
        else:
            assert row["sync_records_sent"] is None and row["redis_used_memory"] is None, name
    assert report.count("### Replicas") == 2 and "2 prefixgate replicas per run" in report
    assert "round-robin" in report
    # The report shows each workload's spread from its valid run: a run a loaded sanitizer build made late
    # (invalid) shows "-" instead.
    for name, workload in summary["workloads"].items():
        (row,) = workload["runs"]
        if row["valid"]:
            assert f"| {row['replica_requests']} |" in report, name


@pytest.mark.skipif(bool(missing_tools()),
                    reason=f"the overhead benchmark needs nginx, haproxy and wrk; missing: {', '.join(missing_tools())}")
def test_quality_runner_runs_a_disaggregated_fleet_and_compares_it_with_the_aggregated_one(tmp_path):
    """Ensures a pd- strategy runs on a fleet of prefill and decode pods (the gateway splits every request: each
    is counted disaggregated), that its row reports TPOT and the prefill pods' hit ratio, and that the report has the
    disaggregated table and the comparison with the aggregated strategy."""
    run(["loadtest/bench/quality.py", "--tiny", "--pods", "4", "--prefill-pods", "2",
         "--strategies", "prefix-cache,pd-prefix-cache", "--workloads", "shared-prefix", "--seeds", "1",
         "--rerun-invalid", "0", "--progress", "never", "--min-valid-seeds", "0", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    runs = {r["strategy"]: r for r in summary["workloads"]["shared-prefix"]["runs"]}
    pd, whole = runs["pd-prefix-cache"], runs["prefix-cache"]
    assert pd["pd"] and not whole["pd"]
    assert pd["pd_outcomes"]["disaggregated"] == pd["ok"] > 0, pd["pd_outcomes"]
    assert pd["tpot_p90"] > 0 and whole["tpot_p90"] > 0
    assert 0 < pd["prefill_hit_ratio"] <= 1
    report = (tmp_path / "REPORT.md").read_text()
    assert "Disaggregated prefill/decode" in report


def test_overhead_benchmark_runs_one_loop_proxies_and_prefix_cache_matches_over_eight_pods(tmp_path):
    """Ensures the overhead benchmark drives every target through wrk in every phase with one worker / thread per
    proxy, reports per-round figures and ratios to nginx, and that on the rotating conversation families
    prefix-cache really matched prefixes (its own /metrics) while spreading the families over the 8 pods."""
    run(["loadtest/overhead/overhead.py", "--tiny", "--out", str(tmp_path)])
    results = json.loads((tmp_path / "overhead.json").read_text())
    targets = ["direct", "nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]
    assert results["processes"]["nginx"]["children"] == 1 and results["processes"]["haproxy"]["threads"] == 1
    for phase in ("throughput", "families", "long-prompt"):
        (row,) = results[phase]["rows"]
        for target in targets:
            cell = row["targets"][target]
            assert len(cell["rounds"]) == 1 and cell["errors"] == 0, (phase, target)
            assert cell["rps"]["min"] == cell["rps"]["median"] == cell["rps"]["max"] > 0, (phase, target)
            assert cell["p99_us"]["median"] >= cell["p50_us"]["median"] > 0, (phase, target)
            assert cell["cpu_us_per_request"]["median"] > 0, (phase, target)
        assert row["targets"]["nginx"]["rps_vs_nginx"] == pytest.approx(1.0)
        for gateway in ("prefixgate-random", "prefixgate-prefix-cache"):
            routing, served = row["routing"][gateway], row["targets"][gateway]["rounds"][0]["requests"]
            # The gateway's count covers wrk's answered requests and at most one cut off per connection.
            assert served <= routing["requests"] <= served + row["connections"], (phase, gateway)
        assert row["routing"]["prefixgate-random"]["mean_match_share"] is None, phase   # no prediction: no audit
        prefix = row["routing"]["prefixgate-prefix-cache"]
        served = row["targets"]["prefixgate-prefix-cache"]["rounds"][0]["requests"]
        assert served <= prefix["audited"] <= prefix["requests"], phase   # every answered response was audited
        if phase != "throughput":
            assert prefix["mean_match_share"] > 0.5 and prefix["decisions"]["76-100"] > 0, (phase, prefix)
            # --tiny has no warm-up: the first body seen of each family matched nothing, so every family was sent.
            assert prefix["decisions"]["0"] >= results[phase]["families"], (phase, prefix)
    families = results["families"]["rows"][0]["routing"]
    assert families["prefixgate-prefix-cache"]["pods_used"] == families["prefixgate-random"]["pods_used"] == 8
    assert results["long-prompt"]["rows"][0]["routing"]["prefixgate-prefix-cache"]["pods_used"] > 1
    for target in targets:
        fixed, stream = results["fixed-rate"][target], results["streaming"][target]
        assert fixed["rounds"][0]["requests"] > 0 and fixed["p99_us"]["median"] >= fixed["p50_us"]["median"] > 0
        assert "added_p99_vs_nginx" in fixed, target
        assert stream["events"] == 2 * 500 and stream["stray_last_chunks"] == 0, target
    report = (tmp_path / "overhead.md").read_text()
    against = report.split("## Against the targets", 1)[1].split("\n## ", 1)[0]
    for line in ("2 KiB, one fixed body", "2 KiB, conversation families", "256 KiB, conversation families",
                 "SSE delay added per event"):
        assert line in against, line
    assert "8 of 8 pods used" in against
    assert results["provenance"]["git"]["commit"] and "**Provenance**: commit" in report


def test_overhead_benchmark_gives_every_proxy_the_same_number_of_event_loops(tmp_path):
    """Ensures --proxy-loops 2 (the scaling check: 2 event loops against 2 nginx workers) really runs nginx with two
    workers, HAProxy with two threads and prefixgate with one more request thread than at one loop, and says so."""
    shapes = {}
    for loops in (1, 2):
        out = tmp_path / f"loops-{loops}"
        run(["loadtest/overhead/overhead.py", "--tiny", "--phases", "throughput", "--proxy-loops", str(loops),
             "--out", str(out)])
        results = json.loads((out / "overhead.json").read_text())
        shapes[loops] = results["processes"]
        assert results["config"]["proxy_loops"] == loops
        cell = results["throughput"]["rows"][0]["targets"]["prefixgate-prefix-cache"]
        assert cell["errors"] == 0 and cell["rps"]["median"] > 0
    assert shapes[2]["nginx"]["children"] == 2 and shapes[2]["haproxy"]["threads"] == 2
    for gateway in ("prefixgate-random", "prefixgate-prefix-cache"):
        assert shapes[2][gateway]["threads"] == shapes[1][gateway]["threads"] + 1, shapes
    assert "2 event loops each (--proxy-loops 2)" in (tmp_path / "loops-2" / "overhead.md").read_text()


def test_real_engine_runner_compares_llama_servers_with_the_calibrated_simulator(tmp_path):
    """Ensures the real-engine runner (loadtest/bench/real.py --tiny: two llama-servers, one seed) calibrates the
    simulator against a llama-server, streams the tiny shared-prefix and multi-turn workloads through a gateway in
    front of real pods and of simulated ones (every calibration: the shared-CPU one from a probe of the fleet's
    contention, its rounds between each workload's real runs; the burn-CPU one computing its steps; each workload's context attention from its own requests on one
    llama-server and one simulated pod), and reports per run the cached share within the
    engine-token bound, usage agreeing with the engines' counters and with the prompts' engine tokenization, the
    gateway's figures, and the comparison table."""
    from harness import LLAMA_SERVER_BIN, llama_available

    if not llama_available():
        pytest.fail(f"llama-server not found at {LLAMA_SERVER_BIN}: run scripts/fetch_llama.sh (scripts/setup.sh "
                    "runs it), or set PREFIXGATE_LLAMA_SERVER_BIN")
    run(["loadtest/bench/real.py", "--tiny", "--strategies", "random,prefix-cache-remote", "--workloads",
         "shared-prefix,multi-turn", "--calibration-repeats", "1", "--progress", "never", "--min-valid-seeds", "0",
         "--sim-calibrations", "isolated,in-situ,shared-cpu,burn-cpu", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    report = (tmp_path / "REPORT.md").read_text()
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert cal["prefill"]["tokens_per_s"] > 0 and cal["decode"]["per_seq_ms"] > 0 and cal["llama_per_sim_token"] > 0
    assert summary["fleets"] == ["llama", "sim-isolated", "sim-in-situ", "sim-shared-cpu", "sim-burn-cpu"]
    assert summary["pods"] == 2
    probe = cal["contention_probe"]   # the two pods of the fleet, one then both prefilling at once
    assert probe["prefill"][0] == 1.0 and len(probe["prefill"]) == 2 and probe["prefill"][1] >= 1.0
    assert sorted(probe["samples"]["prefill"]) == ["1", "2"]
    for name, workload in summary["workloads"].items():
        # sim-shared-cpu takes the probe's rounds between the workload's real runs (one per run: 2 strategies x 1
        # seed), and the calibration slowed as the lone pod was then.
        in_run = cal["in_run"][name]
        assert in_run["rounds"] == 2 and len(in_run["prefill"]) == 2 and in_run["drift"]["prefill"] > 0, in_run
        # The workload's own probe requests went in slices between those runs (one per run at most).
        assert 1 <= cal["warm"][name]["slices"] <= 2
        flags = workload["fleets"]["sim-shared-cpu"]["flags"]["random"]
        assert flags[flags.index("--shared-cpu-slowdown") + 1] == ",".join(f"{x:.4g}" for x in in_run["prefill"])
        isolated = workload["fleets"]["sim-isolated"]["flags"]["random"]
        rate = float(flags[flags.index("--prefill-tokens-per-s") + 1])
        assert rate == pytest.approx(float(isolated[isolated.index("--prefill-tokens-per-s") + 1])
                                     / in_run["drift"]["prefill"], rel=1e-4)
        assert "--shared-cpu-slowdown" not in isolated
        assert "--burn-cpu" in workload["fleets"]["sim-burn-cpu"]["flags"]["random"]
    for name, workload in summary["workloads"].items():
        # The workload's own requests one at a time on one llama-server, then on one simulated pod: the thin-batch
        # width in the simulator's tokens, which its flags carry.
        warm = cal["warm"][name]
        assert warm["requests"] > 0 and warm["n"] > 0 and warm["context_attention_ms_per_m_pairs"] >= 0, warm
        assert warm["sim_n"] > 0 and warm["sim_context_min_rows"] >= 0, warm
        flags = workload["fleets"]["sim-isolated"]["flags"]["random"]
        assert int(flags[flags.index("--context-min-rows") + 1]) == warm["sim_context_min_rows"]
        assert "--context-attention-ms-per-m-pairs" not in flags
    for name, workload in summary["workloads"].items():
        assert (tmp_path / workload["plot"]).stat().st_size > 1000
        runs = workload["runs"]
        assert {(r["fleet"], r["strategy"]) for r in runs} == {
            (f, s) for f in summary["fleets"] for s in ("random", "prefix-cache-remote")}, name
        for row in runs:
            where = f"{name}/{row['fleet']}/{row['strategy']}"
            assert row["errors"] == 0 and not row["crashed"] and row["ok"] == row["requests"] > 0, (where, row)
            assert row["prompt_tokens_match"], where   # usage.prompt_tokens == /apply-template + /tokenize
            assert 0.0 <= row["hit_ratio"] <= row["upper_bound"] + 1e-9 <= 1.0 + 1e-9, where
            assert row["engine_hit_ratio"] == pytest.approx(row["hit_ratio"]), where
            assert 0 < row["ttft_p50"] <= row["ttft_p90"], where
            assert row["scrape_errors"] == 0 and row["deferred_max"] is not None, where
            if row["strategy"] == "prefix-cache-remote":
                assert row["tokenizer"]["miss"] > 0 and row["tokenizer"]["error"] == 0, where
                assert row["prediction_accuracy"] is not None, where
        assert set(workload["aggregates"]) == set(summary["fleets"]), name
    assert "## Calibration" in report and "Simulator against the real engines" in report
    assert "**Provenance**: commit" in report


def test_warm_cost_measures_questions_after_a_cached_system_prompt(tmp_path):
    """Ensures loadtest/bench/warm_cost.py (the measurement behind the simulator's context attention) runs against a
    real llama-server: every series sends its system prompt cold once, then questions that find it cached (llama's
    cache_n covers the system prompt, prompt_n only the question), and prints the table of what it measured."""
    from harness import LLAMA_SERVER_BIN, llama_available

    if not llama_available():
        pytest.fail(f"llama-server not found at {LLAMA_SERVER_BIN}: run scripts/fetch_llama.sh")
    out = run(["loadtest/bench/warm_cost.py", "--out", str(tmp_path / "warm.json")])
    got = json.loads((tmp_path / "warm.json").read_text())
    series = got["by_prefix"] + got["by_question"]
    assert len(got["by_prefix"]) == 4 and len(got["by_question"]) == 8
    for row in series:
        cold_new, cold_cached, _ = row["cold"]
        assert cold_cached <= 16 < cold_new, row["cold"]          # the system prompt computed
        for new, cached, ms in row["warm"]:
            # cached: the cold prompt less its own user turn ("hello" and the template around it, ~20 tokens)
            assert cold_new - 40 <= cached < cold_new + cold_cached and 0 < new and ms > 0, (row["prefix_words"], new,
                                                                                          cached, row["cold"])
    # Longer system prompts are more tokens cached; longer questions more new tokens.
    assert [r["cached"] for r in got["by_prefix"]] == sorted(r["cached"] for r in got["by_prefix"])
    assert [r["new"] for r in got["by_question"][:4]] == sorted(r["new"] for r in got["by_question"][:4])
    assert out.stdout.count("\n| ") >= 12


def test_quality_runner_reports_a_flow_workload_per_tenant_and_class_with_flow_control_on(tmp_path):
    """Ensures a flow-control workload (issue 27) runs with flow control on (`flow.enabled=true` + the workload's
    classes and max_in_flight_per_pod), and that its figures are complete: every tenant and class present, the
    requests answered + shed + lost adding up to those sent, none lost, the targets table in the report, and the
    tables written between the docs markers with --docs."""
    docs = tmp_path / "benchmarks.md"
    docs.write_text((ROOT / "docs" / "benchmarks.md").read_text())
    run(["loadtest/bench/quality.py", "--tiny", "--pods", "2", "--workloads", "priority-overload",
         "--strategies", "least-request:flow.enabled=true", "--seeds", "1", "--rerun-invalid", "0",
         "--progress", "never", "--min-valid-seeds", "0", "--out", str(tmp_path / "out"), "--docs", str(docs)])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    workload = summary["workloads"]["priority-overload"]
    assert workload["flow_control"]["classes"][0]["name"] == "high"
    (row,) = workload["runs"]
    assert row["flow_control"] is True and not row["crashed"]
    flow = row["flow"]
    total = flow["all"]
    assert total["sent"] == row["requests"] > 0
    assert total["answered"] + total["shed"] + total["lost"] == total["sent"]
    assert flow["lost"] == 0, flow["lost_kinds"]
    assert set(flow["classes"]) == {"high", "low"} and len(flow["tenants"]) >= 2
    for section in ("tenants", "classes"):
        groups = flow[section].values()
        assert sum(g["sent"] for g in groups) == total["sent"], section
        assert sum(g["answered"] + g["shed"] + g["lost"] for g in groups) == total["sent"], section
    assert sum(flow["shed_reasons"].values()) == total["shed"]
    assert 0 <= total["attainment"] <= 1 and total["goodput_rps"] >= 0
    assert row["flow_metrics"].get("dispatched", 0) >= 0
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "### Flow control figures: priority-overload" in report and "| class `high` |" in report
    assert "against issue 27's targets" in report and "no request lost" in report
    written = docs.read_text()
    block = written.split("<!-- flow-control:begin -->", 1)[1].split("<!-- flow-control:end -->", 1)[0]
    assert "| workload | target |" in block and "**priority-overload**" in block
