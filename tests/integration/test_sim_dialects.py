"""The engine simulator's dialects (--engine-dialect sglang | llamacpp, --close-after-stream), driven over HTTP on
the real binary: each engine's /metrics page parsed by prometheus_client, its tokenizer endpoints, the llama.cpp
chat-template identity (/apply-template then /tokenize == usage.prompt_tokens), timings in llama.cpp's responses,
llama-server's connection close after a streamed response, the simulator's own endpoints in every dialect, and
llama-server's slots KV cache model (--kv-cache-model slots: slot reuse, busy-slot misses, deferred requests, the
host prompt cache)."""
import http.client
import json
import socket

import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from harness import Sim, request, sse_events, wait_until

SYSTEM = "You are a careful assistant who answers questions about the quarterly report in detail. " * 4
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What changed in the third quarter?"}]
SGLANG_GAUGES = ["num_running_reqs", "num_queue_reqs", "token_usage", "max_total_num_tokens", "num_used_tokens",
                 "cache_hit_rate", "gen_throughput"]
# Counters as prometheus_client names their families (without _total).
LLAMACPP_COUNTERS = ["prompt_tokens", "prompt_tokens_cached", "prompt_seconds", "tokens_predicted",
                     "tokens_predicted_seconds", "n_decode", "n_tokens_max"]
LLAMACPP_GAUGES = ["prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred",
                   "n_busy_slots_per_decode"]


@pytest.fixture
def start_sim(tmp_path):
    """Starts simulators (time scale 0 unless given: no waits) with extra flags; every one is stopped after the
    test."""
    started = []

    def start(*flags, time_scale="0", **kwargs):
        sim = Sim(tmp_path, f"sim-{len(started)}", *flags, time_scale=time_scale, **kwargs)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def call(sim, method, path, body=None):
    status, headers, data = request("127.0.0.1", sim.port, method, path,
                                    None if body is None else json.dumps(body))
    return status, headers, data


def call_json(sim, method, path, body=None, expect=200):
    status, _, data = call(sim, method, path, body)
    assert status == expect, data
    return json.loads(data)


def families(sim):
    status, _, data = call(sim, "GET", "/metrics")
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(data.decode())}


def chat(sim, max_tokens=3, **extra):
    return call_json(sim, "POST", "/v1/chat/completions",
                     {"model": "sim-model", "messages": MESSAGES, "max_tokens": max_tokens, **extra})


def stream_chunks(sim, path, body):
    status, _, data = call(sim, "POST", path, {**body, "stream": True})
    assert status == 200, data
    events = sse_events(data)
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_sglang_metrics_page_has_sglang_series_only(start_sim):
    """SGLang's /metrics parses as Prometheus text with its gauges (scheduler labels), counters and TTFT histogram,
    and no vllm: series."""
    sim = start_sim("--engine-dialect", "sglang")
    usage = chat(sim)["usage"]
    found = families(sim)
    for gauge in SGLANG_GAUGES:
        family = found[f"sglang:{gauge}"]
        assert family.type == "gauge"
        assert family.samples[0].labels == {"model_name": "sim-model", "engine_type": "unified", "tp_rank": "0",
                                            "pp_rank": "0"}
    for counter in ["prompt_tokens", "generation_tokens", "cached_tokens"]:
        assert found[f"sglang:{counter}"].type == "counter"
    assert found["sglang:prompt_tokens"].samples[0].value == usage["prompt_tokens"]
    assert found["sglang:generation_tokens"].samples[0].value == 3
    ttft = found["sglang:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    assert any(s.name.endswith("_bucket") and s.labels["le"] == "+Inf" and s.value == 1 for s in ttft.samples)
    gauges = {name: f.samples[0].value for name, f in found.items() if f.type == "gauge"}
    assert gauges["sglang:max_total_num_tokens"] == 400000
    assert 0 <= gauges["sglang:token_usage"] <= 1
    assert not [name for name in found if name.startswith("vllm:")]


def test_sglang_tokenize_shapes(start_sim):
    """SGLang's /tokenize and /v1/tokenize: a string gives tokens, count and max_model_len; a list gives lists."""
    sim = start_sim("--engine-dialect", "sglang")
    one = call_json(sim, "POST", "/tokenize", {"model": "sim-model", "prompt": "hello world"})
    assert list(one) == ["tokens", "count", "max_model_len"]
    assert one["count"] == len(one["tokens"]) == 3
    assert one["max_model_len"] == 32768
    many = call_json(sim, "POST", "/v1/tokenize", {"prompt": ["hello world", "abc"], "add_special_tokens": False})
    assert many["count"] == [3, 1]
    assert many["tokens"][0] == one["tokens"]
    assert len(many["tokens"][1]) == 1


def test_sglang_tokenize_rejects_messages(start_sim):
    """A /tokenize body with messages instead of prompt is SGLang's 400 validation error."""
    sim = start_sim("--engine-dialect", "sglang")
    error = call_json(sim, "POST", "/tokenize", {"model": "sim-model", "messages": MESSAGES}, expect=400)
    assert error["object"] == "error"
    assert error["type"] == "Bad Request"
    assert error["code"] == 400
    assert error["param"] is None
    assert "prompt" in error["message"]


def test_sglang_responses_report_cached_tokens_without_timings(start_sim):
    """SGLang's chat responses report usage.prompt_tokens_details.cached_tokens (cache report on) and no timings."""
    sim = start_sim("--engine-dialect", "sglang")
    first = chat(sim)
    second = chat(sim)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert "timings" not in second
    chunks = stream_chunks(sim, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2,
                                                         "stream_options": {"include_usage": True}})
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert not [c for c in chunks if "timings" in c]


def test_llamacpp_metrics_page_has_llamacpp_series_only(start_sim):
    """llama-server's /metrics parses as Prometheus text: llamacpp: counters and gauges without labels, no vllm:."""
    sim = start_sim("--engine-dialect", "llamacpp")
    chat(sim)
    status, headers, _ = call(sim, "GET", "/metrics")
    assert headers["content-type"] == "text/plain; version=0.0.4"
    assert int(headers["process-start-time-unix"]) > 0
    found = families(sim)
    for counter in LLAMACPP_COUNTERS:
        assert found[f"llamacpp:{counter}"].type == "counter", counter
    for gauge in LLAMACPP_GAUGES:
        assert found[f"llamacpp:{gauge}"].type == "gauge", gauge
    for family in found.values():
        assert all(sample.labels == {} for sample in family.samples)
    value = {name: f.samples[0].value for name, f in found.items()}
    assert value["llamacpp:tokens_predicted"] == 3
    assert value["llamacpp:prompt_tokens"] > 0
    assert value["llamacpp:n_decode"] >= 3
    assert not [name for name in found if name.startswith("vllm:")]


def test_llamacpp_tokenize_shapes(start_sim):
    """llama-server's /tokenize: {"tokens": [ids]} without a count, a BOS only with add_special, pieces on
    request."""
    sim = start_sim("--engine-dialect", "llamacpp")
    plain = call_json(sim, "POST", "/tokenize", {"content": "hello world"})
    assert list(plain) == ["tokens"]
    assert all(isinstance(t, int) for t in plain["tokens"])
    with_bos = call_json(sim, "POST", "/tokenize", {"content": "hello world", "add_special": True})
    assert with_bos["tokens"][1:] == plain["tokens"]
    pieces = call_json(sim, "POST", "/tokenize", {"content": "hello world", "with_pieces": True})
    assert [p["id"] for p in pieces["tokens"]] == plain["tokens"]
    assert "".join(p["piece"] for p in pieces["tokens"]) == "hello world"
    marker = call_json(sim, "POST", "/tokenize", {"content": "<|user|>hi", "with_pieces": True})
    assert marker["tokens"][0]["piece"] == "<|user|>"
    unparsed = call_json(sim, "POST", "/tokenize", {"content": "<|user|>hi", "parse_special": False})
    assert len(unparsed["tokens"]) == 3


def test_llamacpp_apply_template_then_tokenize_is_what_a_chat_counts(start_sim):
    """/apply-template's prompt through /tokenize (add_special) is exactly the chat's usage.prompt_tokens, and a
    completion's string prompt through /tokenize its usage.prompt_tokens."""
    sim = start_sim("--engine-dialect", "llamacpp")
    prompt = call_json(sim, "POST", "/apply-template", {"messages": MESSAGES})["prompt"]
    assert prompt.endswith("<|assistant|>")
    tokens = call_json(sim, "POST", "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    assert chat(sim)["usage"]["prompt_tokens"] == len(tokens)
    match = call_json(sim, "POST", "/sim/cache/match", {"messages": MESSAGES})
    assert match["prompt_tokens"] == len(tokens)
    assert match["cached_tokens"] > 0  # the chat's blocks, under the same token ids
    text = "Once upon a time, in a land far away, there lived a simulated engine."
    counted = call_json(sim, "POST", "/v1/completions", {"prompt": text, "max_tokens": 2})["usage"]["prompt_tokens"]
    assert counted == len(call_json(sim, "POST", "/tokenize", {"content": text, "add_special": True})["tokens"])


def test_llamacpp_props_and_slots(start_sim):
    """/props gives --max-num-seqs slots with the KV capacity's per-slot share as n_ctx; /slots lists them."""
    sim = start_sim("--engine-dialect", "llamacpp", "--max-num-seqs", "4", "--kv-capacity-tokens", "40000")
    props = call_json(sim, "GET", "/props")
    assert props["total_slots"] == 4
    assert props["default_generation_settings"]["n_ctx"] == 10000
    assert props["default_generation_settings"]["params"] == {}
    assert props["model_alias"] == "sim-model"
    assert props["build_info"] == "sim"
    slots = call_json(sim, "GET", "/slots")
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    assert all(s["n_ctx"] == 10000 and s["is_processing"] is False for s in slots)


def test_llamacpp_responses_carry_usage_and_timings(start_sim):
    """llama.cpp's chat and completion bodies carry usage with cached tokens and timings: cache_n the cached
    prompt tokens, prompt_n the rest, predicted_n the output."""
    sim = start_sim("--engine-dialect", "llamacpp")
    chat(sim)
    body = chat(sim)
    usage, timings = body["usage"], body["timings"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0
    assert timings["cache_n"] == usage["prompt_tokens_details"]["cached_tokens"]
    assert timings["cache_n"] + timings["prompt_n"] == usage["prompt_tokens"]
    assert timings["predicted_n"] == usage["completion_tokens"] == 3
    assert timings["prompt_ms"] > 0 and timings["predicted_ms"] > 0
    assert body["system_fingerprint"] == "sim"
    text = call_json(sim, "POST", "/v1/completions", {"prompt": "abcdefgh", "max_tokens": 2})
    assert text["timings"]["predicted_n"] == 2
    assert text["usage"]["prompt_tokens_details"]["cached_tokens"] == text["timings"]["cache_n"]


def test_llamacpp_stream_final_chunk_carries_timings(start_sim):
    """In a llama.cpp chat stream the final chunk carries timings (the finish chunk, or the usage chunk with
    include_usage) and usage appears only with stream_options.include_usage."""
    sim = start_sim("--engine-dialect", "llamacpp")
    body = {"messages": MESSAGES, "max_tokens": 3}
    chunks = stream_chunks(sim, "/v1/chat/completions", body)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks).count(" ") == 3
    assert chunks[-1]["choices"][0]["finish_reason"] is not None
    assert chunks[-1]["timings"]["predicted_n"] == 3
    assert not [c for c in chunks if "usage" in c]
    assert not [c for c in chunks[:-1] if "timings" in c]
    chunks = stream_chunks(sim, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3
    assert chunks[-1]["timings"]["cache_n"] == chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert "timings" not in chunks[-2]


@pytest.mark.parametrize("dialect", ["vllm", "sglang", "llamacpp"])
def test_stream_delivers_every_token(start_sim, dialect):
    """A stream carries every generated token, even when the sequence finishes while a write is under way (time
    scale 0: the engine outruns the writes)."""
    sim = start_sim("--engine-dialect", dialect)
    for _ in range(5):
        chunks = stream_chunks(sim, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8,
                                                             "stream_options": {"include_usage": True}})
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert text.count(" ") == 8 == chunks[-1]["usage"]["completion_tokens"]


def read_stream(conn, body):
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    assert response.status == 200 and data.endswith(b"data: [DONE]\n\n")
    return response


def closed_by_peer(conn):
    """True when the server closed the connection: its socket reads EOF."""
    conn.sock.settimeout(5)
    return conn.sock.recv(1) == b""


def test_llamacpp_closes_connection_after_a_stream(start_sim):
    """After a streamed response (whose head does not say Connection: close) llama.cpp's dialect closes the
    connection: the socket reads EOF and the next request on it fails."""
    sim = start_sim("--engine-dialect", "llamacpp")
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    response = read_stream(conn, {"messages": MESSAGES, "max_tokens": 2})
    assert response.getheader("Connection") is None
    assert response.version == 11
    assert closed_by_peer(conn)
    with pytest.raises((http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)):
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 1}))
        conn.getresponse()
    conn.close()


def test_llamacpp_keeps_connection_after_a_non_streamed_response(start_sim):
    """A non-streamed response keeps the connection: a second request goes over the same socket."""
    sim = start_sim("--engine-dialect", "llamacpp")
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    local = None
    for _ in range(2):
        conn.request("POST", "/v1/chat/completions", json.dumps({"messages": MESSAGES, "max_tokens": 2}),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        response.read()
        local = local or conn.sock.getsockname()
        assert conn.sock.getsockname() == local
    conn.sock.settimeout(0.2)
    with pytest.raises(socket.timeout):
        conn.sock.recv(1)  # still open, nothing to read
    conn.close()


@pytest.mark.parametrize("flags,closes", [((), False), (("--close-after-stream",), True),
                                          (("--engine-dialect", "llamacpp", "--close-after-stream=false"), False)])
def test_close_after_stream_flag(start_sim, flags, closes):
    """--close-after-stream closes after streams in any dialect (vllm here); vllm keeps the connection by default,
    and llamacpp's default can be turned off."""
    sim = start_sim(*flags)
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    read_stream(conn, {"messages": MESSAGES, "max_tokens": 2})
    if closes:
        assert closed_by_peer(conn)
    else:
        local = conn.sock.getsockname()
        read_stream(conn, {"messages": MESSAGES, "max_tokens": 2})
        assert conn.sock.getsockname() == local
    conn.close()


@pytest.mark.parametrize("dialect", ["vllm", "sglang", "llamacpp"])
def test_simulator_endpoints_work_in_every_dialect(start_sim, dialect):
    """/health, /v1/models, /sim/requests, /sim/cache/match, /reset_prefix_cache and fault injection work in every
    dialect, errors in the dialect's shape."""
    sim = start_sim("--engine-dialect", dialect)
    assert call(sim, "GET", "/health")[0] == 200
    assert call_json(sim, "GET", "/v1/models")["data"][0]["id"] == "sim-model"
    chat(sim)
    assert call_json(sim, "POST", "/sim/cache/match", {"messages": MESSAGES})["cached_tokens"] > 0
    assert [r["path"] for r in sim.requests()] == ["/v1/models", "/v1/chat/completions"]
    assert call_json(sim, "POST", "/reset_prefix_cache")["reset"] is True
    sim.fault(error_status=503, health_status=503)
    assert call(sim, "GET", "/health")[0] == 503
    error = call_json(sim, "POST", "/v1/chat/completions", {"messages": MESSAGES}, expect=503)
    shape = {"vllm": lambda e: e["error"]["code"] == 503, "sglang": lambda e: e["object"] == "error",
             "llamacpp": lambda e: e["error"]["type"] == "unavailable_error"}
    assert shape[dialect](error), error
    sim.fault(error_status=0, health_status=200, tokenize_status=500)
    tokenize_path = "/tokenize"
    assert call(sim, "POST", tokenize_path, {"prompt": "x", "content": "x"})[0] == 500


def test_llamacpp_publishes_kv_events(start_sim):
    """KV cache events keep flowing with the llamacpp dialect: a request's blocks are published over ZMQ."""
    sim = start_sim("--engine-dialect", "llamacpp", kv_events=True)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(sim.kv["kv events"])
        frames = []
        sent = []

        def received():
            # A new prompt each time (new blocks, new events): a subscriber may miss what is sent as it connects.
            sent.append(1)
            call_json(sim, "POST", "/v1/completions", {"prompt": f"{len(sent)} " + "x" * 100, "max_tokens": 1})
            if sub.poll(200):
                frames.extend(sub.recv_multipart())
            return frames

        wait_until(received, timeout=10, what="a KV event message")
        assert len(frames) == 3 and len(frames[1]) == 8
    finally:
        sub.close(0)
        ctx.term()


# --kv-cache-model slots: llama-server's slots, two of them, documents long enough that sharing only the template's
# leading tokens stays under --slot-prompt-similarity (0.1).
SLOTS = ("--engine-dialect", "llamacpp", "--kv-cache-model", "slots", "--max-num-seqs", "2",
         "--kv-capacity-tokens", "8192")
DOCUMENTS = {name: f"{name} " + f"{name.lower()} is a document about its own subject, told at length. " * 8
             for name in ("Alpha", "Bravo", "Charlie")}


def doc_messages(name, question="Summarize it."):
    return [{"role": "user", "content": DOCUMENTS[name] + question}]


def prompt_tokens(sim, messages):
    """The token ids llama-server's dialect counts for a chat: /apply-template then /tokenize with a BOS."""
    prompt = call_json(sim, "POST", "/apply-template", {"messages": messages})["prompt"]
    return call_json(sim, "POST", "/tokenize", {"content": prompt, "add_special": True})["tokens"]


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def chat_cached(sim, messages, max_tokens=2):
    body = call_json(sim, "POST", "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens})
    cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert body["timings"]["cache_n"] == cached
    return cached


@pytest.mark.parametrize("host_cache", [False, True])
def test_slots_documents_a_b_c_then_a(start_sim, host_cache):
    """Documents A, B, C then A on two slots: C overwrites A's slot (least recently used), so A misses (nothing
    cached beyond the template's leading tokens) without a host cache, and with --host-cache-tokens A's sequence,
    saved when C overwrote it, is restored: every prompt token but the last is cached."""
    flags = SLOTS + (("--host-cache-tokens", "100000") if host_cache else ())
    sim = start_sim(*flags)
    tokens = {name: prompt_tokens(sim, doc_messages(name)) for name in DOCUMENTS}
    template = common_prefix(tokens["Alpha"], tokens["Bravo"])
    assert 0 < template < 0.1 * len(tokens["Alpha"])
    assert chat_cached(sim, doc_messages("Alpha")) == 0
    assert chat_cached(sim, doc_messages("Bravo")) == 0
    assert chat_cached(sim, doc_messages("Charlie")) == template  # took Alpha's slot
    expected = len(tokens["Alpha"]) - 1 if host_cache else template
    predicted = call_json(sim, "POST", "/sim/cache/match", {"messages": doc_messages("Alpha")})
    assert predicted["cached_tokens"] == expected  # read only: the request below finds the same
    assert chat_cached(sim, doc_messages("Alpha")) == expected
    found = families(sim)
    assert found["llamacpp:prompt_tokens_cached"].samples[0].value == template + expected
    slots = call_json(sim, "GET", "/slots")
    assert [s["is_processing"] for s in slots] == [False, False]
    # Each slot holds its last prompt and the reply's computed token (the last of the 2 never is).
    assert sorted(s["n_prompt_tokens"] for s in slots) == sorted([len(tokens["Charlie"]) + 1,
                                                                  len(tokens["Alpha"]) + 1])


def open_stream(sim, messages, max_tokens):
    """Starts a streamed chat; returns (connection, response) once its head arrived."""
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=30)
    conn.request("POST", "/v1/chat/completions",
                 json.dumps({"messages": messages, "max_tokens": max_tokens, "stream": True}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    return conn, response


def first_token(response):
    """Reads a stream until its first data event (the request has a slot and finished its prefill)."""
    while True:
        line = response.readline()
        assert line, "the stream ended before its first token"
        if line.startswith(b"data: "):
            return json.loads(line[len(b"data: "):])


def gauge(sim, name):
    return families(sim)[f"llamacpp:{name}"].samples[0].value


def test_slots_second_concurrent_request_of_a_prefix_misses(start_sim):
    """While one request runs in the slot that holds a prefix, a second request of that prefix takes the other
    slot and misses (a busy-slot miss), though /sim/cache/match found the prefix before the first started."""
    sim = start_sim(*SLOTS, time_scale="1")
    warm = doc_messages("Alpha", "First question?")
    assert chat_cached(sim, warm) == 0
    second = doc_messages("Alpha", "Second question?")
    shared = common_prefix(prompt_tokens(sim, warm), prompt_tokens(sim, second))
    assert call_json(sim, "POST", "/sim/cache/match", {"messages": second})["cached_tokens"] == shared
    conn, response = open_stream(sim, doc_messages("Alpha", "Third question?"), 2000)
    try:
        first_token(response)
        assert call_json(sim, "POST", "/sim/cache/match", {"messages": second})["cached_tokens"] == 0
        assert chat_cached(sim, second) == 0
        slots = call_json(sim, "GET", "/slots")
        busy = [s for s in slots if s["is_processing"]]
        assert len(busy) == 1 and busy[0]["n_prompt_tokens_cache"] >= shared
    finally:
        conn.close()


def test_slots_third_request_is_deferred_while_both_slots_run(start_sim):
    """With both slots generating, a third request waits: llamacpp:requests_deferred counts it and
    requests_processing the two slots; once a slot frees, the third runs."""
    sim = start_sim(*SLOTS, time_scale="1")
    streams = []
    try:
        for name in ("Alpha", "Bravo"):
            streams.append(open_stream(sim, doc_messages(name), 2000))
            first_token(streams[-1][1])
        third = open_stream(sim, doc_messages("Charlie"), 2)
        streams.append(third)
        wait_until(lambda: gauge(sim, "requests_deferred") >= 1, timeout=5, what="a deferred request")
        assert gauge(sim, "requests_processing") == 2
        assert all(s["is_processing"] for s in call_json(sim, "GET", "/slots"))
        streams[0][0].close()  # the client leaves: its slot frees
        assert first_token(third[1])["choices"][0]["delta"] == {"role": "assistant", "content": None}
        wait_until(lambda: gauge(sim, "requests_deferred") == 0, timeout=5, what="no deferred request")
    finally:
        for conn, _ in streams:
            conn.close()
