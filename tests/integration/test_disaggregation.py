"""Disaggregated prefill/decode through the real gateway, against simulated vLLM pods with roles (the simulator
speaks NixlConnector's kv_transfer_params: docs/simulator.md, "Prefill/decode roles"). Each check fails if the
feature broke: without disaggregation a request goes whole to one pod (no prefill leg on a prefill pod, nothing
pulled on the decode pod, no prefill-pod header), and in sidecar mode no prefill pod is named to the decode pod."""
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import Gateway, Sim, stream_content, wait_until


def wait_metric(gw, name, value, **labels):
    """A request's outcome metrics are recorded after its response is written: a client that reads /metrics at once
    may be first. Waits (bounded) until `name` with `labels` reads `value`."""
    wait_until(lambda: gw.metric(name, **labels) == value, timeout=5,
               what=f"{name}{labels} == {value}")


SYSTEM = "You are the support assistant of a large shipping company; answer from the policy below. " + " ".join(
    f"Clause {i}: parcels of class {i} travel by road unless marked urgent." for i in range(40))


def chat_body(question, stream=True, max_tokens=8, **extra):
    return {"model": "sim-model", "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}], **extra}


def pod(sim, role):
    return dict(sim.pod_entry(), role=role)


@pytest.fixture
def fleet(tmp_path):
    prefill = [Sim(tmp_path, f"prefill-{i}", "--role", "prefill") for i in range(2)]
    decode = [Sim(tmp_path, f"decode-{i}", "--role", "decode") for i in range(2)]
    yield prefill, decode
    for s in prefill + decode:
        s.stop()


def gateway(tmp_path, prefill, decode, mode="connector", **disaggregation):
    pods = [pod(s, "prefill") for s in prefill] + [pod(s, "decode") for s in decode]
    gw = Gateway(tmp_path, pods, config={"routing": {"strategy": "prefix-cache"},
                                         "disaggregation": {"mode": mode, **disaggregation}})
    # /readyz needs one ready pod; each leg needs its own kind: wait until every pod passed its health check.
    wait_until(lambda: all(p["ready"] for p in gw.debug_pods()), timeout=10, what="every pod ready")
    return gw


def send(gw, body, headers=None):
    status, response_headers, raw = gw.call("POST", "/v1/chat/completions", json.dumps(body), headers)
    assert status == 200, raw
    return response_headers, raw


def by_name(sims):
    return {s.name: s for s in sims}


def test_connector_prefills_on_a_prefill_pod_and_decodes_on_a_decode_pod_with_its_kv(tmp_path, fleet):
    prefill, decode = fleet
    gw = gateway(tmp_path, prefill, decode)
    try:
        headers, raw = send(gw, chat_body("Where is my parcel?"))
        prefill_pod, decode_pod = headers["prefill-pod"], headers["target-pod"]
        assert prefill_pod in by_name(prefill) and decode_pod in by_name(decode), headers
        request_id = headers["request-id"]
        # The prefill leg: vLLM's proxy body (not streamed, one token, do_remote_decode), the request's id.
        leg = by_name(prefill)[prefill_pod].completions_seen()[-1]
        assert leg["kv_role_leg"] == "prefill" and leg["stream"] is False and leg["completion_tokens"] == 1, leg
        assert leg["headers"]["x-request-id"] == request_id
        # The decode leg: the client's request (streamed, its max_tokens) with the prefill answer's params: the pod
        # pulled the prompt instead of computing it.
        done = by_name(decode)[decode_pod].completions_seen()[-1]
        assert done["kv_role_leg"] == "decode" and done["stream"] is True and done["completion_tokens"] == 8, done
        assert done["kv_pulled_tokens"] > 200, done
        assert done["headers"]["x-request-id"] == request_id
        assert "[DONE]" in raw.decode() and stream_content(raw)
        assert all(not s.completions_seen() for s in prefill if s.name != prefill_pod)
        assert all(not s.completions_seen() for s in decode if s.name != decode_pod)
        wait_metric(gw, "prefixgate_pd_requests_total", 1, outcome="disaggregated")
        wait_metric(gw, "prefixgate_pd_prefill_seconds_count", 1)
        wait_metric(gw, "prefixgate_pd_handoff_seconds_count", 1)

        # The same prefix again: the prefill pod that holds it is chosen (prefix-scored), and /debug/route explains
        # both legs.
        headers2, _ = send(gw, chat_body("Can I change the delivery address?"))
        assert headers2["prefill-pod"] == prefill_pod
        status, _, explained = gw.admin("POST", "/debug/route", json.dumps(chat_body("And the opening hours?")))
        assert status == 200, explained
        route = json.loads(explained)
        assert route["leg"] == "prefill" and route["pod"] == prefill_pod and route["match_percent"] > 50, route
        assert route["decode"]["pod"] in by_name(decode) and route["decode"]["strategy"] == "least-request", route
        assert {p["name"] for p in route["pods"]} == set(by_name(prefill))
        assert {p["name"] for p in route["decode"]["pods"]} == set(by_name(decode))
    finally:
        gw.stop()


def test_a_failed_prefill_pod_is_retried_on_another_and_a_client_cannot_name_the_prefill_pod(tmp_path, fleet):
    prefill, decode = fleet
    prefill[0].fault(error_status=500)
    gw = gateway(tmp_path, prefill, decode)
    try:
        for i in range(4):
            headers, _ = send(gw, chat_body(f"Question {i} about my order?", stream=False),
                              {"x-prefiller-host-port": "203.0.113.9:1", "x-prefiller-url": "http://203.0.113.9:1"})
            assert headers["prefill-pod"] == "prefill-1", headers
        for s in prefill + decode:
            for seen in s.completions_seen():
                assert "x-prefiller-host-port" not in seen["headers"] and "x-prefiller-url" not in seen["headers"]
        assert sum(1 for r in decode[0].completions_seen() + decode[1].completions_seen()
                   if r["kv_role_leg"] == "decode") == 4
    finally:
        gw.stop()


def test_a_prefill_answer_without_transfer_params_is_decoded_whole_on_the_decode_pod(tmp_path, fleet):
    _, decode = fleet
    # An SGLang-speaking pod ignores kv_transfer_params: its answer carries none.
    plain = Sim(tmp_path, "plain-prefill", "--engine-dialect", "sglang")
    gw = gateway(tmp_path, [plain], decode)
    try:
        headers, _ = send(gw, chat_body("Is Sunday delivery possible?"))
        assert headers["prefill-pod"] == "plain-prefill"
        done = by_name(decode)[headers["target-pod"]].completions_seen()[-1]
        assert done["kv_role_leg"] == "" and done["kv_pulled_tokens"] == 0 and done["status"] == 200, done
        wait_metric(gw, "prefixgate_pd_requests_total", 1, outcome="no_transfer_params")
        assert gw.metric("prefixgate_pd_requests_total", outcome="disaggregated") == 0
    finally:
        gw.stop()
        plain.stop()


def test_sidecar_mode_sends_once_to_the_decode_pod_naming_the_prefill_pod(tmp_path, fleet):
    prefill, decode = fleet
    gw = gateway(tmp_path, prefill, decode, mode="sidecar")
    try:
        headers, _ = send(gw, chat_body("Do you ship abroad?"), {"x-prefiller-host-port": "203.0.113.9:1"})
        prefill_pod = by_name(prefill)[headers["prefill-pod"]]
        seen = by_name(decode)[headers["target-pod"]].completions_seen()[-1]
        assert seen["headers"]["x-prefiller-host-port"] == f"127.0.0.1:{prefill_pod.port}", seen["headers"]
        assert all(not s.completions_seen() for s in prefill)  # the sidecar, not the gateway, runs the prefill leg
        wait_metric(gw, "prefixgate_pd_requests_total", 1, outcome="sidecar")
    finally:
        gw.stop()


def test_short_prompts_are_served_whole_by_a_decode_pod_below_the_threshold(tmp_path, fleet):
    prefill, decode = fleet
    gw = gateway(tmp_path, prefill, decode, aggregate_below_tokens=100000)
    try:
        headers, _ = send(gw, chat_body("Short one."))
        assert "prefill-pod" not in headers and headers["target-pod"] in by_name(decode), headers
        assert all(not s.completions_seen() for s in prefill)
        done = by_name(decode)[headers["target-pod"]].completions_seen()[-1]
        assert done["kv_role_leg"] == "" and done["kv_pulled_tokens"] == 0
        wait_metric(gw, "prefixgate_pd_requests_total", 1, outcome="aggregated")
    finally:
        gw.stop()


def foreign_kv(gw, question):
    """kv_transfer_params telling a pod to pull the prompt's KV from a host of the client's choosing (as many block
    ids as the prompt fills, so that an engine would act on them)."""
    _, raw = send(gw, chat_body(question, stream=False))
    blocks = -(-json.loads(raw)["usage"]["prompt_tokens"] // 16)
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": list(range(blocks)),
            "remote_engine_id": "elsewhere", "remote_request_id": "r-1", "remote_host": "169.254.169.254",
            "remote_port": 80, "tp_size": 1}


def test_a_clients_kv_transfer_params_never_reach_a_pod_unless_allowed(tmp_path):
    # A client's kv_transfer_params would make the pod's KV connector pull from any host it names: removed for a
    # model that is not disaggregated too, unless disaggregation.pass_client_kv_transfer_params says otherwise.
    sim = Sim(tmp_path, "both-0")
    try:
        for allowed in (False, True):
            gw = Gateway(tmp_path, [sim.pod_entry()],
                         config={"disaggregation": {"pass_client_kv_transfer_params": allowed}})
            try:
                params = foreign_kv(gw, "Where is my parcel?")
                _, raw = send(gw, chat_body("Where is my parcel?", stream=False, kv_transfer_params=params))
                seen = sim.completions_seen()[-1]
                if allowed:
                    assert seen["kv_role_leg"] == "decode", seen  # the pod was told to pull from the named host
                    assert "kv_transfer_params" in json.loads(raw)
                else:
                    assert seen["kv_role_leg"] == "" and seen["kv_pulled_tokens"] == 0, seen
                    assert "kv_transfer_params" not in json.loads(raw)  # the pod never saw the field
            finally:
                gw.stop()
    finally:
        sim.stop()


def test_a_split_request_never_passes_the_clients_kv_transfer_params(tmp_path, fleet):
    prefill, decode = fleet
    gw = gateway(tmp_path, prefill, decode, mode="sidecar", pass_client_kv_transfer_params=True)
    try:
        params = foreign_kv(gw, "Do you ship abroad?")
        headers, _ = send(gw, chat_body("Do you ship abroad?", stream=False, kv_transfer_params=params))
        seen = by_name(decode)[headers["target-pod"]].completions_seen()[-1]
        assert seen["kv_role_leg"] == "" and seen["kv_pulled_tokens"] == 0, seen
    finally:
        gw.stop()


def test_a_busy_prefill_side_sends_the_request_whole_to_a_decode_pod(tmp_path):
    # Prefill pods 100 times slower than real time hold their legs (about 2 s) long enough to be seen busy together
    # on a loaded machine (20 times held them ~0.4 s: in CI the second leg could start after the first had ended).
    prefill = [Sim(tmp_path, f"prefill-{i}", "--role", "prefill", time_scale="100") for i in range(2)]
    decode = [Sim(tmp_path, f"decode-{i}", "--role", "decode") for i in range(2)]
    gw = None
    try:
        gw = gateway(tmp_path, prefill, decode, max_prefill_in_flight=1)
        with ThreadPoolExecutor(2) as pool:
            # Nothing in common: prefix-cache spreads them by load, one per prefill pod (the second sent once the
            # first is counted: sent together, both could be decided on the same idle view).
            slow = []
            for i in range(2):
                slow.append(pool.submit(send, gw, {"model": "sim-model", "max_tokens": 2, "messages": [
                    {"role": "user", "content": f"{i} " + "unrelated words " * 200}]}))
                wait_until(lambda: sum(p["in_flight"] >= 1 for p in gw.debug_pods() if p["role"] == "prefill") > i,
                           timeout=10, what=f"{i + 1} prefill pods busy")
            headers, _ = send(gw, chat_body("Quick one."))
            assert "prefill-pod" not in headers and headers["target-pod"] in by_name(decode), headers
            done = by_name(decode)[headers["target-pod"]].completions_seen()[-1]
            assert done["kv_role_leg"] == "" and done["kv_pulled_tokens"] == 0  # the decode pod prefilled it
            wait_metric(gw, "prefixgate_pd_requests_total", 1, outcome="prefill_busy")
            for future in slow:
                assert "prefill-pod" in future.result(timeout=30)[0]
        # The prefill side free again: split as usual.
        headers, _ = send(gw, chat_body("Another question."))
        assert "prefill-pod" in headers
        wait_metric(gw, "prefixgate_pd_requests_total", 3, outcome="disaggregated")
    finally:
        if gw is not None:
            gw.stop()
        for s in prefill + decode:
            s.stop()
