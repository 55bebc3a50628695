"""The remote tokenizer (routing.prefix_cache.use_remote_tokenizer): prompts tokenized by the engines' own
/tokenize before prefix-cache routing, answers cached, and requests routed by load when no engine answers."""
import json
import threading
import time

import pytest
from harness import request, wait_until


def remote_config(timeout_ms=500, **extra):
    prefix_cache = {"block_size": 64, "use_remote_tokenizer": True, "remote_tokenizer_timeout_ms": timeout_ms, **extra}
    return {"routing": {"strategy": "prefix-cache", "prefix_cache": prefix_cache}}


def system_prompt(tag, words=300):
    return f"[{tag}] You are a careful assistant. " + " ".join(f"clause-{tag}-{i}" for i in range(words))


def chat_body(system, question, tools=None):
    body = {"model": "sim-model", "max_tokens": 4,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    if tools is not None:
        body["tools"] = tools
    return json.dumps(body)


def send(gw, body, path="/v1/chat/completions", headers=None):
    status, hdrs, raw = gw.call("POST", path, body, headers)
    assert status == 200, raw
    return hdrs


def debug_route(gw, body, endpoint="chat"):
    status, _, raw = gw.admin("POST", f"/debug/route?endpoint={endpoint}", body)
    assert status == 200, raw
    return json.loads(raw)


def tokenize_calls(sims):
    return sum(1 for s in sims for r in s.requests() if r["path"] == "/tokenize")


def sim_prompt_tokens(sim, body):
    """The simulator's own token count for a chat or completion body (its /sim/cache/match, which records nothing)."""
    status, _, raw = request("127.0.0.1", sim.port, "POST", "/sim/cache/match", body)
    assert status == 200, raw
    return json.loads(raw)["prompt_tokens"]


def test_shared_prompt_follows_its_pod_with_the_engines_token_count(sims, gateway_factory):
    """The second request of a shared long prompt goes to the pod that served the first, and the decision's
    tokens come from the engine: as many as the simulator counts for that prompt, one /tokenize per prompt."""
    gw = gateway_factory(sims, config=remote_config())
    system = system_prompt("legal")
    holder = send(gw, chat_body(system, "question 0"))["target-pod"]
    second = chat_body(system, "question 1")
    assert send(gw, second)["target-pod"] == holder
    decision = debug_route(gw, second)
    assert decision["tokens_source"] == "remote"
    assert decision["remote_tokens"] == sim_prompt_tokens(sims[0], second)
    assert decision["tokens"] == decision["remote_tokens"]  # the decision hashed the engine's ids
    assert decision["pod"] == holder
    assert tokenize_calls(sims) == 2  # the dry run found the second prompt's tokens in the cache
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="miss") == 2


def test_repeated_prompts_are_tokenized_once(sims, gateway_factory):
    """Identical prompts hit the gateway's cache: the engines see one /tokenize call per distinct prompt, and
    the calls are spread over the pods rather than all sent to one."""
    gw = gateway_factory(sims, config=remote_config())
    prompts = [chat_body(system_prompt(f"tenant{i}", 80), "hello") for i in range(6)]
    for _ in range(3):
        for body in prompts:
            send(gw, body)
    assert tokenize_calls(sims) == len(prompts)
    assert sum(1 for s in sims if any(r["path"] == "/tokenize" for r in s.requests())) >= 2
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="miss") == len(prompts)
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="hit") == 2 * len(prompts)
    assert gw.metric("prefixgate_remote_tokenizer_seconds_count") == 3 * len(prompts)


@pytest.mark.parametrize("fault", [{"tokenize_status": 500}, {"tokenize_delay_ms": 1500}], ids=["status", "slow"])
def test_failing_tokenizer_routes_by_load_within_the_timeout(sims, gateway_factory, fault):
    """When every engine's /tokenize fails (an error status, or slower than the timeout), requests still succeed,
    each waits at most about the timeout, the failures are counted, and nothing failed is cached."""
    timeout_ms = 300
    gw = gateway_factory(sims, config=remote_config(timeout_ms))
    for s in sims:
        s.fault(**fault)
    body = chat_body(system_prompt("outage"), "same question")
    waits = []
    for _ in range(12):
        started = time.monotonic()
        send(gw, body)
        waits.append(time.monotonic() - started)
    assert max(waits) < timeout_ms / 1000 + 0.5, waits
    outcome = "error" if "tokenize_status" in fault else "timeout"
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome=outcome) == 12
    assert gw.metric("aibrix_prefix_cache_routing_errors_total", model="sim-model", reason="tokenize_failed") == 12
    assert debug_route(gw, body)["tokens_source"] == "remote_failed"
    for s in sims:
        s.fault(tokenize_status=0, tokenize_delay_ms=0)
    send(gw, body)
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="miss") == 1
    assert debug_route(gw, body)["tokens_source"] == "remote"


def test_failed_tokenizer_routes_identical_prompts_by_load(sims, gateway_factory):
    """A request whose tokens could not be fetched is scored by load alone, never by hashes of its text in another
    token domain: identical prompts, sent one after another to idle pods, spread over the pods instead of all
    following the first one."""
    gw = gateway_factory(sims, config=remote_config())
    for s in sims:
        s.fault(tokenize_status=500)
    body = chat_body(system_prompt("outage"), "same question")
    pods = [send(gw, body)["target-pod"] for _ in range(12)]
    assert len(set(pods)) >= 2, pods


def test_no_ready_pod_is_counted(sims, gateway_factory):
    """With no ready pod the tokenizer is not asked (outcome no_pod, a tokenize failure) and the request gets the
    router's 503."""
    gw = gateway_factory(sims, config=remote_config())
    for s in sims:
        s.fault(health_status=503)
    wait_until(lambda: gw.admin("GET", "/readyz")[0] == 503, what="no ready pod")
    status, _, raw = gw.call("POST", "/v1/chat/completions", chat_body("x", "y"))
    assert status == 503, raw
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="no_pod") == 1
    assert gw.metric("aibrix_prefix_cache_routing_errors_total", model="sim-model", reason="tokenize_failed") == 1
    assert tokenize_calls(sims) == 0


def test_concurrent_requests_get_their_own_tokens(sims, gateway_factory):
    """Concurrent requests and dry runs each get the engine's tokens of their own prompt (no answer mixed up
    between requests sharing keep-alive connections), and all succeed."""
    gw = gateway_factory(sims, config=remote_config())
    bodies = [chat_body(system_prompt(f"c{i}", 40), f"q{i}") for i in range(12)]
    results = {}

    def one(i):
        results[i] = debug_route(gw, bodies[i])["remote_tokens"] if i % 2 else send(gw, bodies[i])["target-pod"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(1, len(bodies), 2):
        assert results[i] == sim_prompt_tokens(sims[0], bodies[i])
    assert len(results) == len(bodies)


def test_chat_with_tools_and_completions_use_the_engines_tokens(sims, gateway_factory):
    """Chat requests with tools are tokenized in the chat form (tools included) and completions in the completion
    form, each matching the simulator's count; prompts given as token ids and strategies that hash no prompt
    make no /tokenize call."""
    gw = gateway_factory(sims, config=remote_config())
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    with_tools = chat_body(system_prompt("tools", 60), "call it", tools=tools)
    without_tools = chat_body(system_prompt("tools", 60), "call it")
    send(gw, with_tools)
    decision = debug_route(gw, with_tools)
    assert decision["tokens_source"] == "remote"
    assert decision["remote_tokens"] == sim_prompt_tokens(sims[0], with_tools)
    assert decision["remote_tokens"] > sim_prompt_tokens(sims[0], without_tools)

    completion = json.dumps({"model": "sim-model", "prompt": system_prompt("complete", 60), "max_tokens": 4})
    send(gw, completion, "/v1/completions")
    decision = debug_route(gw, completion, "completions")
    assert decision["tokens_source"] == "remote"
    assert decision["remote_tokens"] == sim_prompt_tokens(sims[0], completion)
    assert tokenize_calls(sims) == 2

    token_ids = json.dumps({"model": "sim-model", "prompt": list(range(1, 200)), "max_tokens": 4})
    send(gw, token_ids, "/v1/completions")
    assert debug_route(gw, token_ids, "completions")["tokens_source"] == "local"
    other = chat_body(system_prompt("other", 60), "x")
    assert send(gw, other, headers={"routing-strategy": "least-request"})["routing-strategy"] == "least-request"
    assert tokenize_calls(sims) == 2
