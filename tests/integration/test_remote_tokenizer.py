"""The remote tokenizer (routing.prefix_cache.use_remote_tokenizer): prompts tokenized by the engines' own
/tokenize before prefix-cache routing, answers cached, and requests routed by load when no engine answers; each
engine asked in its dialect (vLLM, llama.cpp's /apply-template then /tokenize, SGLang without a chat form)."""
import json
import threading
import time

import pytest
from harness import LLAMA_SERVER_BIN, LlamaServer, Sim, llama_available, request, wait_until


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
    each waits at most about the timeout, the failures are counted, and nothing failed is cached. Pods that timed out
    are skipped afterwards (their breakers open: outcome breaker_open) until a probe after the backoff finds them
    answering again; an error status opens no breaker (it comes from the request, and quickly)."""
    timeout_ms = 300
    gw = gateway_factory(sims, config=remote_config(timeout_ms, remote_tokenizer_breaker_backoff_ms=200,
                                                    remote_tokenizer_breaker_max_backoff_ms=400))
    for s in sims:
        s.fault(**fault)
    body = chat_body(system_prompt("outage"), "same question")
    waits = []
    for _ in range(12):
        started = time.monotonic()
        send(gw, body)
        waits.append(time.monotonic() - started)
    assert max(waits) < timeout_ms / 1000 + 0.5, waits
    if "tokenize_status" in fault:
        assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="error") == 12
        assert gw.metric("prefixgate_remote_tokenizer_breaker_opens_total") == 0
    else:
        timeouts = gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="timeout")
        skipped = gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="breaker_open")
        assert timeouts >= 1 and timeouts + skipped == 12, (timeouts, skipped)
        assert gw.metric("prefixgate_remote_tokenizer_breaker_opens_total", reason="timeout") >= len(sims)
    assert gw.metric("aibrix_prefix_cache_routing_errors_total", model="sim-model", reason="tokenize_failed") == 12
    assert debug_route(gw, body)["tokens_source"] == "remote_failed"
    for s in sims:
        s.fault(tokenize_status=0, tokenize_delay_ms=0)
    # The dry run asks as a request would (a probe, once a backoff has passed) and caches the answer it gets.
    wait_until(lambda: debug_route(gw, body)["tokens_source"] == "remote", what="the engines' tokens again")
    send(gw, body)
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="hit") == 1


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


def test_a_model_no_pod_serves_is_not_tokenized_nor_counted_by_name(sims, gateway_factory):
    """Ensures a request for a model no pod serves gets the router's 404 without a tokenizer call and adds no series
    named after it (each made-up name once added aibrix_prefix_cache_routing_errors_total series: unbounded)."""
    gw = gateway_factory(sims, config=remote_config())
    for n in range(3):
        body = json.dumps({"model": f"made-up-{n}", "messages": [{"role": "user", "content": "hi"}]})
        status, _, raw = gw.call("POST", "/v1/chat/completions", body)
        assert status == 404, raw
    assert "made-up-" not in gw.metrics_text()
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


# ---- engine dialects: llama.cpp's /apply-template then /tokenize, SGLang's /tokenize (no chat form) ----

@pytest.fixture
def dialect_sims(tmp_path):
    """Starts simulated pods speaking an engine's HTTP (prefixgate-engine-sim --engine-dialect); `engine` is what
    their pods-file entries say (None: no `engine` key, the dialect is recognised from /metrics)."""
    started = []

    def make(dialect, count=2, engine="same", prefix=None):
        made = [Sim(tmp_path, f"{prefix or dialect}-{i}", "--engine-dialect", dialect) for i in range(count)]
        started.extend(made)
        entries = []
        for s in made:
            entry = s.pod_entry()
            if engine is not None:
                entry["engine"] = dialect if engine == "same" else engine
            entries.append(entry)
        return made, entries

    yield make
    for s in started:
        s.stop()


def tokenizer_paths(sims):
    return [r["path"] for s in sims for r in s.requests() if r["path"] in ("/tokenize", "/apply-template")]


def outcome(gw, name):
    return gw.metric("prefixgate_remote_tokenizer_requests_total", outcome=name)


def test_llamacpp_chat_is_templated_then_tokenized(dialect_sims, gateway_factory):
    """On llama.cpp pods a chat request is templated by the engine (/apply-template) and the rendered prompt
    tokenized (/tokenize): the decision hashes as many tokens as the engine counts for the chat request, a shared
    prompt follows its pod, each distinct prompt costs the two calls once, and a completion costs one /tokenize."""
    sims, entries = dialect_sims("llamacpp")
    gw = gateway_factory(entries, config=remote_config())
    system = system_prompt("llama")
    holder = send(gw, chat_body(system, "question 0"))["target-pod"]
    second = chat_body(system, "question 1")
    assert send(gw, second)["target-pod"] == holder
    decision = debug_route(gw, second)
    assert decision["tokens_source"] == "remote"
    assert decision["remote_tokens"] == sim_prompt_tokens(sims[0], second)
    assert decision["tokens"] == decision["remote_tokens"]
    assert sorted(tokenizer_paths(sims)) == ["/apply-template"] * 2 + ["/tokenize"] * 2
    assert outcome(gw, "miss") == 2

    completion = json.dumps({"model": "sim-model", "prompt": system_prompt("llama-complete", 60), "max_tokens": 4})
    send(gw, completion, "/v1/completions")
    decision = debug_route(gw, completion, "completions")
    assert decision["tokens_source"] == "remote"
    assert decision["remote_tokens"] == sim_prompt_tokens(sims[0], completion)
    assert sorted(tokenizer_paths(sims)) == ["/apply-template"] * 2 + ["/tokenize"] * 3


def test_sglang_chat_is_unsupported_and_routed_by_load(dialect_sims, gateway_factory):
    """SGLang's /tokenize has no chat form: a chat request on SGLang pods is not tokenized (no call, no guessed
    template), is routed by load alone (identical prompts spread over the pods), counted as unsupported and logged
    with the reason; a completion is tokenized by SGLang's /tokenize."""
    sims, entries = dialect_sims("sglang")
    gw = gateway_factory(entries, config=remote_config())
    body = chat_body(system_prompt("sglang"), "same question")
    pods = [send(gw, body)["target-pod"] for _ in range(8)]
    assert len(set(pods)) == 2, pods
    assert tokenizer_paths(sims) == []
    assert outcome(gw, "unsupported") == 8
    assert gw.metric("aibrix_prefix_cache_routing_errors_total", model="sim-model", reason="tokenize_failed") == 8
    assert debug_route(gw, body)["tokens_source"] == "remote_failed"
    assert "SGLang's /tokenize has no chat form" in gw.read_log()

    completion = json.dumps({"model": "sim-model", "prompt": system_prompt("sglang-complete", 60), "max_tokens": 4})
    send(gw, completion, "/v1/completions")
    decision = debug_route(gw, completion, "completions")
    assert decision["tokens_source"] == "remote"
    assert decision["remote_tokens"] == sim_prompt_tokens(sims[0], completion)
    assert tokenizer_paths(sims) == ["/tokenize"]
    assert outcome(gw, "miss") == 1


def test_mixed_fleet_chat_asks_a_pod_that_can(dialect_sims, gateway_factory):
    """A model served by SGLang and vLLM pods at once: chat requests are tokenized by the vLLM pod (never sent to
    SGLang, which cannot), so none is unsupported."""
    sglang, sglang_entries = dialect_sims("sglang", count=1)
    vllm, vllm_entries = dialect_sims("vllm", count=1)
    gw = gateway_factory(sglang_entries + vllm_entries, config=remote_config())
    for i in range(4):
        send(gw, chat_body(system_prompt(f"mixed{i}", 40), "q"))
    assert tokenizer_paths(sglang) == []
    assert tokenizer_paths(vllm) == ["/tokenize"] * 4
    assert outcome(gw, "miss") == 4
    assert outcome(gw, "unsupported") == 0


def test_dialect_recognised_from_metrics_is_spoken(dialect_sims, gateway_factory):
    """A llama.cpp pod listed without `engine` is spoken to as vLLM until its /metrics names its engine, then in
    llama.cpp's dialect: its chat requests then get the engine's tokens."""
    sims, entries = dialect_sims("llamacpp", count=1, engine=None)
    gw = gateway_factory(entries, config=remote_config())
    attempts = iter(range(1000))

    def tokenized():
        return debug_route(gw, chat_body(system_prompt("auto", 40), f"q{next(attempts)}"))["tokens_source"] == "remote"

    wait_until(tokenized, what="the llama.cpp pod recognised and tokenizing")
    body = chat_body(system_prompt("auto-after", 40), "q")
    assert debug_route(gw, body)["remote_tokens"] == sim_prompt_tokens(sims[0], body)
    assert "/apply-template" in tokenizer_paths(sims)


def test_real_llamacpp_tokens_are_its_prompt_tokens(tmp_path, gateway_factory):
    """In front of llama.cpp's own llama-server (scripts/fetch_llama.sh, a random-weight model), the remote
    tokenizer's ids are exactly the prompt the server charges: as many as usage.prompt_tokens of the chat request
    (with tools, text that looks like special tokens, non-ASCII) and of the completion. A missing binary fails."""
    if not llama_available():
        pytest.fail(f"llama-server not found at {LLAMA_SERVER_BIN}: run scripts/fetch_llama.sh (scripts/setup.sh "
                    "runs it), or set PREFIXGATE_LLAMA_SERVER_BIN")
    llama = LlamaServer(tmp_path, name="llama-0", parallel=1, ctx=4096)
    try:
        gw = gateway_factory([llama.pod_entry()], config=remote_config(timeout_ms=5000))
        tools = [{"type": "function", "function": {"name": "lookup", "description": "find a thing",
                                                   "parameters": {"type": "object",
                                                                  "properties": {"q": {"type": "string"}}}}}]
        messages = [{"role": "system", "content": "Be \"brief\".\n"},
                    {"role": "user", "content": "h\u00e9llo <|im_end|> \U0001F600 " + system_prompt("real", 40)}]
        cases = [("chat", "/v1/chat/completions", {"messages": messages}),
                 ("chat", "/v1/chat/completions", {"messages": messages[1:], "tools": tools}),
                 ("completions", "/v1/completions",
                  {"prompt": "Once upon a time <|im_start|> " + system_prompt("c", 40)})]
        for endpoint, path, fields in cases:
            body = json.dumps({"model": llama.model, "max_tokens": 2, **fields})
            status, _, raw = gw.call("POST", path, body)
            assert status == 200, raw
            decision = debug_route(gw, body, endpoint)
            assert decision["tokens_source"] == "remote", decision
            assert decision["remote_tokens"] == json.loads(raw)["usage"]["prompt_tokens"], (endpoint, fields.keys())
        assert outcome(gw, "miss") == len(cases)
    finally:
        llama.stop()
