"""Disaggregated prefill/decode runs (bench/pd.py and its use by the runner): the fleet's roles, the simulator flags
and pods-file entries they give, the pd strategy names, the prefill pods' hit ratio, the gateway's pd figures and
the comparison with the aggregated strategy, by hand."""
import math

import pytest
import yaml

from bench.pd import (DECODE, PREFILL, base_strategy, fleet_roles, is_pd, pd_comparison, pd_notes,
                      prefill_hit_ratio, sim_role_args, with_role)
from bench.runner import (ORACLE, RoleSim, engine_counters, fleet_label, gateway_config, resolve_strategies,
                          sum_counters)
from harness import write_pods


def test_a_pd_fleet_puts_the_first_prefill_pods_first_and_the_rest_decode():
    """Ensures `--prefill-pods P` of `--pods N` gives P prefill pods then N - P decode pods, an aggregated fleet
    every pod both, and that a fleet without a prefill or a decode pod is refused."""
    assert fleet_roles(8, 2, pd=True) == ["prefill"] * 2 + ["decode"] * 6
    assert fleet_roles(3, 1, pd=True) == ["prefill", "decode", "decode"]
    assert fleet_roles(8, 2, pd=False) == ["both"] * 8
    for bad in (0, 8, 9):
        with pytest.raises(ValueError):
            fleet_roles(8, bad, pd=True)
    assert fleet_label(fleet_roles(8, 2, pd=True)) == "2 prefill + 6 decode" and fleet_label(["both"] * 8) == "8 both"


def test_a_role_gives_the_simulator_its_role_and_pull_cost_and_both_gives_nothing():
    """Ensures prefill and decode pods start with `--role` and the pull cost, and `both` pods with the flags they
    had before pd runs existed (none)."""
    assert sim_role_args(PREFILL, 2.0) == ["--role", "prefill", "--kv-transfer-ms-per-1k-tokens", "2"]
    assert sim_role_args(DECODE, 0.5) == ["--role", "decode", "--kv-transfer-ms-per-1k-tokens", "0.5"]
    assert sim_role_args("both", 2.0) == []


def _fake_sim(name, port, role):
    """A RoleSim without its process: pod_entry reads only these attributes."""
    sim = RoleSim.__new__(RoleSim)
    sim.name, sim.model, sim.kv, sim.ports, sim.role = name, "sim-model", {}, [port, 0], role
    return sim


def test_the_pods_file_names_each_pods_role_and_none_for_an_aggregated_fleet(tmp_path):
    """Ensures the pods file the gateway reads carries `role: prefill` / `role: decode` per pod in fleet order, and
    no `role` key for `both` pods (so aggregated runs' pods files are unchanged)."""
    roles = fleet_roles(3, 1, pd=True)
    sims = [_fake_sim(f"pod-{i}", 9000 + i, role) for i, role in enumerate(roles)]
    write_pods(tmp_path / "pods.yaml", sims)
    pods = yaml.safe_load((tmp_path / "pods.yaml").read_text())["pods"]
    assert [(p["name"], p["address"], p.get("role")) for p in pods] == [
        ("pod-0", "127.0.0.1:9000", "prefill"), ("pod-1", "127.0.0.1:9001", "decode"),
        ("pod-2", "127.0.0.1:9002", "decode")]
    write_pods(tmp_path / "both.yaml", [_fake_sim("pod-0", 9000, "both")])
    assert "role" not in yaml.safe_load((tmp_path / "both.yaml").read_text())["pods"][0]
    assert with_role({"name": "x"}, "both") == {"name": "x"} and with_role({"name": "x"}, DECODE)["role"] == "decode"


def test_a_pd_name_runs_its_base_strategys_routing_with_settings_and_never_for_the_oracle():
    """Ensures `pd-NAME` resolves to NAME's gateway routing (settings after ':' applied like NAME's, `pd.KEY` ones
    to the gateway's disaggregation section), only when asked for (pd=True; real.py has no pd fleet), never in
    `all`, and not for the oracle."""
    got = dict(resolve_strategies("prefix-cache,pd-prefix-cache,pd-prefix-cache-prefill:prefill_weight=2",
                                  ["prefix-cache"], pd=True))
    assert got["pd-prefix-cache"] == got["prefix-cache"] == {"strategy": "prefix-cache"}
    assert got["pd-prefix-cache-prefill:prefill_weight=2"] == {
        "strategy": "prefix-cache-blend", "blend": {"prefill_cost_weight": 4},
        "strategies": {"prefix-cache-blend": {"prefill_weight": 2}}}
    busy = dict(resolve_strategies("pd-prefix-cache:pd.max_prefill_in_flight=4", ["prefix-cache"], pd=True))
    assert busy["pd-prefix-cache:pd.max_prefill_in_flight=4"] == {
        "strategy": "prefix-cache", "_disaggregation": {"max_prefill_in_flight": 4}}
    assert gateway_config(busy["pd-prefix-cache:pd.max_prefill_in_flight=4"]) == {
        "routing": {"strategy": "prefix-cache"}, "disaggregation": {"max_prefill_in_flight": 4}}
    assert gateway_config(got["prefix-cache"]) == {"routing": {"strategy": "prefix-cache"}}
    assert not any(is_pd(name) for name in dict(resolve_strategies("all", ["prefix-cache"], pd=True)))
    for text, pd in ((f"pd-{ORACLE}", True), ("pd-prefix-cache", False), ("pd-no-such", True)):
        with pytest.raises(SystemExit):
            resolve_strategies(text, ["prefix-cache"], pd=pd)
    assert base_strategy("pd-prefix-cache:x=1") == "prefix-cache:x=1" and base_strategy("random") == "random"


def test_the_prefill_hit_ratio_counts_the_prefill_pods_only_or_the_whole_aggregated_fleet():
    """Ensures a pd run's hit ratio is the prefill pods' engine counters alone (the decode pods' local hits left
    out), an aggregated run's every pod's, and None without queries or when a pod did not answer."""
    per_pod = [{"hits": 30.0, "queries": 100.0}, {"hits": 10.0, "queries": 100.0}, {"hits": 90.0, "queries": 100.0}]
    assert prefill_hit_ratio(per_pod, ["prefill", "prefill", "decode"]) == pytest.approx(40 / 200)
    assert prefill_hit_ratio(per_pod, ["both"] * 3) == pytest.approx(130 / 300)
    assert prefill_hit_ratio([{"hits": 0.0, "queries": 0.0}], ["prefill"]) is None
    assert prefill_hit_ratio(None, ["prefill"]) is None


def test_engine_counters_are_read_per_pod_and_summed():
    """Ensures one engine's vllm prefix cache and preemption counters are parsed (labels ignored) and summed."""
    text = ('# HELP vllm:prefix_cache_hits_total x\nvllm:prefix_cache_hits_total{model_name="m"} 48.0\n'
            'vllm:prefix_cache_queries_total{model_name="m"} 64\nvllm:num_preemptions_total 2\nother_total 7\n')
    one = engine_counters(text)
    assert one == {"hits": 48.0, "queries": 64.0, "preemptions": 2.0}
    assert sum_counters([one, one]) == {"hits": 96.0, "queries": 128.0, "preemptions": 4.0}
    assert sum_counters(None) is None and engine_counters("") == {"hits": 0.0, "queries": 0.0, "preemptions": 0.0}


GATEWAY_TEXT = """# TYPE prefixgate_pd_requests_total counter
prefixgate_pd_requests_total{outcome="disaggregated"} 9
prefixgate_pd_requests_total{outcome="no_transfer_params"} 1
prefixgate_pd_requests_total{outcome="prefill_failed"} 0
prefixgate_pd_requests_total{outcome="sidecar"} 0
prefixgate_pd_requests_total{outcome="aggregated"} 0
prefixgate_pd_requests_total{outcome="prefill_busy"} 3
# TYPE prefixgate_pd_prefill_seconds histogram
prefixgate_pd_prefill_seconds_bucket{le="0.1"} 8
prefixgate_pd_prefill_seconds_bucket{le="+Inf"} 10
prefixgate_pd_prefill_seconds_sum 0.5
prefixgate_pd_prefill_seconds_count 10
# TYPE prefixgate_pd_handoff_seconds histogram
prefixgate_pd_handoff_seconds_bucket{le="+Inf"} 9
prefixgate_pd_handoff_seconds_sum 0.09
prefixgate_pd_handoff_seconds_count 9
"""


def test_pd_notes_count_outcomes_and_give_mean_legs_in_simulated_seconds():
    """Ensures the outcomes are summed over the replicas' texts and the legs' means are wall sum / count divided
    by the time scale; a gateway without the series gives None."""
    notes = pd_notes([GATEWAY_TEXT, GATEWAY_TEXT], time_scale=0.5)
    assert notes["pd_outcomes"] == {"disaggregated": 18, "no_transfer_params": 2, "prefill_failed": 0,
                                    "sidecar": 0, "aggregated": 0, "prefill_busy": 6}
    assert notes["pd_prefill_s_mean"] == pytest.approx(1.0 / 20 / 0.5)
    assert notes["pd_handoff_s_mean"] == pytest.approx(0.18 / 18 / 0.5)
    assert pd_notes(["# nothing\n"], 0.5) == {"pd_outcomes": None, "pd_prefill_s_mean": None,
                                              "pd_handoff_s_mean": None}


def _agg(tpot, ttft, hit):
    return {"tpot_p90": [tpot, 0.0, 3], "ttft_p90": [ttft, 0.0, 3], "prefill_hit_ratio": [hit, 0.0, 3]}


def test_the_comparison_gives_issue_26s_ratios_and_whether_each_target_is_met():
    """Ensures each pd strategy is compared with its aggregated strategy: TPOT p90 gain = aggregated / pd (>= 1.5),
    TTFT p90 ratio = pd / aggregated (<= 1.2), hit difference in points (within 5), and that a pd strategy without
    its aggregated run, or a figure without values, gives no verdict."""
    (row,) = pd_comparison({"prefix-cache": _agg(0.030, 1.0, 0.60), "pd-prefix-cache": _agg(0.015, 1.1, 0.57),
                            "pd-random": _agg(0.01, 1.0, 0.1)})
    assert row["pd"] == "pd-prefix-cache" and row["aggregated"] == "prefix-cache"
    assert row["tpot_gain"] == pytest.approx(2.0) and row["ttft_ratio"] == pytest.approx(1.1)
    assert row["hit_points"] == pytest.approx(-3.0)
    assert row["meets"] == {"tpot": True, "ttft": True, "hit": True}
    (worse,) = pd_comparison({"random": _agg(0.012, 1.0, 0.5), "pd-random": _agg(0.010, 1.3, 0.42)})
    assert worse["meets"] == {"tpot": False, "ttft": False, "hit": False}
    empty = {"tpot_p90": [math.nan, math.nan, 0], "ttft_p90": [1.0, 0.0, 1], "prefill_hit_ratio": [0.5, 0.0, 1]}
    (none,) = pd_comparison({"random": empty, "pd-random": empty})
    assert none["tpot_gain"] is None and none["meets"]["tpot"] is None and none["meets"]["ttft"] is True
