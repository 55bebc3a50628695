"""The simulator's injected faults (/sim/fault) apply to every inference endpoint alike (engine_sim/server.cpp's one
fault preamble): a stalled pod accepts any of them and never answers, an error status answers each in its
endpoint's error shape, and clearing the faults serves them again."""
import json
import socket
import time

from harness import Sim, request, wait_until

BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/v1/messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/messages/count_tokens": {"messages": [{"role": "user", "content": "hi"}]},
    "/v1/embeddings": {"input": "hi"},
    "/v1/rerank": {"query": "q", "documents": ["a", "b"]},
    "/v2/rerank": {"query": "q", "documents": ["a", "b"]},
    "/v1/score": {"text_1": "q", "text_2": ["a", "b"]},
}


def post(sim, path, timeout=30):
    return request("127.0.0.1", sim.port, "POST", path, json.dumps({"model": "sim-model", **BODIES[path]}),
                   timeout=timeout)


def test_a_stalled_pod_stalls_every_endpoint_the_responses_api_included(tmp_path):
    """Ensures each inference endpoint, /v1/responses among them, is accepted and never answered while the pod
    stalls (the client gives up after 0.6 s, 20x the simulated work), and is recorded cancelled once the client
    leaves; without the fault each answers 200."""
    sim = Sim(tmp_path, "engine-0")
    try:
        for path in BODIES:
            assert post(sim, path)[0] == 200, path
        sim.fault(stall=True)
        for path in BODIES:
            started = time.monotonic()
            try:
                status, _, raw = post(sim, path, timeout=0.6)
                raise AssertionError(f"{path} answered {status} while the pod stalls: {raw[:200]!r}")
            except socket.timeout:
                pass
            assert time.monotonic() - started >= 0.5, path
        wait_until(lambda: {r["path"] for r in sim.requests() if r.get("cancelled")} == set(BODIES),
                   timeout=5, what="every stalled request recorded cancelled once its client left")
        assert all(r["model"] == "sim-model" for r in sim.requests() if r.get("cancelled"))
        sim.fault(stall=False)
        assert post(sim, "/v1/responses")[0] == 200
    finally:
        sim.stop()


def test_an_injected_error_status_answers_every_endpoint_in_its_shape(tmp_path):
    """Ensures error_status answers every inference endpoint (the Responses API included) before its body is read,
    the Messages endpoints in Anthropic's error shape and the others in OpenAI's."""
    sim = Sim(tmp_path, "engine-0")
    try:
        sim.fault(error_status=503)
        for path in BODIES:
            status, _, raw = post(sim, path)
            assert status == 503, (path, raw)
            body = json.loads(raw)
            if path.startswith("/v1/messages"):
                assert body["type"] == "error" and body["error"]["message"] == "injected fault", body
            else:
                assert "injected fault" in json.dumps(body), (path, body)
        sim.fault(error_status=0)
        assert post(sim, "/v1/responses")[0] == 200
    finally:
        sim.stop()
