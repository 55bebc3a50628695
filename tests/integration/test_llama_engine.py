"""The real-engine tooling against llama.cpp's llama-server, without the gateway: the harness's LlamaServer and
llama_model() (loadtest/harness.py), the binary scripts/fetch_llama.sh builds and the random-weight model
tools/llama/make_model.py writes. These pin what the gateway relies on from llama-server: its probes and /props,
its llamacpp:* metrics, the cached-token counts it reports, and that /apply-template then /tokenize counts exactly
the prompt tokens a chat request is charged. A missing binary fails these tests (scripts/setup.sh installs it)."""
import http.client
import json

import pytest

from harness import LLAMA_SERVER_BIN, LlamaServer, llama_available, llama_model, sse_events

PARALLEL = 2
CTX = 8192   # the total; each of the PARALLEL slots gets CTX // PARALLEL
# About 600 tokens of ordinary English, different per test so that no test finds another's prompt cached.
PARAGRAPH = ("The gateway sends each request to the pod that already holds the longest matching prefix of its prompt "
             "in its key-value cache, weighed against how busy that pod is right now. ")


def prompt(tag):
    return f"[{tag}] " + PARAGRAPH * 20


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    if not llama_available():
        pytest.fail(f"llama-server not found at {LLAMA_SERVER_BIN}: run scripts/fetch_llama.sh (scripts/setup.sh "
                    "runs it), or set PREFIXGATE_LLAMA_SERVER_BIN")
    server = LlamaServer(tmp_path_factory.mktemp("llama"), name="llama-0", parallel=PARALLEL, ctx=CTX)
    yield server
    server.stop()


def chat_body(llama, content, **extra):
    return {"model": llama.model, "messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}


def test_model_is_reproducible_and_cached(tmp_path):
    """llama_model() writes the model once per set of arguments (the same path again without writing), and
    make_model.py's seeded weights make the same arguments give the same bytes."""
    first = llama_model(tmp_path, layers=1, embd=64, heads=2, ff=128)
    written = first.stat().st_mtime_ns
    assert llama_model(tmp_path, layers=1, embd=64, heads=2, ff=128) == first
    assert first.stat().st_mtime_ns == written
    again = llama_model(tmp_path / "again", layers=1, embd=64, heads=2, ff=128)
    assert again.read_bytes() == first.read_bytes()
    assert llama_model(tmp_path, layers=1, embd=64, heads=2, ff=128, seed=1).read_bytes() != first.read_bytes()


def test_health_props_metrics_and_pod_entry(llama):
    """llama-server is up with the harness's settings: /health is ok, /props reports the slots and each slot's
    context, /metrics has the llamacpp:* series the gateway scrapes, and the pod entry names the llamacpp engine."""
    assert llama.json("GET", "/health") == {"status": "ok"}
    props = llama.json("GET", "/props")
    assert props["total_slots"] == PARALLEL
    assert props["default_generation_settings"]["n_ctx"] == CTX // PARALLEL
    metrics = llama.metrics_text()
    for series in ("llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:prompt_tokens_total"):
        assert f"\n{series} " in metrics, f"{series} missing from /metrics:\n{metrics}"
    assert llama.pod_entry() == {"name": "llama-0", "address": f"127.0.0.1:{llama.port}",
                                 "models": [llama.model], "engine": "llamacpp"}
    assert llama.json("GET", "/v1/models")["data"][0]["id"] == llama.model


def test_repeated_chat_reports_cached_tokens(llama):
    """A chat completion reports usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens: none cached
    for a new prompt, and most of the prompt for the same request again (prefix caching works)."""
    body = chat_body(llama, prompt("repeat"))
    first = llama.json("POST", "/v1/chat/completions", body)
    usage = first["usage"]
    assert usage["prompt_tokens"] > 500
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert usage["completion_tokens"] == 4 and first["choices"][0]["finish_reason"] == "length"
    again = llama.json("POST", "/v1/chat/completions", body)["usage"]
    assert again["prompt_tokens"] == usage["prompt_tokens"]
    assert usage["prompt_tokens"] - 16 <= again["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]


def test_long_answers_are_valid_text_to_max_tokens(llama):
    """The random model never samples byte, control or EOS tokens (make_model.py steers them away): a long answer,
    plain or streamed, runs to max_tokens and is valid text, where a lone byte token would make llama-server's
    chat parser answer 500."""
    for stream in (False, True):
        body = chat_body(llama, f"[long {stream}] Tell me a story. \U0001F600 \u65E5\u672C", max_tokens=300,
                         stream=stream)
        status, _, raw = llama.call("POST", "/v1/chat/completions", body)
        assert status == 200, raw[:500]
        if stream:
            last = json.loads(sse_events(raw)[-2])
            assert last["choices"][0]["finish_reason"] == "length" and last["timings"]["predicted_n"] == 300
        else:
            answer = json.loads(raw)
            assert answer["choices"][0]["finish_reason"] == "length"
            assert answer["usage"]["completion_tokens"] == 300 and answer["choices"][0]["message"]["content"]


def test_streamed_chat_ends_with_timings(llama):
    """A streamed chat completion's chunks carry its text, and the last one before [DONE] has the timings with
    cache_n (cached prompt tokens): 0 the first time, most of the prompt the second."""
    body = chat_body(llama, prompt("stream"), stream=True)
    cache_n = []
    for _ in range(2):
        status, headers, raw = llama.call("POST", "/v1/chat/completions", body)
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        events = sse_events(raw)
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["choices"][0]["finish_reason"] == "length"
        assert last["timings"]["prompt_n"] + last["timings"]["cache_n"] > 500
        cache_n.append(last["timings"]["cache_n"])
    assert cache_n[0] == 0 and cache_n[1] > 500


def test_apply_template_then_tokenize_counts_prompt_tokens(llama):
    """/apply-template renders the chat as the server would, and /tokenize of that text with special tokens
    added and parsed yields exactly the usage.prompt_tokens the chat completion reports: the gateway's remote
    tokenizer for llamacpp pods counts what the engine caches."""
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": prompt("tokenize") + " <|im_end|> and <s> as text."}]
    rendered = llama.json("POST", "/apply-template", {"messages": messages})["prompt"]
    assert rendered.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert rendered.endswith("<|im_start|>assistant\n")
    tokens = llama.json("POST", "/tokenize", {"content": rendered, "add_special": True, "parse_special": True})
    chat = llama.json("POST", "/v1/chat/completions", {"model": llama.model, "messages": messages, "max_tokens": 1})
    assert len(tokens["tokens"]) == chat["usage"]["prompt_tokens"]
    assert tokens["tokens"][0] == 1   # BOS: the Llama vocabulary adds it


def test_connection_closes_after_a_streamed_response(llama):
    """Pins a llama-server quirk the gateway's upstream pool must live with: after a streamed response it closes
    the connection although the response said Keep-Alive (after a plain one it keeps it), so a request sent on
    that connection again fails without an answer."""
    conn = http.client.HTTPConnection("127.0.0.1", llama.port, timeout=30)
    try:
        for stream in (False, True):
            conn.request("POST", "/v1/chat/completions", json.dumps(chat_body(llama, "[close] hi", stream=stream)),
                         {"Content-Type": "application/json"})
            res = conn.getresponse()
            res.read()
            assert res.status == 200 and res.getheader("Keep-Alive", "").startswith("timeout=")
            assert res.getheader("Connection") is None
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
            conn.request("GET", "/health")
            conn.getresponse()
    finally:
        conn.close()
