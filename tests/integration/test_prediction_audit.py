"""The prediction audit: what the router predicted as cached on the chosen pod against what the engine reports."""
import json
import math
import os
from collections import defaultdict

import pytest
from harness import Sim, request, sse_events, wait_until
from prometheus_client.parser import text_string_to_metric_families

BLOCK = 64
PREFIX = {"routing": {"strategy": "prefix-cache", "prefix_cache": {"block_size": BLOCK}}}


def system_prompt(tag, words=400):
    return f"[{tag}] You are a careful assistant. " + " ".join(f"clause-{tag}-{i}" for i in range(words))


def chat_body(system, question, stream=False, include_usage=True, max_tokens=4):
    body = {"model": "sim-model", "max_tokens": max_tokens, "stream": stream,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    if stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def usage_of(raw, stream):
    """The response's usage object: the body's, or the stream's last chunk that carries one (None when absent)."""
    if not stream:
        return json.loads(raw).get("usage")
    usages = [json.loads(d).get("usage") for d in sse_events(raw) if d != "[DONE]"]
    usages = [u for u in usages if u]
    return usages[-1] if usages else None


def send(gw, body, headers=None):
    status, hdrs, raw = gw.call("POST", "/v1/chat/completions", json.dumps(body), headers)
    assert status == 200, raw
    return hdrs, usage_of(raw, body["stream"])


class Predictor:
    """The gateway's prediction, computed independently: the prefix index holds, per pod, the 64-byte blocks of
    every prompt routed there (character tokenizer: the prompt text is the messages' contents joined by a space);
    the prediction is matched blocks x 64 / prompt bytes of the engine's prompt tokens, rounded half up."""

    def __init__(self):
        self.routed = defaultdict(list)

    def predict(self, body, pod, prompt_tokens):
        text = " ".join(m["content"] for m in body["messages"]).encode()
        matched = 0
        for earlier in self.routed[pod]:
            matched = max(matched, len(os.path.commonprefix([earlier, text])) // BLOCK)
        self.routed[pod].append(text)
        x = min(1.0, matched * BLOCK / len(text)) * prompt_tokens
        return math.floor(x) + (1 if x - math.floor(x) >= 0.5 else 0)


def audit_series(gw):
    """The audit's series by pod: audited responses, predicted and engine-reported cached tokens, histogram
    counts (total and at most 0.5)."""
    families = {f.name: f for f in text_string_to_metric_families(gw.metrics_text())}

    def by_pod(family, sample, extra=None):
        f = families.get(family)
        return {s.labels["pod"]: s.value for s in (f.samples if f else [])
                if s.name == sample and all(s.labels.get(k) == v for k, v in (extra or {}).items())}

    return {"responses": by_pod("prefixgate_prefix_prediction_audited_responses",
                                "prefixgate_prefix_prediction_audited_responses_total"),
            "predicted": by_pod("prefixgate_prefix_predicted_tokens", "prefixgate_prefix_predicted_tokens_total"),
            "engine": by_pod("prefixgate_prefix_engine_cached_tokens", "prefixgate_prefix_engine_cached_tokens_total"),
            "errors": by_pod("prefixgate_prefix_prediction_error_ratio",
                             "prefixgate_prefix_prediction_error_ratio_count"),
            "errors_le_half": by_pod("prefixgate_prefix_prediction_error_ratio",
                                     "prefixgate_prefix_prediction_error_ratio_bucket", {"le": "0.5"})}


def predictions(gw):
    return {p["name"]: p["prediction"] for p in gw.debug_pods()}


def audited(gw, count, pod=None):
    """Waits until `count` responses (of `pod`, or in all) were audited in both /debug/pods and /metrics: a request
    is recorded when its outcome ends, just after its last byte reached the client."""
    def done():
        pods, series = predictions(gw), audit_series(gw)["responses"]
        names = [pod] if pod else list(pods)
        return (sum(pods[n]["responses"] for n in names) == count
                and sum(series.get(n, 0) for n in names) == count)
    wait_until(done, what=f"{count} audited responses")
    return predictions(gw)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_counters_equal_what_the_engines_reported_and_the_router_predicted(sims, gateway_factory, stream):
    """With prefix-cache and a repeated long shared prefix, the per-pod counters and /debug/pods equal the sums of
    the engines' reported cached tokens and of the gateway's predictions, and accuracy is high; a stream without a
    usage chunk is not audited."""
    gw = gateway_factory(sims, config=PREFIX)
    predictor = Predictor()
    expected = defaultdict(lambda: {"responses": 0, "predicted": 0, "engine": 0, "over": 0, "under": 0})
    for group in ("legal", "medical"):
        system = system_prompt(group)
        for i in range(5):
            body = chat_body(system, f"question {i} about {group}", stream=stream)
            headers, usage = send(gw, body)
            pod = headers["target-pod"]
            predicted = predictor.predict(body, pod, usage["prompt_tokens"])
            engine = usage["prompt_tokens_details"]["cached_tokens"]
            e = expected[pod]
            e["responses"] += 1
            e["predicted"] += predicted
            e["engine"] += engine
            e["over"] += max(predicted - engine, 0)
            e["under"] += max(engine - predicted, 0)
    if stream:  # no usage chunk: nothing to compare, but the index still records where it went
        body = chat_body(system_prompt("legal"), "question without usage", stream=True, include_usage=False)
        headers, usage = send(gw, body)
        assert usage is None
        predictor.predict(body, headers["target-pod"], 0)

    # Every request's log line (written after its audit step) is out: the stream without usage counted nowhere.
    wait_until(lambda: gw.read_log().count(" request id=") == (11 if stream else 10), what="every log line")
    pods = audited(gw, 10)
    series = audit_series(gw)
    assert sum(e["engine"] for e in expected.values()) > 0
    for pod, e in expected.items():
        assert series["responses"][pod] == e["responses"]
        assert series["errors"][pod] == e["responses"]
        assert series["predicted"][pod] == e["predicted"], (pod, series, dict(expected))
        assert series["engine"][pod] == e["engine"]
        p = pods[pod]
        assert (p["responses"], p["predicted_tokens"], p["engine_cached_tokens"]) == \
               (e["responses"], e["predicted"], e["engine"])
        assert (p["over_predicted_tokens"], p["under_predicted_tokens"]) == (e["over"], e["under"])
        base = e["engine"] + e["over"]
        assert p["accuracy"] == pytest.approx(1 - (e["over"] + e["under"]) / base if base else 1.0)
        assert p["accuracy"] > 0.9, p
    for pod, p in pods.items():
        if pod not in expected:
            assert p["responses"] == 0 and p["accuracy"] is None
    assert sum(series["responses"].values()) == 10
    # The per-request log line carries both numbers.
    wait_until(lambda: "predicted_cached_tokens=" in gw.read_log(), what="an audited request's log line")
    line = [ln for ln in gw.read_log().splitlines() if "predicted_cached_tokens=" in ln][-1]
    assert " cached_tokens=" in line and "strategy=prefix-cache" in line


def test_drift_shows_as_over_prediction(tmp_path, gateway_factory):
    """When a pod's engine evicted a prefix the gateway still believes it holds, the next routed request is
    over-predicted: predicted > engine, over_predicted_tokens grows, the error lands above 0.5 and accuracy drops."""
    small = [Sim(tmp_path, f"small-{i}", "--kv-capacity-tokens", "1024") for i in range(2)]
    try:
        gw = gateway_factory(small, config=PREFIX)
        system = system_prompt("drift", 90)
        holder = send(gw, chat_body(system, "first"))[0]["target-pod"]
        for i in range(3):
            headers, usage = send(gw, chat_body(system, f"again {i}"))
            assert headers["target-pod"] == holder
            assert usage["prompt_tokens_details"]["cached_tokens"] > 0.8 * usage["prompt_tokens"]
        before = audited(gw, 4, holder)[holder]
        assert before["accuracy"] > 0.9, before

        # Other prompts sent straight to the holder's engine push the prefix out of its small cache; the gateway
        # never sees them, so its index still says the holder has the prefix.
        sim = next(s for s in small if s.name == holder)
        for i in range(4):
            status, _, raw = request("127.0.0.1", sim.port, "POST", "/v1/chat/completions",
                                     json.dumps(chat_body(system_prompt(f"evict{i}", 220), "x", max_tokens=1)))
            assert status == 200, raw
        probe = chat_body(system, "after eviction", stream=True)
        status, _, raw = request("127.0.0.1", sim.port, "POST", "/sim/cache/match",
                                 json.dumps({"messages": probe["messages"]}))
        match = json.loads(raw)
        assert status == 200 and match["cached_tokens"] < 0.2 * match["prompt_tokens"], match

        headers, usage = send(gw, probe)
        assert headers["target-pod"] == holder and int(headers["x-prefix-match-percent"]) >= 90
        after = audited(gw, 5, holder)[holder]
        assert after["responses"] == before["responses"] + 1
        predicted = after["predicted_tokens"] - before["predicted_tokens"]
        engine = after["engine_cached_tokens"] - before["engine_cached_tokens"]
        assert engine == usage["prompt_tokens_details"]["cached_tokens"]
        assert predicted > 0.8 * usage["prompt_tokens"] and predicted > engine
        assert after["over_predicted_tokens"] - before["over_predicted_tokens"] == predicted - engine
        assert after["accuracy"] < before["accuracy"] - 0.15, (before, after)
        series = audit_series(gw)
        assert series["predicted"][holder] == after["predicted_tokens"]
        assert series["engine"][holder] == after["engine_cached_tokens"]
        assert series["errors"][holder] - series["errors_le_half"][holder] == 1  # the drifted response, above 0.5
    finally:
        for s in small:
            s.stop()


def test_strategy_without_prediction_is_not_audited(sims, gateway_factory):
    """Requests routed by a strategy that makes no prefix prediction (random) are not audited, though their
    engines report cached tokens; a prefix-cache request on the same gateway is."""
    gw = gateway_factory(sims, config={"routing": {"strategy": "random"}})
    system = system_prompt("random", 100)
    for i in range(4):
        headers, usage = send(gw, chat_body(system, f"q{i}", stream=bool(i % 2)))
        assert headers["routing-strategy"] == "random" and usage["prompt_tokens_details"] is not None
    # The log line is written after the outcome's audit step: once all four are there, nothing more can come.
    wait_until(lambda: gw.read_log().count("strategy=random") >= 4, what="the random requests' log lines")
    assert "predicted_cached_tokens=" not in gw.read_log()
    assert audit_series(gw)["responses"] == {}
    assert all(p["responses"] == 0 and p["accuracy"] is None for p in predictions(gw).values())

    headers, _ = send(gw, chat_body(system, "q", stream=True), {"routing-strategy": "prefix-cache"})
    audited(gw, 1, headers["target-pod"])
    assert audit_series(gw)["responses"] == {headers["target-pod"]: 1}
