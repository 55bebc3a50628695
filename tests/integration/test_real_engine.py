"""The gateway in front of real llama.cpp engines (llama-server, scripts/fetch_llama.sh; one thread, two slots, a
random-weight model): their signals read in the llama.cpp dialect and never silently missing, streams that never
meet a connection the engine closed, the prediction audit equal to what the engines report, the bytes per engine
token learned from their usage, and their capacity (slots x context from /props) bounding what the gateway
predicts, unless a host prompt cache shows. A missing binary fails these tests (scripts/setup.sh builds it)."""
import json

import pytest

from harness import LLAMA_SERVER_BIN, LlamaServer, llama_available, sse_events, wait_until

MODEL = "llama-model"
FAST_SCRAPE = {"engine_metrics": {"scrape_interval_ms": 100, "scrape_timeout_ms": 1000}}
PARAGRAPH = ("A gateway in front of inference engines sends each request to the engine that already holds the "
             "longest prefix of its prompt in its cache, and weighs that against how busy each engine is. ")


def document(tag, repeats=12):
    """About 400 tokens of English that no other tag shares beyond the template's first tokens."""
    return f"Document {tag}. " + " ".join(f"{tag}-{i}: {PARAGRAPH}" for i in range(repeats))


def require_llama():
    if not llama_available():
        pytest.fail(f"llama-server not found at {LLAMA_SERVER_BIN}: run scripts/fetch_llama.sh (scripts/setup.sh "
                    "runs it), or set PREFIXGATE_LLAMA_SERVER_BIN")


@pytest.fixture
def llamas(tmp_path):
    """Starts llama-server pods with the given extra flags; every one is stopped after the test."""
    require_llama()
    started = []

    def start(count, *extra):
        for _ in range(count):
            started.append(LlamaServer(tmp_path, name=f"llama-{len(started)}", parallel=2, ctx=8192, extra=extra))
        return started[-count:]

    yield start
    for server in started:
        server.stop()


def engine_of(gw, name):
    return next(p for p in gw.debug_pods() if p["name"] == name)


def chat(gw, content, stream=False, headers=None, max_tokens=4):
    """A chat request through the gateway that must succeed; returns (headers, usage or None, text)."""
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    status, hdrs, body = gw.chat(content, max_tokens=max_tokens, stream=stream, model=MODEL, headers=headers,
                                 **extra)
    assert status == 200, body[:500]
    if not stream:
        answer = json.loads(body)
        return hdrs, answer["usage"], answer["choices"][0]["message"]["content"]
    events = [json.loads(e) for e in sse_events(body) if e != "[DONE]"]
    usage = next((e["usage"] for e in events if e.get("usage")), None)
    text = "".join((c.get("delta") or {}).get("content") or "" for e in events for c in e.get("choices", []))
    return hdrs, usage, text


def test_llamacpp_pods_are_read_in_their_dialect(tmp_path, llamas, gateway_factory):
    """A llama.cpp pod, declared or recognised from its /metrics, has its load read from the llamacpp:* series
    (running, waiting, cache counters), its KV capacity from /props (2 slots x 4,096 tokens), and the KV usage it
    does not report shown as unreported (null), with no failed scrape."""
    declared, recognised = llamas(2)
    auto_entry = {k: v for k, v in recognised.pod_entry().items() if k != "engine"}
    gw = gateway_factory([declared, auto_entry], config=FAST_SCRAPE)
    for pod, source in ((declared, "configured"), (recognised, "recognised")):
        seen = wait_until(lambda: (p := engine_of(gw, pod.name))["engine_metrics"]["slots"] and p, timeout=20,
                          what=f"{pod.name}'s slots from /props")
        engine = seen["engine_metrics"]
        assert seen["engine"] == "llamacpp" and seen["engine_source"] == source and seen["scrape_error"] is None
        assert engine["known_series"] >= 4
        assert engine["running"] == 0 and engine["waiting"] == 0
        assert engine["kv_cache_usage"] is None and engine["unreported"] == "kv_cache_usage"
        assert engine["prefix_cache_queries"] is not None
        assert engine["slots"] == 2 and seen["kv_capacity_tokens"] == 8192
        assert engine["slot_cache"] == "unknown"  # nothing learned yet of what it keeps beyond its slots
        assert engine["capacity_error"] is None and engine["last_error"] == ""
        assert sum(engine["scrape_errors"].values()) == 0
    assert "engine recognised as llamacpp" in gw.read_log()
    assert gw.metric("prefixgate_engine_scrape_errors_total") == 0


def test_streams_never_meet_a_connection_the_engine_closed(tmp_path, llamas, gateway_factory):
    """llama-server closes the connection after every streamed response although it announced keep-alive: the
    gateway does not pool a llama.cpp stream's connection (it would race the engine's close), and checks every
    pooled one before reuse, so a run of streams and plain answers to one pod has no retry, no failure and no
    request written into a closed connection."""
    (pod,) = llamas(1)
    gw = gateway_factory([pod], config={"threads": 1})
    for i in range(10):
        _, usage, text = chat(gw, f"Question {i}: {document('s', 2)}", stream=True)
        assert usage["prompt_tokens"] > 100 and text
    for i in range(3):
        _, usage, text = chat(gw, f"Plain {i}: {document('p', 2)}")
        assert text
    assert gw.metric("prefixgate_retries_total") == 0
    assert gw.metric("prefixgate_upstream_errors_total") == 0
    assert gw.metric("prefixgate_upstream_stale_connections_total", stage="sent") == 0
    assert gw.metric("prefixgate_upstream_stale_connections_total", stage="detected") == 0  # never pooled
    # Counted when each relay ends, just after the client read its last byte.
    wait_until(lambda: gw.metric("prefixgate_requests_total", status="200") >= 13, timeout=10, what="13 counted")
    assert gw.metric("prefixgate_requests_total", status="200") == 13


def test_prediction_audit_equals_what_the_engines_report(tmp_path, llamas, gateway_factory):
    """With the engines' own tokens (the remote tokenizer through llama.cpp's chat template), the prefix tokens the
    gateway predicts cached on the chosen pod are what the engine reports cached (llama.cpp's timings, usage):
    accuracy of at least 90 % per pod over groups of requests sharing a document, which follow it to one pod."""
    pods = llamas(2)
    gw = gateway_factory(pods, config={**FAST_SCRAPE, "routing": {
        "strategy": "prefix-cache", "prefix_cache": {"use_remote_tokenizer": True}}})
    for tag in ("alpha", "beta"):
        holder = None
        for turn in range(3):
            hdrs, usage, _ = chat(gw, f"{document(tag)}\nQuestion {turn}: what does it say?", stream=True)
            holder = holder or hdrs["target-pod"]
            assert hdrs["target-pod"] == holder  # the group follows its document
            if turn:
                assert usage["prompt_tokens_details"]["cached_tokens"] > 0.8 * usage["prompt_tokens"]
    # A response is audited once its relay ends, just after the client read its last byte.
    audited_pods = lambda: [p["prediction"] for p in gw.debug_pods() if p["prediction"]["responses"]]  # noqa: E731
    wait_until(lambda: sum(p["responses"] for p in audited_pods()) >= 6, timeout=10, what="6 responses audited")
    audited = audited_pods()
    assert audited and sum(p["responses"] for p in audited) == 6
    for prediction in audited:
        assert prediction["accuracy"] >= 0.9, prediction
    assert gw.metric("prefixgate_remote_tokenizer_requests_total", outcome="miss") == 6


def test_bytes_per_engine_token_are_learned_from_usage(tmp_path, llamas, gateway_factory):
    """With the character tokenizer, the gateway learns the model's bytes per engine token from the engine's usage
    (the prompt's bytes against usage.prompt_tokens, decayed sums over the responses), shown per model in
    /debug/pods; the default 4 only until then."""
    (pod,) = llamas(1)
    gw = gateway_factory([pod], config={"routing": {"strategy": "prefix-cache"}})
    before = json.loads(gw.admin("GET", "/debug/pods")[2])["models"][MODEL]
    assert before == {"bytes_per_engine_token": 4.0, "samples": 0}
    decay, byte_sum, token_sum = 0.98, 0.0, 0.0  # routing::BytesPerToken::kDecay
    for content in ("Short question about caches?", document("x"), "ünïcödé " * 40):
        _, usage, _ = chat(gw, content, stream=True)
        byte_sum = byte_sum * decay + len(content.encode())
        token_sum = token_sum * decay + usage["prompt_tokens"]
    # Learned once each relay ends, just after the client read its last byte.
    models = lambda: json.loads(gw.admin("GET", "/debug/pods")[2])["models"][MODEL]  # noqa: E731
    wait_until(lambda: models()["samples"] >= 3, timeout=10, what="3 responses learned from")
    learned = models()
    assert learned["samples"] == 3
    assert learned["bytes_per_engine_token"] == pytest.approx(byte_sum / token_sum, rel=1e-9)
    assert learned["bytes_per_engine_token"] != pytest.approx(4.0, abs=0.05)


def learn_slot_cache(gw, pod, tags=("A", "B", "C"), rounds=6):
    """Cycles documents through the pod (more than its two slots hold) until the gateway has learned what it keeps
    beyond its slots (bounded); returns /debug/pods' slot_cache then."""
    for round_ in range(rounds):
        for tag in tags:
            chat(gw, f"{document(tag)}\nRound {round_}.")
        learned = engine_of(gw, pod.name)["engine_metrics"]["slot_cache"]
        if learned != "unknown":
            return learned
    return engine_of(gw, pod.name)["engine_metrics"]["slot_cache"]


def test_slots_bound_what_a_pod_without_a_host_cache_holds(tmp_path, llamas, gateway_factory):
    """A llama.cpp pod without a host prompt cache (--cache-ram 0) holds one prompt per slot. Its misses where routing
    history promised hits teach the gateway that it keeps nothing beyond its slots (logged once); from then on,
    after documents A, B and C on its two slots (C took A's), the gateway predicts A cold (0 % match), as the engine
    then reports, and C still warm."""
    (pod,) = llamas(1, "--cache-ram", "0")
    gw = gateway_factory([pod], config={**FAST_SCRAPE, "routing": {
        "strategy": "prefix-cache", "prefix_cache": {"use_remote_tokenizer": True}}})
    wait_until(lambda: engine_of(gw, pod.name)["engine_metrics"]["slots"] == 2, timeout=20,
               what="the slots from /props")
    assert engine_of(gw, pod.name)["engine_metrics"]["slot_cache"] == "unknown"
    assert learn_slot_cache(gw, pod) == "slots_only"
    assert gw.read_log().count("it keeps no host prompt cache") == 1
    for tag in ("A", "B", "C"):
        chat(gw, document(tag))
    hdrs, usage, _ = chat(gw, document("A"))
    assert hdrs["x-prefix-match-percent"] == "0"
    assert usage["prompt_tokens_details"]["cached_tokens"] < 0.1 * usage["prompt_tokens"]  # the engine agrees
    hdrs, usage, _ = chat(gw, document("C"))  # still in its slot
    assert int(hdrs["x-prefix-match-percent"]) >= 90
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0.9 * usage["prompt_tokens"]


def test_a_host_prompt_cache_is_recognised(tmp_path, llamas, gateway_factory):
    """With llama.cpp's host prompt cache (--cache-ram, on by default) the pod serves cached prompts beyond its two
    slots: the gateway, which predicts such a pod from its routing history until it knows, learns that it has one
    (hits beyond the slots; logged once), and a revisited document is predicted warm, as the engine serves it."""
    (pod,) = llamas(1)
    gw = gateway_factory([pod], config={**FAST_SCRAPE, "routing": {
        "strategy": "prefix-cache", "prefix_cache": {"use_remote_tokenizer": True}}})
    wait_until(lambda: engine_of(gw, pod.name)["engine_metrics"]["slots"] == 2, timeout=20,
               what="the slots from /props")
    assert learn_slot_cache(gw, pod, tags=("A", "B", "C", "D")) == "host_cache"
    assert gw.read_log().count("it has a host prompt cache") == 1
    hdrs, usage, _ = chat(gw, f"{document('A')}\nOnce more.")
    assert int(hdrs["x-prefix-match-percent"]) >= 90
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0.9 * usage["prompt_tokens"]
    wait_until(lambda: gw.debug_pods()[0]["prediction"]["responses"] >= 1, timeout=10, what="audited responses")
    assert gw.debug_pods()[0]["prediction"]["accuracy"] >= 0.9


def start_busy_slot(gw, tag, max_tokens):
    """Starts a streamed request of document `tag` and reads its first event: the engine is generating, its slot
    busy. Returns the connection and the response (read the rest, then close)."""
    import http.client
    body = {"model": MODEL, "messages": [{"role": "user", "content": document(tag)}], "max_tokens": max_tokens,
            "stream": True}
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=120)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    running = conn.getresponse()
    assert running.status == 200
    assert running.read(16)
    return conn, running


def slot_pod(llamas, gateway_factory, slot_wait_ms, *flags):
    """One llama-server pod (two slots) behind the gateway with slot waits set; its slots read from /props and
    three documents routed there first (the gateway then knows what its slots hold and how long it serves)."""
    (pod,) = llamas(1, *flags)
    gw = gateway_factory([pod], config={**FAST_SCRAPE, "routing": {
        "strategy": "prefix-cache",
        "prefix_cache": {"use_remote_tokenizer": True, "slot_wait_ms": slot_wait_ms}}})
    wait_until(lambda: engine_of(gw, pod.name)["engine_metrics"]["slots"] == 2, timeout=20,
               what="the slots from /props")
    return pod, gw


def test_a_prefix_held_only_by_a_busy_slot_is_predicted_cold(tmp_path, llamas, gateway_factory):
    """llama.cpp cannot serve a request from a slot busy with another: while a request of document A runs, a second
    one of A on the same pod takes the other slot and prefills everything. Without slot waits, on a pod known to
    keep nothing beyond its slots, the gateway predicts exactly that (0 % match, and the engine reports nothing
    cached), and once both ended, A is in both slots (a match again)."""
    pod, gw = slot_pod(llamas, gateway_factory, 0, "--cache-ram", "0")
    assert learn_slot_cache(gw, pod, tags=("X", "Y", "Z")) == "slots_only"
    first, running = start_busy_slot(gw, "A", 200)
    hdrs, usage, _ = chat(gw, document("A"))
    assert hdrs["x-prefix-match-percent"] == "0"
    assert usage["prompt_tokens_details"]["cached_tokens"] < 0.1 * usage["prompt_tokens"]
    running.read()
    first.close()
    wait_until(lambda: all(p["in_flight"] == 0 for p in gw.debug_pods()), what="both requests ended")
    hdrs, usage, _ = chat(gw, document("A"))
    assert int(hdrs["x-prefix-match-percent"]) >= 90
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0.9 * usage["prompt_tokens"]


@pytest.mark.parametrize("flags", [("--cache-ram", "0"), ()], ids=["slots-only", "host-cache"])
def test_a_request_waits_for_the_busy_slot_holding_its_prefix(tmp_path, llamas, gateway_factory, flags):
    """With slot waits (routing.prefix_cache.slot_wait_ms), a second request of document A that arrives while the
    slot holding A serves another request waits at the gateway for that slot instead of taking the idle one: it is
    sent when the first ends, llama-server gives it A's slot, and the engine reports the prefix cached (the same
    request without slot waits, above, is served cold). Counted as a turn in prefixgate_slot_waits_total and timed
    in prefixgate_slot_wait_seconds; with or without a host prompt cache (which never held A: it was never moved
    out of its slot)."""
    pod, gw = slot_pod(llamas, gateway_factory, 30000, *flags)
    learn_slot_cache(gw, pod, tags=("X", "Y", "Z"))
    first, running = start_busy_slot(gw, "A", 120)
    try:
        hdrs, usage, _ = chat(gw, document("A"))
        assert running.read().endswith(b"data: [DONE]\n\n")  # the first had ended before the second was sent
    finally:
        first.close()
    assert int(hdrs["x-prefix-match-percent"]) >= 90
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0.9 * usage["prompt_tokens"]
    assert gw.metric("prefixgate_slot_waits_total", outcome="turn") == 1
    assert gw.metric("prefixgate_slot_waits_total", outcome="timeout") == 0
    assert gw.metric("prefixgate_slot_wait_seconds_count") == 1


def test_a_slot_wait_ends_at_its_limit(tmp_path, llamas, gateway_factory):
    """A request waits for a busy slot no longer than slot_wait_ms: behind a long answer it is sent after the limit
    (counted as a timeout), and served (in the other slot, cold) while the first still runs."""
    import time
    pod, gw = slot_pod(llamas, gateway_factory, 1000, "--cache-ram", "0")
    learn_slot_cache(gw, pod, tags=("X", "Y", "Z"))
    first, running = start_busy_slot(gw, "A", 4000)
    try:
        started = time.monotonic()
        _, usage, _ = chat(gw, document("A"))
        waited = time.monotonic() - started
        # The answer can reach the client before the gateway's own end of that request has run (and uncounted it;
        # seen under ASan, where that end is slower): wait for it, briefly. The first request, 4,000 tokens long,
        # runs for seconds more, so 1 and not 0 is what must be left.
        wait_until(lambda: engine_of(gw, pod.name)["in_flight"] <= 1, timeout=2, what="the second request's end")
        assert engine_of(gw, pod.name)["in_flight"] == 1  # the first still runs
    finally:
        first.close()
    assert waited >= 1.0
    assert usage["prompt_tokens_details"]["cached_tokens"] < 0.1 * usage["prompt_tokens"]
    assert gw.metric("prefixgate_slot_waits_total", outcome="timeout") == 1
    assert gw.metric("prefixgate_slot_waits_total", outcome="turn") == 0


def test_a_client_that_leaves_while_waiting_for_a_slot_ends_its_wait(tmp_path, llamas, gateway_factory):
    """The client of a request waiting for a busy slot is watched: when it hangs up, the wait ends at once (counted
    as client_gone, long before slot_wait_ms), nothing is sent to the engine, and the pod's in-flight count is back
    to the one request still running."""
    import socket
    pod, gw = slot_pod(llamas, gateway_factory, 30000, "--cache-ram", "0")
    learn_slot_cache(gw, pod, tags=("X", "Y", "Z"))
    first, running = start_busy_slot(gw, "A", 3000)
    try:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": document("A")}],
                           "max_tokens": 4}).encode()
        client = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_until(lambda: engine_of(gw, pod.name)["in_flight"] == 2, timeout=10, what="the second request waiting")
        client.close()
        wait_until(lambda: gw.metric("prefixgate_slot_waits_total", outcome="client_gone") == 1, timeout=10,
                   what="the wait ended by the hang-up")
        wait_until(lambda: engine_of(gw, pod.name)["in_flight"] == 1, timeout=10, what="only the first in flight")
        assert gw.metric("prefixgate_slot_waits_total", outcome="turn") == 0
        assert gw.metric("prefixgate_slot_waits_total", outcome="timeout") == 0
    finally:
        first.close()
