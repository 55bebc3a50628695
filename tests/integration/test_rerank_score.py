"""Rerank and score (vLLM's /v1/rerank, /v2/rerank, /v1/score) through the real gateway and simulator: proxied to a
pod serving the model, routed by load alone (never by prefix), with the gateway's OpenAI-shaped errors."""
import json
import threading

import pytest

from api_helpers import gateway_over, openai_error
from harness import Sim, wait_until

RERANK = {"model": "sim-model", "query": "which pod holds the prefix?",
          "documents": ["the pod that served the last request", "a pod chosen at random", "the least loaded pod",
                        "the pod whose KV cache holds the prompt's blocks"]}
SCORE = {"model": "sim-model", "text_1": "which pod holds the prefix?",
         "text_2": ["the pod that served the last request", "a pod chosen at random"]}
ROUTES = [("/v1/rerank", RERANK), ("/v2/rerank", RERANK), ("/v1/score", SCORE)]


def check_shape(path, answer, body):
    """The simulator's answer in vLLM's shape for `path`."""
    assert answer["model"] == body["model"]
    if path.endswith("rerank"):
        assert answer["id"].startswith("rerank-")
        results = answer["results"]
        assert len(results) == min(body.get("top_n") or len(body["documents"]), len(body["documents"]))
        scores = [r["relevance_score"] for r in results]
        assert scores == sorted(scores, reverse=True)
        for r in results:
            assert r["document"]["text"] == body["documents"][r["index"]]
            assert 0 < r["relevance_score"] < 1
        assert answer["usage"]["total_tokens"] > 0
    else:
        assert answer["id"].startswith("score-")
        assert answer["object"] == "list"
        assert isinstance(answer["created"], int)
        assert [d["index"] for d in answer["data"]] == list(range(len(body["text_2"])))
        assert all(d["object"] == "score" and 0 < d["score"] < 1 for d in answer["data"])
        assert answer["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize("path,body", ROUTES, ids=["v1-rerank", "v2-rerank", "v1-score"])
def test_each_route_is_proxied_and_answered_in_vllm_shape(sims, gateway_factory, path, body):
    """Each route reaches an engine on the same path, untouched, and its answer comes back with the gateway's headers."""
    gw = gateway_factory(sims[:2])
    status, headers, raw = gw.call("POST", path, json.dumps(body))
    assert status == 200, raw
    check_shape(path, json.loads(raw), body)
    assert headers["target-pod"] in ("engine-0", "engine-1")
    assert headers["routing-strategy"] == "least-request"
    assert len(headers["request-id"]) == 32
    pod = next(s for s in sims if s.name == headers["target-pod"])
    seen = pod.requests()  # completions_seen() knows only /v1/ paths
    assert [r["path"] for r in seen] == [path]
    assert seen[0]["headers"]["x-request-id"] == headers["request-id"]


def test_top_n_and_scores_are_the_engines_and_deterministic(sims, gateway_factory):
    """top_n is honoured and the same pair scores the same through the gateway on either pod."""
    gw = gateway_factory(sims[:2])
    body = dict(RERANK, top_n=2)
    answers = {}
    for _ in range(12):
        status, headers, raw = gw.call("POST", "/v1/rerank", json.dumps(body))
        assert status == 200, raw
        answers[headers["target-pod"]] = json.loads(raw)["results"]
    assert all(len(results) == 2 for results in answers.values())
    assert len({json.dumps(results) for results in answers.values()}) == 1


def test_requests_go_to_a_pod_serving_their_model(tmp_path):
    """With two models on two pods, each rerank and score request goes to the pod serving its model."""
    alpha = Sim(tmp_path, "alpha-pod", model="alpha")
    beta = Sim(tmp_path, "beta-pod", model="beta")
    with gateway_over(tmp_path, [alpha, beta]) as gw:
        for model, pod in (("alpha", "alpha-pod"), ("beta", "beta-pod")):
            for path, body in ROUTES:
                status, headers, raw = gw.call("POST", path, json.dumps(dict(body, model=model)))
                assert status == 200, raw
                assert headers["target-pod"] == pod
                assert json.loads(raw)["model"] == model
        assert {r["path"] for r in alpha.requests()} == {"/v1/rerank", "/v2/rerank", "/v1/score"}
        assert len(alpha.requests()) == len(beta.requests()) == 3


@pytest.mark.parametrize("case", [
    ("/v1/rerank", '{"model": "sim-model", "query": "q", "documents": [', 400, "not valid JSON", None),
    ("/v1/score", '{"model": "sim-model", "text_1": "a", ', 400, "not valid JSON", None),
    ("/v2/rerank", '["not an object"]', 400, "must be a JSON object", None),
    ("/v1/rerank", '{"model": "sim-model", "documents": ["a"]}', 400, "'query' is required", "query"),
    ("/v1/score", '{"model": "sim-model", "text_1": "a"}', 400, "'text_2' is required", "text_2"),
    ("/v1/rerank", '{"query": "q", "documents": ["a"]}', 400, "'model' is required", "model"),
    ("/v1/rerank", '{"model": "no-such-model", "query": "q", "documents": ["a"]}', 404, "no-such-model", None),
    ("/v1/score", '{"model": "no-such-model", "text_1": "a", "text_2": "b"}', 404, "no-such-model", None),
    ("/v2/rerank", json.dumps({"model": "sim-model", "query": "q", "documents": ["x" * 5000]}), 413,
     "larger than limits.max_body_bytes", None),
], ids=["rerank-malformed", "score-malformed", "not-an-object", "missing-query", "missing-text_2", "missing-model",
        "rerank-unknown-model", "score-unknown-model", "body-too-large"])
def test_bad_requests_get_openai_errors_and_never_reach_an_engine(sims, gateway_factory, case):
    """Malformed bodies, missing fields, unknown models and oversized bodies are answered by the gateway itself."""
    path, body, status, words, param = case
    gw = gateway_factory(sims[:1], config={"limits": {"max_body_bytes": 4096}})
    got_status, _, got = gw.call("POST", path, body)
    assert got_status == status, got
    error = openai_error(got)
    assert words in error["message"], error
    assert error["code"] == status
    assert error["param"] == param
    assert isinstance(error["type"], str) and error["type"]
    assert sims[0].requests() == []


@pytest.mark.parametrize("path", ["/v1/rerank", "/v2/rerank", "/v1/score"])
def test_wrong_method_is_405_with_allow(sims, gateway_factory, path):
    """Another method on a rerank or score path is a 405 naming POST (not the 404 of an unknown path)."""
    gw = gateway_factory(sims[:1])
    status, headers, body = gw.call("GET", path)
    assert status == 405, body
    assert headers["allow"] == "POST"
    assert openai_error(body)["code"] == 405
    assert sims[0].requests() == []


def test_identical_requests_are_routed_by_load_not_by_prefix(sims, gateway_factory):
    """Under prefix-cache, identical chat requests stick to one pod (the control), while identical rerank and score
    requests spread over both pods with least-request applied: their text is never matched nor recorded."""
    gw = gateway_factory(sims[:2], config={"routing": {"strategy": "prefix-cache"}})
    long_text = "a long shared passage that fills many blocks of the prefix index. " * 40
    chat_pods = set()
    for _ in range(8):
        status, headers, raw = gw.chat(long_text)
        assert status == 200, raw
        assert headers["routing-strategy"] == "prefix-cache"
        chat_pods.add(headers["target-pod"])
    assert len(chat_pods) == 1
    bodies = {"/v1/rerank": dict(RERANK, query=long_text), "/v1/score": dict(SCORE, text_1=long_text)}
    for path, body in bodies.items():
        pods = []
        for _ in range(24):
            status, headers, raw = gw.call("POST", path, json.dumps(body), {"routing-strategy": "prefix-cache"})
            assert status == 200, raw
            assert headers["routing-strategy"] == "least-request"
            assert "x-prefix-match-percent" not in headers
            pods.append(headers["target-pod"])
        assert set(pods) == {"engine-0", "engine-1"}, (path, pods)
    # The dry run says the same.
    status, _, raw = gw.admin("POST", "/debug/route?endpoint=rerank", json.dumps(bodies["/v1/rerank"]))
    assert status == 200, raw
    assert json.loads(raw)["strategy"] == "least-request"


def test_concurrent_requests_spread_over_the_pods(tmp_path):
    """Identical rerank requests in flight together go to both pods (each pod's in-flight count is seen at once)."""
    slow = [Sim(tmp_path, f"slow-{i}", "--prefill-tokens-per-s", "2000", time_scale="1") for i in range(2)]
    with gateway_over(tmp_path, slow, config={"routing": {"strategy": "prefix-cache"}}) as gw:
        body = json.dumps(dict(RERANK, query="which pod? " * 100))  # ~300 tokens a pair: ~0.6 s of prefill
        results = []
        barrier = threading.Barrier(8)

        def one():
            barrier.wait()
            status, headers, raw = gw.call("POST", "/v1/rerank", body)
            results.append((status, headers.get("target-pod")))

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(status == 200 for status, _ in results), results
        pods = [pod for _, pod in results]
        assert set(pods) == {"slow-0", "slow-1"}
        assert max(pods.count(p) for p in set(pods)) <= 5
        wait_until(lambda: all(p["in_flight"] == 0 for p in gw.debug_pods()), timeout=5, what="in-flight back to 0")
