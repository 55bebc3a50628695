"""Prefix-cache routing through the real gateway and simulated engines."""
import json
import threading
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

PREFIX = {"routing": {"strategy": "prefix-cache", "prefix_cache": {"block_size": 64}}}


def system_prompt(tag, words=400):
    return f"[{tag}] You are a careful assistant. " + " ".join(f"clause-{tag}-{i}" for i in range(words))


def chat(gw, system, question, headers=None, max_tokens=4):
    body = {"model": "sim-model", "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    status, hdrs, raw = gw.call("POST", "/v1/chat/completions", json.dumps(body), headers)
    assert status == 200, raw
    return hdrs, json.loads(raw)


def test_shared_system_prompt_follows_the_pod_that_holds_it(sims, gateway_factory):
    """Requests sharing a long system prompt land on the pod that already holds it, and that engine reports
    cached tokens for them; the gateway reports its prefix match."""
    gw = gateway_factory(sims, config=PREFIX)
    system = system_prompt("legal")
    first_headers, first = chat(gw, system, "question 0")
    holder = first_headers["target-pod"]
    assert first_headers["routing-strategy"] == "prefix-cache"
    assert first_headers["x-prefix-match-percent"] == "0"
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    for i in range(1, 6):
        headers, body = chat(gw, system, f"question {i}")
        assert headers["target-pod"] == holder
        assert int(headers["x-prefix-match-percent"]) >= 90
        cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0.8 * body["usage"]["prompt_tokens"]


def test_different_prompts_spread_by_load(sims, gateway_factory):
    """New, unrelated prompts sent concurrently spread over the pods by load."""
    gw = gateway_factory(sims, config=PREFIX)
    pods = []

    def one(i):
        pods.append(chat(gw, system_prompt(f"tenant{i}", 50), "hello", max_tokens=40)[0]["target-pod"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(pods) == {"engine-0", "engine-1", "engine-2"}


def test_burst_of_identical_new_prompts_does_not_pile_onto_one_pod(sims, gateway_factory):
    """50 concurrent identical new prompts do not all go to one pod while the others are idle."""
    gw = gateway_factory(sims, config=PREFIX)
    system = system_prompt("burst")
    pods, barrier = [], threading.Barrier(50)

    def one():
        barrier.wait()
        pods.append(chat(gw, system, "same question", max_tokens=200)[0]["target-pod"])

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = Counter(pods)
    assert len(pods) == 50
    assert len(counts) >= 2, counts
    assert max(counts.values()) < 50


def test_debug_route_explains_without_recording(sims, gateway_factory):
    """POST /debug/route answers the decision pod by pod, and records nothing in the index."""
    gw = gateway_factory(sims, config=PREFIX)
    system = system_prompt("explain")
    holder = chat(gw, system, "q")[0]["target-pod"]
    body = json.dumps({"model": "sim-model", "messages": [{"role": "system", "content": system},
                                                          {"role": "user", "content": "another"}]})
    status, _, raw = gw.admin("POST", "/debug/route", body)
    assert status == 200, raw
    answer = json.loads(raw)
    assert answer["strategy"] == "prefix-cache"
    assert answer["pod"] == holder
    assert answer["tokens"] == len(system.encode()) + 1 + len("another")
    assert answer["blocks"] == answer["tokens"] // 64
    by_pod = {p["name"]: p for p in answer["pods"]}
    assert set(by_pod) == {"engine-0", "engine-1", "engine-2"}
    assert by_pod[holder]["match_percent"] >= 90
    assert all(by_pod[p]["match_percent"] == 0 for p in by_pod if p != holder)
    assert all({"load_score", "score"} <= set(v) for v in by_pod.values())
    # Nothing recorded: a brand-new prompt explained twice still matches nowhere.
    fresh = json.dumps({"model": "sim-model", "prompt": system_prompt("never-sent")})
    for _ in range(2):
        answer = json.loads(gw.admin("POST", "/debug/route?endpoint=completions", fresh)[2])
        assert all(p["match_percent"] == 0 for p in answer["pods"])
    status, _, raw = gw.admin("POST", "/debug/route", '{"model": "sim-model"}')
    assert status == 400 and "'messages' is required" in json.loads(raw)["error"]["message"]


def test_aibrix_series_are_exported(sims, gateway_factory):
    """The five aibrix_prefix_cache_* series appear with AIBrix's names and labels, in blend mode too."""
    gw = gateway_factory(sims, config=PREFIX)
    system = system_prompt("metrics")
    chat(gw, system, "a")
    chat(gw, system, "b")
    families = {f.name: f for f in text_string_to_metric_families(gw.metrics_text())}
    decisions = {s.labels["match_percent_bucket"]: s.value for s in families["aibrix_prefix_cache_routing_decisions"].samples
                 if s.name.endswith("_total")}
    assert decisions["0"] == 1 and decisions["76-100"] == 1
    selections = {s.labels["selection"]: s.value for s in families["aibrix_prefix_cache_routing_selection"].samples
                  if s.name.endswith("_total")}
    assert selections == {"least_request_fallback": 1.0, "prefix_match": 1.0}
    latency = [s for s in families["aibrix_prefix_cache_routing_latency_seconds"].samples if s.name.endswith("_count")]
    assert latency[0].value == 2
    errors = {s.labels["reason"]: s.value for s in families["aibrix_prefix_cache_routing_errors"].samples
              if s.name.endswith("_total")}
    assert errors.get("record_failed") == 0
    status = families["aibrix_prefix_cache_indexer_status"].samples[0]
    assert status.labels == {"model": "sim-model", "indexer_type": "local"} and status.value == 1


def test_model_profile_and_locked_strategy(sims, gateway_factory):
    """A model's config profile (config-profile header) and locked strategy choose the strategy, in the
    contract's precedence."""
    config = {**PREFIX, "models": {"sim-model": {"routing_strategy": "least-request",
                                                 "profiles": {"docs": {"routing_strategy": "prefix-cache"}}}}}
    gw = gateway_factory(sims, config=config)
    assert chat(gw, "x", "y")[0]["routing-strategy"] == "least-request"
    assert chat(gw, "x", "y", headers={"config-profile": "docs"})[0]["routing-strategy"] == "prefix-cache"
    assert chat(gw, "x", "y", headers={"routing-strategy": "random", "config-profile": "docs"})[0]["routing-strategy"] == "random"
    locked = gateway_factory(sims, config={"models": {"sim-model": {"locked_routing_strategy": "random"}}})
    assert chat(locked, "x", "y", headers={"routing-strategy": "least-request"})[0]["routing-strategy"] == "random"


def test_tiktoken_tokenizer_routes_by_prefix(sims, gateway_factory):
    """With AIBRIX_PREFIX_CACHE_TOKENIZER_TYPE=tiktoken the gateway counts cl100k tokens and still follows
    the prefix."""
    gw = gateway_factory(sims, config={"routing": {"strategy": "prefix-cache"}},
                         env={"AIBRIX_PREFIX_CACHE_TOKENIZER_TYPE": "tiktoken", "AIBRIX_PREFIX_CACHE_BLOCK_SIZE": "16"})
    answer = json.loads(gw.admin("POST", "/debug/route?endpoint=completions",
                                 json.dumps({"model": "sim-model", "prompt": "hello world, hello world"}))[2])
    assert answer["tokens"] == 5  # cl100k: "hello", " world", ",", " hello", " world"
    system = system_prompt("tik", 200)
    holder = chat(gw, system, "one")[0]["target-pod"]
    headers, _ = chat(gw, system, "two")
    assert headers["target-pod"] == holder and int(headers["x-prefix-match-percent"]) > 90


def segment_counts(gw):
    """prefixgate_tokenizer_cache_segments_total by outcome ({} when the family is absent)."""
    counts = {}
    for family in text_string_to_metric_families(gw.metrics_text()):
        for s in family.samples:
            if s.name == "prefixgate_tokenizer_cache_segments_total":
                counts[s.labels["outcome"]] = s.value
    return counts


def test_tiktoken_segment_cache_serves_a_resent_prefix(sims, gateway_factory):
    """With tiktoken, a long prompt resent with a new question is tokenized only after its last cached segment:
    /metrics counts the segments found (hit) and encoded (miss), and routing still follows the prefix. With
    routing.prefix_cache.tokenizer_cache_mb: 0 there is no cache and no such series."""
    env = {"AIBRIX_PREFIX_CACHE_TOKENIZER_TYPE": "tiktoken", "AIBRIX_PREFIX_CACHE_BLOCK_SIZE": "16"}
    gw = gateway_factory(sims, config={"routing": {"strategy": "prefix-cache"}}, env=env)
    system = "\n".join(f"Rule {i}: answer in the register of clause {i * 7} of the style guide." for i in range(500))
    assert len(system) > 6 * 4096
    holder = chat(gw, system, "first question")[0]["target-pod"]
    first = segment_counts(gw)
    assert first.get("hit", 0) == 0 and first["miss"] >= 6
    headers, _ = chat(gw, system, "second question")
    assert headers["target-pod"] == holder and int(headers["x-prefix-match-percent"]) > 90
    second = segment_counts(gw)
    assert second["hit"] >= 5, second
    assert second["miss"] - first["miss"] <= 2, (first, second)
    off = gateway_factory(sims, config={"routing": {"strategy": "prefix-cache", "prefix_cache": {"tokenizer_cache_mb": 0}}},
                          env=env)
    chat(off, system, "first question")
    assert segment_counts(off) == {}
