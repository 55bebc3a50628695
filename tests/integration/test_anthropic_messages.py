"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through the real gateway and simulator:
streamed and not, prefix affinity from system + messages, Anthropic-shaped errors, x-api-key."""
import json

from api_helpers import anthropic_error, api_keys_config, gateway_over, post_stream, typed_events
from harness import Sim, wait_until

PREFIX = {"routing": {"strategy": "prefix-cache", "prefix_cache": {"block_size": 64}}}


def message(content, system=None, **extra):
    body = {"model": "sim-model", "max_tokens": 6, "messages": [{"role": "user", "content": content}], **extra}
    if system is not None:
        body["system"] = system
    return json.dumps(body)


def test_non_streamed_message_is_relayed_in_anthropics_shape(sims, gateway_factory):
    """A non-streamed message reaches a pod on /v1/messages and its answer comes back whole, with the gateway's headers."""
    gw = gateway_factory(sims[:2])
    status, headers, raw = gw.call("POST", "/v1/messages", message("hello there", system="Be brief."))
    assert status == 200, raw
    body = json.loads(raw)
    assert body["type"] == "message" and body["role"] == "assistant" and body["id"].startswith("msg_")
    assert body["model"] == "sim-model"
    assert body["content"][0]["type"] == "text" and body["content"][0]["text"]
    assert body["stop_reason"] == "max_tokens"
    assert body["usage"]["output_tokens"] == 6 and body["usage"]["input_tokens"] > 0
    assert headers["target-pod"] in ("engine-0", "engine-1")
    pod = next(s for s in sims if s.name == headers["target-pod"])
    assert [r["path"] for r in pod.completions_seen()] == ["/v1/messages"]


def test_streamed_message_events_are_relayed_in_order(tmp_path):
    """A streamed message's named events arrive in Anthropic's order, relayed as they come (not buffered), and the
    gateway's log counts the output tokens from message_delta's usage."""
    with gateway_over(tmp_path, [Sim(tmp_path, "slow", "--decode-ms-per-token", "30", time_scale="1")]) as gw:
        status, content_type, chunks = post_stream(gw, "/v1/messages",
                                                   message("tell me about routers", stream=True, max_tokens=10))
        assert status == 200
        assert content_type.startswith("text/event-stream")
        events = typed_events(b"".join(data for _, data in chunks))
        names = [name for name, _ in events]
        assert names == (["message_start", "content_block_start"] + ["content_block_delta"] * 10 +
                         ["content_block_stop", "message_delta", "message_stop"])
        assert all(name == data["type"] for name, data in events)
        assert all(data["delta"]["type"] == "text_delta" for name, data in events if name == "content_block_delta")
        assert events[-2][1]["usage"]["output_tokens"] == 10
        assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
        # 10 tokens 30 ms apart: relayed one by one, the deltas arrive spread out.
        arrivals = [t for t, data in chunks if b"content_block_delta" in data]
        assert len(arrivals) >= 5 and arrivals[-1] - arrivals[0] > 0.15
        # The request's log line is written just after its last byte: the client may read first.
        wait_until(lambda: any("/v1/messages" in line and "output_tokens=10" in line
                               for line in gw.read_log().splitlines()), timeout=3, what="the request's log line")


def test_count_tokens_answers_the_engines_count(sims, gateway_factory):
    """count_tokens is proxied and answers {"input_tokens": N}: more text, more tokens; routed by load."""
    gw = gateway_factory(sims[:2], config=PREFIX)
    status, headers, raw = gw.call("POST", "/v1/messages/count_tokens", message("short"))
    assert status == 200, raw
    short = json.loads(raw)["input_tokens"]
    _, _, raw = gw.call("POST", "/v1/messages/count_tokens", message("a much longer question " * 20, system="S"))
    assert json.loads(raw)["input_tokens"] > short > 0
    assert headers["routing-strategy"] == "least-request"
    pod = next(s for s in sims if s.name == headers["target-pod"])
    assert "/v1/messages/count_tokens" in [r["path"] for r in pod.completions_seen()]


def test_shared_system_prompt_follows_its_pod_and_others_spread(sims, gateway_factory):
    """Messages sharing a long system prompt (as a string or as text blocks with a moving cache_control) go to the
    pod that holds it, while messages with other system prompts spread: the prompt is hashed from system and
    messages (a gateway that hashed nothing would scatter the first group or pile up the second)."""
    gw = gateway_factory(sims, config=PREFIX)
    system = "[legal] You are a careful assistant. " + " ".join(f"clause-{i}" for i in range(400))
    status, headers, raw = gw.call("POST", "/v1/messages", message("question 0", system=system))
    assert status == 200, raw
    holder = headers["target-pod"]
    assert headers["routing-strategy"] == "prefix-cache"
    for i in range(1, 6):
        blocks = [{"type": "text", "text": system[:100]},
                  {"type": "text", "text": system[100:], "cache_control": {"type": "ephemeral"}}]
        turn = [{"type": "text", "text": f"question {i}", **({"cache_control": {"type": "ephemeral"}} if i % 2 else {})}]
        status, headers, raw = gw.call("POST", "/v1/messages", message(turn, system=blocks if i % 2 else system))
        assert status == 200, raw
        assert headers["target-pod"] == holder, i
        assert int(headers["x-prefix-match-percent"]) >= 90
    others = set()
    for i in range(9):
        other = f"[tenant {i}] " + " ".join(f"rule-{i}-{k}" for k in range(200))
        status, headers, raw = gw.call("POST", "/v1/messages", message("hello", system=other))
        assert status == 200, raw
        assert headers["x-prefix-match-percent"] == "0"
        others.add(headers["target-pod"])
    assert len(others) >= 2


def test_errors_are_anthropic_shaped(sims, gateway_factory):
    """Bad JSON, a missing field, an unknown model, a wrong method and an oversized body on the Messages paths get
    the gateway's error in Anthropic's shape; the OpenAI paths keep OpenAI's."""
    gw = gateway_factory(sims[:1], config={"limits": {"max_body_bytes": 4096}})
    cases = [
        ("POST", "/v1/messages", '{"model": "sim-model", "messages": [', 400, "invalid_request_error", "not valid JSON"),
        ("POST", "/v1/messages/count_tokens", '{"model": "sim-model"}', 400, "invalid_request_error",
         "'messages' is required"),
        ("POST", "/v1/messages", message("x", model="no-such-model"), 404, "not_found_error", "no-such-model"),
        ("GET", "/v1/messages", None, 405, "invalid_request_error", "method not allowed"),
        ("POST", "/v1/messages", message("x" * 5000), 413, "invalid_request_error", "larger than limits.max_body_bytes"),
    ]
    for method, path, body, status, kind, words in cases:
        got_status, got_headers, raw = gw.call(method, path, body)
        assert got_status == status, (path, raw)
        error = anthropic_error(raw)
        assert error["type"] == kind, (path, error)
        assert words in error["message"], (path, error)
        if status == 405:
            assert got_headers["allow"] == "POST"
    assert sims[0].completions_seen() == []
    status, _, raw = gw.call("POST", "/v1/chat/completions", '{"model": "sim-model", "messages": [')
    assert status == 400 and json.loads(raw)["error"]["code"] == 400


def test_x_api_key_is_accepted_and_refusals_are_anthropic_shaped(tmp_path):
    """With API keys on, a Messages client's x-api-key is its key (bearer still works); a missing or unknown key is a
    401 authentication_error and a model outside the key's list a 403 permission_error, in Anthropic's shape; the
    key never reaches the engine."""
    sim = Sim(tmp_path, "engine-0")
    keys = api_keys_config(tmp_path, [{"name": "team-a", "key": "sk-a-0123456789", "models": ["sim-model"]},
                                      {"name": "team-b", "key": "sk-b-0123456789", "models": ["other"]}])
    with gateway_over(tmp_path, [sim], config=keys) as gw:
        status, _, raw = gw.call("POST", "/v1/messages", message("hi"), {"x-api-key": "sk-a-0123456789"})
        assert status == 200, raw
        seen = sim.completions_seen()[-1]["headers"]
        assert "x-api-key" not in seen and "authorization" not in seen
        status, _, raw = gw.call("POST", "/v1/messages", message("hi"), {"authorization": "Bearer sk-a-0123456789"})
        assert status == 200, raw
        for headers in ({}, {"x-api-key": "sk-wrong"}):
            status, _, raw = gw.call("POST", "/v1/messages", message("hi"), headers)
            assert status == 401, raw
            assert anthropic_error(raw)["type"] == "authentication_error"
        status, _, raw = gw.call("POST", "/v1/messages", message("hi"), {"x-api-key": "sk-b-0123456789"})
        assert status == 403, raw
        assert anthropic_error(raw)["type"] == "permission_error"
        # x-api-key works on the OpenAI paths too, whose refusals stay OpenAI-shaped.
        assert gw.chat("hi", headers={"x-api-key": "sk-a-0123456789"})[0] == 200
        status, _, raw = gw.chat("hi", headers={"x-api-key": "sk-wrong"})
        assert status == 401 and json.loads(raw)["error"]["type"] == "authentication_error"
        assert len(sim.completions_seen()) == 3


def test_a_stream_cut_short_ends_with_an_anthropic_error_event(sims, gateway_factory):
    """A Messages stream the gateway must cut (here: over upstream.max_response_bytes) after it began ends with
    Anthropic's `event: error` carrying an api_error, not an OpenAI-shaped data line; chat streams keep theirs."""
    gw = gateway_factory(sims[:1], config={"upstream": {"max_response_bytes": 4096}})
    status, _, raw = gw.call("POST", "/v1/messages", message("a long answer", stream=True, max_tokens=200))
    assert status == 200
    last = raw.decode().rstrip("\n").split("\n\n")[-1].split("\n")
    assert last[0] == "event: error", raw[-300:]
    error = anthropic_error(last[1][len("data: "):])
    assert error["type"] == "api_error"
    assert "upstream.max_response_bytes" in error["message"]
    assert raw.decode().startswith("event: message_start\n")
