"""Flow control's benchmark (issue 27): the fleet capacity the rates are set from, the flow workloads, the
`flow.KEY` strategy settings, the load generator's flow headers and error fields, and the per tenant / class
figures, their aggregation over seeds and the targets' verdicts."""
import math

import pytest

from bench import flow, flow_workloads, workloads
from bench.loadgen import error_fields, flow_header_lines
from bench.model import BenchRequest, Record
from bench.runner import gateway_config, resolve_strategies


def build(name, seed=1, pods=2, **overrides):
    params = workloads.apply_overrides(flow_workloads.PARAMS[name](), overrides)
    return flow_workloads.BUILDERS[name](params, pods, seed)


# --- capacity ---------------------------------------------------------------------------------------------------
def test_pod_capacity_follows_the_simulator_step_time_by_hand():
    """Ensures the capacity is 1 / (output/batch x step + prefill + overhead x min(1, output/batch)), computed by
    hand for 1,024-token prompts, 128 output tokens, 16 running: step = 4.5 + 0.046 x 16 + 0.05 x 16 x 1.088 =
    6.1064 ms; 8 steps = 48.851 ms; prefill 40.96 ms + 1.3 x 1024 x 1025 / 2 / 1e6 = 0.682 ms; overhead 15 ms."""
    per_request_ms = 8 * (4.5 + 0.046 * 16 + 0.05 * 16 * 1.088) + 40.96 + 1.3 * 1024 * 1025 / 2e6 + 15
    assert flow_workloads.pod_capacity_rps(1024, 128, 16) == pytest.approx(1000 / per_request_ms)
    assert flow_workloads.fleet_capacity_rps(1024, 128, 16, 4) == pytest.approx(4000 / per_request_ms)
    # Output shorter than the batch: several requests admitted per step share one step overhead.
    small = 0.5 * (4.5 + 0.046 * 16 + 0.05 * 16 * 1.028) + 40.96 + 1.3 * 1024 * 1025 / 2e6 + 15 * 0.5
    assert flow_workloads.pod_capacity_rps(1024, 8, 16) == pytest.approx(1000 / small)


def test_capacity_grows_with_the_batch_and_shrinks_with_longer_requests():
    assert flow_workloads.pod_capacity_rps(1024, 128, 32) > flow_workloads.pod_capacity_rps(1024, 128, 16)
    assert flow_workloads.pod_capacity_rps(2048, 128, 16) < flow_workloads.pod_capacity_rps(1024, 128, 16)
    assert flow_workloads.pod_capacity_rps(1024, 256, 16) < flow_workloads.pod_capacity_rps(1024, 128, 16)
    with pytest.raises(ValueError):
        flow_workloads.pod_capacity_rps(9000, 128, 16)


# --- workloads --------------------------------------------------------------------------------------------------
def test_noisy_neighbour_rates_follow_the_capacity_and_alone_sends_the_same_steady_requests():
    """Ensures the steady tenant's and the flood's request counts match their rates x windows (within Poisson
    noise), the flood stays inside its window, and the alone variant sends exactly the steady tenant's requests."""
    w = build("noisy-neighbour", pods=4)
    capacity = w.params["fleet_capacity_rps"]
    assert capacity == pytest.approx(flow_workloads.fleet_capacity_rps(1024, 128, 16, 4))
    steady = [r for r in w.requests() if r.tenant == "steady"]
    flood = [r for r in w.requests() if r.tenant == "flood"]
    assert abs(len(steady) - 0.2 * capacity * 30) < 4 * math.sqrt(0.2 * capacity * 30)
    assert abs(len(flood) - 5 * capacity * 6) < 4 * math.sqrt(5 * capacity * 6)
    assert all(5.0 <= r.at_s < 11.0 for r in flood) and all(0 <= r.at_s < 30.0 for r in steady)
    assert all(r.slo_ttft_ms == 2000 and r.send_slo_header and not r.priority for r in w.requests())
    alone = build("noisy-neighbour-alone", pods=4)
    assert [(r.at_s, r.body) for r in alone.requests()] == [(r.at_s, r.body) for r in sorted(steady, key=lambda r: r.rid)]
    assert len({r.rid for r in w.requests()}) == len(w.requests())
    assert w.flow_control == {"max_in_flight_per_pod": 16} and "--max-num-seqs" in w.sim_args
    assert w.sim_args[w.sim_args.index("--max-num-seqs") + 1] == "16"


def test_priority_overload_sends_classes_at_one_and_a_half_times_capacity():
    w = build("priority-overload", pods=4, duration_s="60")
    capacity = w.params["fleet_capacity_rps"]
    reqs = w.requests()
    assert abs(len(reqs) - 1.5 * capacity * 60) < 4 * math.sqrt(1.5 * capacity * 60)
    high = [r for r in reqs if r.priority == "high"]
    assert 0.15 < len(high) / len(reqs) < 0.25
    assert {r.priority for r in reqs} == {"high", "low"} and {r.tenant for r in reqs} == {"t0", "t1", "t2", "t3"}
    assert all(r.slo_ttft_ms == (1000 if r.priority == "high" else 5000) and not r.send_slo_header for r in reqs)
    assert w.flow_control["classes"] == [{"name": "high", "ttft_slo_ms": 1000}, {"name": "low", "ttft_slo_ms": 5000}]


def test_mixed_objectives_map_each_objective_to_a_class_tightest_first_unless_told_not_to():
    w = build("mixed-objectives", objectives_ms="10000,500,2000")
    assert [c["name"] for c in w.flow_control["classes"]] == ["slo-500ms", "slo-2000ms", "slo-10000ms"]
    assert {r.slo_ttft_ms for r in w.requests()} == {500, 2000, 10000}
    assert all(r.priority == f"slo-{r.slo_ttft_ms}ms" and r.send_slo_header for r in w.requests())
    one_class = build("mixed-objectives", class_per_objective="false")
    assert "classes" not in one_class.flow_control and not any(r.priority for r in one_class.requests())
    with pytest.raises(ValueError):
        build("mixed-objectives", class_per_objective="maybe")


def test_flow_workloads_are_seeded():
    for name in flow_workloads.BUILDERS:
        one, again, other = build(name, 1), build(name, 1), build(name, 2)
        assert [r.body for r in one.requests()] == [r.body for r in again.requests()], name
        assert [r.body for r in one.requests()] != [r.body for r in other.requests()], name


def test_existing_workloads_carry_no_flow_settings():
    w = workloads.BUILDERS["shared-prefix"](workloads.apply_overrides(workloads.PARAMS["shared-prefix"](),
                                                                      {"groups": "2", "prompts_per_group": "2"}), 2, 1)
    assert w.flow_control is None
    assert all(flow_header_lines(r) == "" for r in w.requests())


# --- strategies and gateway config ----------------------------------------------------------------------------
def test_flow_settings_go_to_the_flow_control_section_with_the_workloads_defaults_beneath():
    got = dict(resolve_strategies("least-request,least-request:flow.enabled=true+flow.max_queued_per_tenant=50",
                                  ["least-request"]))
    off = gateway_config(got["least-request"], {"max_in_flight_per_pod": 16})
    assert off == {"routing": {"strategy": "least-request"}}   # today's gateway: no flow_control at all
    on = gateway_config(got["least-request:flow.enabled=true+flow.max_queued_per_tenant=50"],
                        {"max_in_flight_per_pod": 16, "max_queued_per_tenant": 1000, "classes": [{"name": "a"}]})
    assert on == {"routing": {"strategy": "least-request"},
                  "flow_control": {"enabled": True, "max_in_flight_per_pod": 16, "max_queued_per_tenant": 50,
                                   "classes": [{"name": "a"}]}}
    # Flow settings without enabled=true pass as they are, without the workload's.
    assert gateway_config(dict(resolve_strategies("random:flow.enabled=false", []))["random:flow.enabled=false"],
                          {"max_in_flight_per_pod": 16}) == {"routing": {"strategy": "random"},
                                                             "flow_control": {"enabled": False}}


# --- load generator -----------------------------------------------------------------------------------------------
def request(rid=0, tenant="", priority="", slo=0, send=True, at_s=0.0, prompt=100, max_tokens=10):
    return BenchRequest(rid=rid, path="/v1/chat/completions", body=b"{}", prompt_tokens=prompt,
                        max_tokens=max_tokens, block_keys=[], tenant=tenant, priority=priority, slo_ttft_ms=slo,
                        send_slo_header=send, at_s=at_s)


def test_flow_headers_are_sent_only_when_set():
    assert flow_header_lines(request()) == ""
    assert flow_header_lines(request(tenant="a", priority="high", slo=500)) == \
        "X-Tenant-Id: a\r\nX-Request-Priority: high\r\nX-Slo-Ttft-Ms: 500\r\n"
    assert flow_header_lines(request(priority="low", slo=5000, send=False)) == "X-Request-Priority: low\r\n"


def test_error_fields_read_an_openai_error_body():
    body = b'{"error":{"code":503,"message":"the request waited in the flow-control queue past its TTFT ' \
           b'objective (500 ms); retry later","param":null,"type":"service_unavailable"}}'
    code, kind, message = error_fields(body)
    assert (code, kind) == ("503", "service_unavailable") and message.startswith("the request waited")
    assert error_fields(b"not json") == ("", "", "")
    assert error_fields(b'{"error": "text"}') == ("", "", "")
    assert error_fields(b'[1]') == ("", "", "")


# --- figures ------------------------------------------------------------------------------------------------------
def answered(rid, ttft, prompt=100, completion=10):
    return Record(rid=rid, group=0, stage=0, send_s=0.0, status=200, ttft_s=ttft, e2e_s=ttft + 1,
                  prompt_tokens=prompt, completion_tokens=completion)


def shed(rid, status, message, kind="service_unavailable"):
    return Record(rid=rid, group=0, stage=0, send_s=0.0, status=status, error=f"HTTP {status}: ...",
                  error_code=str(status), error_type=kind, error_message=message)


def test_every_reason_phrase_is_in_a_message_the_gateway_writes():
    """The reasons are read from the gateway's messages: a phrase no message holds any more would silently turn
    its sheds into the bare error type, so each must still be inside a string literal of the sources that write
    them."""
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[3]
    literals = []
    for source in ("src/server/flow_gate.cpp", "src/server/request_preparation.cpp"):
        text = (root / source).read_text()
        literals += re.findall(r'"((?:[^"\\]|\\.)*)"', text)
    joined = "\n".join(literals)
    for phrase, label in flow.REASON_PHRASES:
        assert phrase in joined, (phrase, label)


def test_outcomes_and_shed_reasons():
    assert flow.outcome(answered(0, 0.1)) == flow.ANSWERED
    timeout = shed(1, 503, "the request waited in the flow-control queue past its TTFT objective (500 ms)")
    assert flow.outcome(timeout) == flow.SHED and flow.shed_reason(timeout) == "503 queue_timeout (objective)"
    quota = shed(2, 429, "the tenant 'x' has as many requests queued as flow_control.max_queued_per_tenant ...",
                 "rate_limit_error")
    assert flow.shed_reason(quota) == "429 tenant_queue_full"
    assert flow.shed_reason(shed(3, 503, "the gateway's flow-control queue is full ...")) == "503 queue_full"
    assert flow.shed_reason(shed(3, 503, "the request cannot meet its TTFT objective (500 ms): predicted ...")) == \
        "503 objective_unreachable"
    assert flow.shed_reason(shed(3, 503, "... longer than its class's max_wait_ms (30000 ms)")) == \
        "503 queue_timeout (max_wait_ms)"
    assert flow.shed_reason(shed(4, 429, "every pod is busy", "rate_limit_error")) == "429 rate_limit_error"
    assert flow.outcome(None) == flow.LOST
    assert flow.outcome(Record(rid=5, group=0, stage=0, send_s=0.0, error="ConnectionResetError")) == flow.LOST
    assert flow.outcome(Record(rid=6, group=0, stage=0, send_s=0.0, status=502, error="HTTP 502",
                               error_type="bad_gateway")) == flow.LOST
    assert flow.outcome(Record(rid=7, group=0, stage=0, send_s=0.0, status=503, error="HTTP 503: <html>")) == flow.LOST
    broken = answered(8, 0.1)
    broken.error = "stream ended without data: [DONE]"
    assert flow.outcome(broken) == flow.LOST


def test_jain_index():
    assert flow.jain([5, 5, 5]) == pytest.approx(1.0)
    assert flow.jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert flow.jain([1, 3]) == pytest.approx(16 / (2 * 10))
    assert math.isnan(flow.jain([])) and math.isnan(flow.jain([0, 0]))


def run_fixture():
    """Tenant a: 4 requests (objective 1 s): 3 answered at 0.2, 0.5, 1.5 s, 1 shed; tenant b: 2 requests (objective
    0.5 s, class high): 1 answered at 0.4 s, 1 never sent (lost). Arrivals up to 10 s."""
    reqs = [request(0, "a", "low", 1000, at_s=0.0), request(1, "a", "low", 1000, at_s=2.0),
            request(2, "a", "low", 1000, at_s=4.0), request(3, "a", "low", 1000, at_s=6.0),
            request(4, "b", "high", 500, at_s=8.0, prompt=300), request(5, "b", "high", 500, at_s=10.0, prompt=300)]
    records = [answered(0, 0.2), answered(1, 0.5), answered(2, 1.5),
               shed(3, 429, "... flow_control.max_queued_per_tenant ...", "rate_limit_error"),
               answered(4, 0.4, prompt=300, completion=10)]
    return {r.rid: r for r in reqs}, records


def test_flow_row_counts_every_request_and_its_figures_by_tenant_class_and_objective():
    by_rid, records = run_fixture()
    row = flow.flow_row(records, by_rid)
    assert row["window_s"] == 10.0
    a, b = row["tenants"]["a"], row["tenants"]["b"]
    assert (a["sent"], a["answered"], a["shed"], a["lost"], a["met"]) == (4, 3, 1, 0, 2)
    assert (b["sent"], b["answered"], b["shed"], b["lost"], b["met"]) == (2, 1, 0, 1, 1)
    assert a["attainment"] == pytest.approx(0.5) and a["attainment_answered"] == pytest.approx(2 / 3)
    assert a["goodput_rps"] == pytest.approx(0.2) and b["attainment"] == pytest.approx(0.5)
    assert a["ttft_p50"] == pytest.approx(0.5) and a["ttft_p90"] == pytest.approx(0.5 + 0.8 * 1.0)
    assert a["tokens_served"] == 330 and b["tokens_served"] == 310
    assert a["tokens_demanded"] == 440 and b["tokens_demanded"] == 620
    assert row["classes"]["high"] == b and row["classes"]["low"] == a
    assert set(row["objectives"]) == {"1000 ms", "500 ms"}
    everything = row["all"]
    assert everything["sent"] == everything["answered"] + everything["shed"] + everything["lost"] == 6
    assert everything["met"] == 3 and everything["goodput_rps"] == pytest.approx(0.3)
    assert row["shed_reasons"] == {"429 tenant_queue_full": 1}
    assert row["lost"] == 1 and row["lost_kinds"] == {"never sent": 1}
    assert row["jain_tokens"] == pytest.approx(640 ** 2 / (2 * (330 ** 2 + 310 ** 2)))
    x, y = 330 / 440, 310 / 620
    assert row["jain_tokens_per_demand"] == pytest.approx((x + y) ** 2 / (2 * (x * x + y * y)))


def test_a_request_without_an_objective_meets_it_when_answered():
    reqs = {0: request(0, "a"), 1: request(1, "a", at_s=1.0)}
    row = flow.flow_row([answered(0, 30.0)], reqs)
    assert row["all"]["met"] == 1 and row["tenants"]["a"]["attainment"] == pytest.approx(0.5)


def rows_for(strategy, on, seeds, steady_p90, high_attainment, goodput, lost=0, reasons=None):
    """Fake run rows carrying a flow dict with the figures the targets read."""
    out = []
    for seed, p90, att, good in zip(seeds, steady_p90, high_attainment, goodput):
        group = {"sent": 10, "answered": 10, "shed": 0, "lost": 0, "met": 10, "ttft_p50": p90 / 2, "ttft_p90": p90,
                 "attainment": att, "attainment_answered": att, "goodput_rps": good, "tokens_served": 100,
                 "tokens_demanded": 100}
        fl = {"window_s": 10.0, "all": group, "tenants": {"steady": group}, "classes": {"high": group},
              "objectives": {}, "shed_reasons": dict(reasons or {}) if seed == seeds[0] else {}, "lost": lost,
              "lost_kinds": {}, "jain_tokens": 1.0, "jain_tokens_per_demand": 1.0}
        out.append({"strategy": strategy, "seed": seed, "valid": True, "flow_control": on, "flow": fl})
    return out


def test_aggregate_over_seeds_fills_missing_shed_reasons_with_zero():
    rows = rows_for("on", True, [1, 2], [1.0, 2.0], [1, 1], [5, 5], reasons={"503 queue_full": 4})
    agg = flow.flow_aggregate(rows, ["on"])["on"]
    assert agg["seeds"] == [1, 2] and agg["flow_control"] is True and agg["lost_total"] == 0
    mean, half, n = agg["figures"]["tenants.steady.ttft_p90"]
    assert mean == pytest.approx(1.5) and n == 2 and half == pytest.approx(12.7062 * math.sqrt(0.5) / math.sqrt(2))
    assert agg["figures"]["shed_reasons.503 queue_full"][0] == pytest.approx(2.0)


def test_targets_are_judged_from_the_aggregates():
    """Ensures each of issue 27's targets reads the right figure: the steady tenant's p90 against 1.5x its p90
    alone (flow off), high-priority attainment >= 95 %, goodput >= 1.3x today's, and no request lost."""
    noisy = flow.flow_aggregate(rows_for("off", False, [1], [9.0], [0], [1])
                                + rows_for("on", True, [1], [0.14], [0], [1]), ["off", "on"])
    alone = flow.flow_aggregate(rows_for("off", False, [1], [0.1], [0], [1]), ["off"])
    priority = flow.flow_aggregate(rows_for("off", False, [1], [1], [0.3], [1])
                                   + rows_for("on", True, [1], [1], [0.94], [1]), ["off", "on"])
    mixed = flow.flow_aggregate(rows_for("off", False, [1], [1], [1], [10.0])
                                + rows_for("on", True, [1], [1], [1], [13.0], lost=1), ["off", "on"])
    rows = flow.target_rows({"noisy-neighbour": noisy, "noisy-neighbour-alone": alone, "priority-overload": priority,
                             "mixed-objectives": mixed})
    by = {r["workload"]: r for r in rows}
    assert by["noisy-neighbour"]["met"] is True and by["noisy-neighbour"]["alone"] == "0.100 s"
    assert by["noisy-neighbour"]["today"] == "9.000 s"
    assert by["priority-overload"]["met"] is False and by["priority-overload"]["flow_on"] == "94.0 %"
    assert by["mixed-objectives"]["met"] is True and "1.30x" in by["mixed-objectives"]["flow_on"]
    lost = rows[-1]
    assert lost["met"] is False and "mixed-objectives 1" in lost["flow_on"]
    # Without the alone run the noisy-neighbour target cannot be judged.
    assert flow.target_rows({"noisy-neighbour": noisy})[0]["met"] is None


def test_tables_and_docs_block():
    rows = rows_for("off", False, [1, 2], [1.0, 2.0], [1, 1], [5, 5]) + rows_for("on", True, [1, 2], [1, 1], [1, 1],
                                                                                 [5, 5])
    aggs = flow.flow_aggregate(rows, ["off", "on"])
    section = flow.flow_section("priority-overload", aggs)
    text = "\n".join(section)
    assert "| all | off (flow off) | 2 |" in text and "| class `high` | on (flow on) | 2 |" in text
    assert "| tenant `steady` |" in text and "lost (every run)" in text
    shed_rows = rows_for("off", False, [1], [1.0], [1], [5]) + rows_for("on", True, [1], [1.0], [1], [5],
                                                                        reasons={"503 queue_full": 3})
    table = "\n".join(flow.shed_table(flow.flow_aggregate(shed_rows, ["off", "on"])))
    assert "| off (flow off) | 0 | 0 |" in table and "| on (flow on) | 3 | 0 |" in table
    docs = "before\n" + flow.DOCS_BEGIN + "\nold\n" + flow.DOCS_END + "\nafter\n"
    new = flow.replace_docs(docs, flow.docs_tables({"priority-overload": aggs}, {"priority-overload": section}))
    assert new.startswith("before\n" + flow.DOCS_BEGIN + "\n") and new.endswith(flow.DOCS_END + "\nafter\n")
    assert "old" not in new and "**priority-overload**" in new and "| workload | target |" in new
    with pytest.raises(SystemExit):
        flow.replace_docs("no markers", [])


def test_output_lengths_vary_around_the_mean_within_the_spread():
    """Ensures each request's output is drawn within +- output_spread of output_tokens (scaled), averaging it, and
    that spread 0 gives every request the same length."""
    w = build("priority-overload", pods=4, duration_s="20")
    lengths = [r.max_tokens for r in w.requests()]
    assert min(lengths) >= 16 and max(lengths) <= 48 and len(set(lengths)) > 10   # 128 x 0.25 = 32 +- 50 %
    assert abs(sum(lengths) / len(lengths) - 32) < 1.5
    fixed = build("priority-overload", pods=4, output_spread="0")
    assert {r.max_tokens for r in fixed.requests()} == {32}
