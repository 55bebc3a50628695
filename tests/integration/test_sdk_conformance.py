"""Conformance with the official client SDKs and the published API shapes, through the real gateway and simulator.

The OpenAI Node SDK and the Anthropic TypeScript SDK (pinned in tools/sdk/package.json, installed by
scripts/setup.sh) drive the gateway from tools/sdk/*_cases.mjs, which print JSON results this file asserts on: the
SDKs' own parsers, stream accumulators and error classes are the judges of the wire format. Then the Anthropic
Messages answers, the gateway's Anthropic errors and the Responses stream are compared, key set by key set and event
by event, with the examples their publishers print (URLs beside each)."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from api_helpers import api_keys_config, gateway_over, typed_events
from harness import Sim

REPO = Path(__file__).resolve().parents[2]
SDK_DIR = REPO / "tools" / "sdk"
NODE = shutil.which("node")
KEY = "sk-a-0123456789"


def sdk_missing():
    """Why the SDK cases cannot run here, or None. scripts/setup.sh installs both packages, so in CI a skip is a
    failure (tests/pytest_skip_guard.py: these ids are not on tests/skip_allowlist.txt)."""
    if NODE is None:
        return "node is not installed (scripts/setup.sh installs nodejs)"
    for package in ("openai", "@anthropic-ai/sdk"):
        if not (SDK_DIR / "node_modules" / package / "package.json").is_file():
            return f"npm package {package} missing in tools/sdk/node_modules (run scripts/setup.sh)"
    return None


def run_cases(script, base_url, cases, api_key=None):
    """Runs tools/sdk/<script> for `cases` against `base_url`; returns its {case: result}."""
    why = sdk_missing()
    if why:
        pytest.skip(why)
    args = [NODE, str(SDK_DIR / script), "--base-url", base_url, *cases]
    if api_key:
        args += ["--api-key", api_key]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=SDK_DIR)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert set(results) == set(cases), results
    return results


def ok(results, case):
    """A case's result, which must not be an error."""
    result = results[case]
    assert "error" not in result and "unexpected_success" not in result, (case, result)
    return result


def sdk_error(results, case):
    """The SDK error a case expected (it must have raised one)."""
    result = results[case]
    assert "error" in result, (case, result)
    return result["error"]


OPENAI_CASES = ["responses_create", "responses_stream", "responses_stream_helper", "responses_chain",
                "responses_by_id", "responses_unknown_model", "responses_bad_previous_id",
                "chat_create", "chat_stream", "chat_stream_helper", "chat_unknown_model"]
ANTHROPIC_CASES = ["messages_create", "messages_create_stream", "messages_stream_helper", "count_tokens",
                   "error_bad_body", "error_unknown_model"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Three sims behind one gateway under the random strategy (so only chain affinity keeps a chain together),
    alive for the module; the SDK cases run once, lazily, and every test reads their results."""
    tmp = tmp_path_factory.mktemp("sdk")
    sims = [Sim(tmp, f"engine-{i}") for i in range(3)]
    with gateway_over(tmp, sims, config={"routing": {"strategy": "random"}}) as gw:
        cache = {}

        def results(kind):
            if kind not in cache:
                if kind == "openai":
                    cache[kind] = run_cases("openai_cases.mjs", f"http://127.0.0.1:{gw.port}/v1", OPENAI_CASES)
                else:
                    cache[kind] = run_cases("anthropic_cases.mjs", f"http://127.0.0.1:{gw.port}", ANTHROPIC_CASES)
            return cache[kind]

        yield gw, sims, results


# --- OpenAI SDK: the Responses API ---------------------------------------------------------------------------------

def test_openai_responses_create(stack):
    """responses.create (not streamed) parses: the SDK's output_text is the message's text, with id and usage."""
    gw, sims, results = stack
    r = ok(results("openai"), "responses_create")
    assert r["object"] == "response" and r["status"] == "completed" and r["id"].startswith("resp_")
    assert r["model"] == "sim-model"
    assert r["output_text"].strip()
    usage = r["usage"]
    assert usage["output_tokens"] == 5 and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert r["pod"] in {s.name for s in sims} and len(r["request_id"]) == 32


def test_openai_responses_stream_events(stack):
    """create({stream: true}) yields OpenAI's typed events in order, numbered from 0; the deltas joined are the
    done text and the completed response's text, and created and completed name the same response."""
    _, _, results = stack
    r = ok(results("openai"), "responses_stream")
    assert r["types"] == (["response.created", "response.in_progress", "response.output_item.added",
                           "response.content_part.added"] + ["response.output_text.delta"] * 5 +
                          ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                           "response.completed"])
    assert r["sequence"] == list(range(len(r["types"])))
    assert len(r["deltas"]) == 5
    assert "".join(r["deltas"]) == r["done_text"] == r["completed_text"] != ""
    assert r["created_status"] == "in_progress" and r["completed_status"] == "completed"
    assert r["created_id"] == r["completed_id"] and r["created_id"].startswith("resp_")
    assert r["completed_usage"]["output_tokens"] == 5


def test_openai_responses_stream_helper_accumulates(stack):
    """responses.stream(): the SDK's accumulator rebuilds the response from the events (it throws on an event for an
    output or part it was not told about); each delta's snapshot grows and the final output_text is the last one."""
    _, _, results = stack
    r = ok(results("openai"), "responses_stream_helper")
    snapshots = r["snapshots"]
    assert len(snapshots) == 4
    assert all(later.startswith(earlier) and later != earlier for earlier, later in zip(snapshots, snapshots[1:]))
    assert r["output_text"] == snapshots[-1] and r["status"] == "completed"
    assert r["usage"]["output_tokens"] == 4


def test_openai_previous_response_id_chain(stack):
    """Three calls chained by previous_response_id all succeed (the simulator answers 404 for a response it does not
    hold) and reach one pod, under the random strategy."""
    gw, _, results = stack
    turns = ok(results("openai"), "responses_chain")["turns"]
    assert [t["status"] for t in turns] == ["completed"] * 3
    assert len({t["id"] for t in turns}) == 3
    assert len({t["pod"] for t in turns}) == 1
    assert gw.metric("prefixgate_response_affinity_total", outcome="hit") >= 2


def test_openai_retrieve_and_delete_by_id(stack):
    """responses.retrieve(id) returns the stored response, responses.cancel(id) (of a finished response) answers it
    from the same pod; responses.delete(id) answers the deletion object; a retrieve afterwards is the SDK's
    NotFoundError (404)."""
    _, _, results = stack
    r = ok(results("openai"), "responses_by_id")
    assert r["retrieved"]["id"] == r["id"] and r["retrieved"]["status"] == "completed"
    assert r["retrieved"]["output_text"] == r["output_text"] != ""
    assert r["cancelled"]["id"] == r["id"] and r["cancelled"]["pod"] == r["retrieved"]["pod"]
    assert r["deleted"] == {"status": 200, "body": {"id": r["id"], "object": "response", "deleted": True}}
    err = r["after"]["error"]
    assert err["class"] == "NotFoundError" and err["status"] == 404
    assert r["id"] in err["message"]


def test_openai_errors_are_the_sdks_error_classes(stack):
    """An unknown model is the SDK's NotFoundError with the gateway's message; so is a previous_response_id no pod
    holds (the engine's 404, relayed); for chat completions too."""
    _, _, results = stack
    res = results("openai")
    for case in ("responses_unknown_model", "chat_unknown_model"):
        err = sdk_error(res, case)
        assert err["class"] == "NotFoundError" and err["status"] == 404, err
        assert "no-such-model" in err["message"] and err["body"]["message"] in err["message"]
    err = sdk_error(res, "responses_bad_previous_id")
    assert err["class"] == "NotFoundError" and "resp_nobody_made_this" in err["message"]


def test_openai_chat_completions(stack):
    """chat.completions.create, streamed (with include_usage) and not, and the chat stream helper, parse."""
    _, _, results = stack
    res = results("openai")
    plain = ok(res, "chat_create")
    assert plain["object"] == "chat.completion" and plain["content"].strip()
    assert plain["finish_reason"] == "length" and plain["usage"]["completion_tokens"] == 4
    streamed = ok(res, "chat_stream")
    assert streamed["deltas"] == 4 and streamed["text"].strip()
    assert streamed["finish_reason"] == "length" and streamed["usage"]["completion_tokens"] == 4
    helper = ok(res, "chat_stream_helper")
    assert helper["content"].strip() and helper["finish_reason"] == "length"


# --- Anthropic SDK: Messages ---------------------------------------------------------------------------------------

def test_anthropic_messages_create(stack):
    """messages.create parses: a text block, usage, stop_reason; the SDK's _request_id is the gateway's request-id."""
    _, sims, results = stack
    r = ok(results("anthropic"), "messages_create")
    assert r["type"] == "message" and r["role"] == "assistant" and r["id"].startswith("msg_")
    assert r["content"][0]["type"] == "text" and r["content"][0]["text"].strip()
    assert r["usage"]["input_tokens"] > 0 and r["usage"]["output_tokens"] == 6
    assert r["stop_reason"] == "max_tokens"
    assert r["sdk_request_id"] == r["request_id"] and r["pod"] in {s.name for s in sims}


def test_anthropic_streamed_events(stack):
    """create({stream: true}) yields Anthropic's events in order; the text deltas join into the text and
    message_delta carries the final output tokens."""
    _, _, results = stack
    r = ok(results("anthropic"), "messages_create_stream")
    assert r["types"] == (["message_start", "content_block_start"] + ["content_block_delta"] * 5 +
                          ["content_block_stop", "message_delta", "message_stop"])
    assert len(r["deltas"]) == 5 and r["text"] == "".join(r["deltas"]) != ""
    assert r["start"]["usage"]["input_tokens"] > 0 and r["start"]["content"] == []
    assert r["message_delta"]["usage"]["output_tokens"] == 5
    assert r["message_delta"]["delta"]["stop_reason"] == "max_tokens"


def test_anthropic_stream_helper_accumulates(stack):
    """messages.stream(): the helper's 'text' events join into the final message it accumulates, with its usage."""
    _, _, results = stack
    r = ok(results("anthropic"), "messages_stream_helper")
    assert len(r["texts"]) == 4 and r["final_text"] == "".join(r["texts"]) != ""
    assert r["id"].startswith("msg_") and r["stop_reason"] == "max_tokens"
    assert r["usage"]["output_tokens"] == 4 and r["usage"]["input_tokens"] > 0


def test_anthropic_count_tokens(stack):
    """messages.countTokens parses the engine's count: more text, more tokens."""
    _, _, results = stack
    r = ok(results("anthropic"), "count_tokens")
    assert r["long"] > r["short"] > 0


def test_anthropic_errors_are_the_sdks_error_classes(stack):
    """The gateway's Anthropic-shaped errors become the SDK's classes with error.type read from the body: a body
    without messages is BadRequestError / invalid_request_error, an unknown model NotFoundError / not_found_error."""
    _, _, results = stack
    res = results("anthropic")
    err = sdk_error(res, "error_bad_body")
    assert (err["class"], err["status"], err["type"]) == ("BadRequestError", 400, "invalid_request_error")
    assert "'messages' is required" in err["message"]
    err = sdk_error(res, "error_unknown_model")
    assert (err["class"], err["status"], err["type"]) == ("NotFoundError", 404, "not_found_error")
    assert "no-such-model" in err["message"]


def test_api_keys_through_both_sdks(tmp_path):
    """With API keys on: the Anthropic SDK's x-api-key and the OpenAI SDK's bearer key are accepted; a wrong key is
    AuthenticationError in both, with error.type authentication_error from the Anthropic-shaped body."""
    config = api_keys_config(tmp_path, [{"name": "team-a", "key": KEY}])
    with gateway_over(tmp_path, [Sim(tmp_path, "engine-0")], config=config) as gw:
        anthropic_url, openai_url = f"http://127.0.0.1:{gw.port}", f"http://127.0.0.1:{gw.port}/v1"
        good = run_cases("anthropic_cases.mjs", anthropic_url, ["messages_create"], api_key=KEY)
        assert ok(good, "messages_create")["content"][0]["text"].strip()
        bad = run_cases("anthropic_cases.mjs", anthropic_url, ["error_auth"], api_key="sk-wrong")
        err = sdk_error(bad, "error_auth")
        assert (err["class"], err["status"], err["type"]) == ("AuthenticationError", 401, "authentication_error")
        good = run_cases("openai_cases.mjs", openai_url, ["responses_create"], api_key=KEY)
        assert ok(good, "responses_create")["status"] == "completed"
        bad = run_cases("openai_cases.mjs", openai_url, ["responses_create"], api_key="sk-wrong")
        err = sdk_error(bad, "responses_create")
        assert (err["class"], err["status"]) == ("AuthenticationError", 401)
        assert err["body"]["type"] == "authentication_error"


def test_a_stream_cut_by_the_gateway_reaches_the_sdks_as_an_error(tmp_path):
    """A stream the gateway cuts after it began (here: over upstream.max_response_bytes) never ends silently, as a
    short answer would: the OpenAI SDK's Responses stream yields the published typed `error` event last (the SDK
    hands it to the consumer rather than raising), numbered after the last event, with the gateway's message; the
    Anthropic SDK raises an APIError of type api_error with the message."""
    config = {"upstream": {"max_response_bytes": 4096}}
    with gateway_over(tmp_path, [Sim(tmp_path, "engine-0")], config=config) as gw:
        openai = run_cases("openai_cases.mjs", f"http://127.0.0.1:{gw.port}/v1", ["responses_stream_long"])
        anthropic = run_cases("anthropic_cases.mjs", f"http://127.0.0.1:{gw.port}", ["messages_stream_long"])
    r = openai["responses_stream_long"]
    assert r["events"] > 4 and r["last"] == "error" and r["error"] is None, r
    event = r["last_event"]
    assert event["code"] == "bad_gateway" and "upstream.max_response_bytes" in event["message"], event
    assert event["sequence_number"] == r["events"] - 1, event  # the events before it were numbered 0..n-1
    r = anthropic["messages_stream_long"]
    assert r["events"] > 2 and r["last"] == "content_block_delta", r
    assert (r["error"]["class"], r["error"]["type"]) == ("APIError", "api_error"), r
    assert "upstream.max_response_bytes" in r["error"]["message"]


# --- The published examples ----------------------------------------------------------------------------------------
# Each example below is the publisher's own, abridged to its keys (values are theirs where they matter). The tests
# compare the key sets and the event order of what the gateway relays with them, so a drift in the simulator's
# answers or the gateway's errors away from the published shape fails here, whichever SDK version is installed.

# https://docs.anthropic.com/en/api/messages (Create a Message, example response)
ANTHROPIC_MESSAGE = {"content": [{"text": "Hi! My name is Claude.", "type": "text"}],
                     "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF", "model": "claude-3-7-sonnet-20250219", "role": "assistant",
                     "stop_reason": "end_turn", "stop_sequence": None, "type": "message",
                     "usage": {"input_tokens": 2095, "output_tokens": 503}}
# https://docs.anthropic.com/en/api/messages-count-tokens (example response)
ANTHROPIC_COUNT = {"input_tokens": 2095}
# https://docs.anthropic.com/en/docs/build-with-claude/streaming ("Basic streaming request", the event stream)
ANTHROPIC_STREAM = """event: message_start
data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-20250514", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}

event: message_stop
data: {"type": "message_stop"}

"""
# https://docs.claude.com/en/api/errors ("Error shapes")
ANTHROPIC_ERROR = {"type": "error", "error": {"type": "not_found_error",
                                              "message": "The requested resource could not be found."},
                   "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}
# https://platform.openai.com/docs/api-reference/responses-streaming (one example per event type) and, for their
# order in a text answer, https://platform.openai.com/docs/guides/streaming-responses. Later revisions of the
# reference add `logprobs` to the output_text events: allowed, not required (the SDKs do not read it).
RESPONSE_OBJECT_KEYS = {"id", "object", "created_at", "status", "error", "incomplete_details", "instructions",
                        "max_output_tokens", "model", "output", "parallel_tool_calls", "previous_response_id",
                        "reasoning", "store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation",
                        "usage", "user", "metadata"}
RESPONSES_EVENTS = [
    ("response.created", {"type", "response", "sequence_number"}),
    ("response.in_progress", {"type", "response", "sequence_number"}),
    ("response.output_item.added", {"type", "output_index", "item", "sequence_number"}),
    ("response.content_part.added", {"type", "item_id", "output_index", "content_index", "part", "sequence_number"}),
    ("response.output_text.delta", {"type", "item_id", "output_index", "content_index", "delta", "sequence_number"}),
    ("response.output_text.done", {"type", "item_id", "output_index", "content_index", "text", "sequence_number"}),
    ("response.content_part.done", {"type", "item_id", "output_index", "content_index", "part", "sequence_number"}),
    ("response.output_item.done", {"type", "output_index", "item", "sequence_number"}),
    ("response.completed", {"type", "response", "sequence_number"}),
]
OPTIONAL_EVENT_KEYS = {"logprobs"}
# https://platform.openai.com/docs/api-reference/responses-streaming/error (the `error` event)
RESPONSES_ERROR_EVENT = ("error", {"type": "error", "code": "ERR_SOMETHING", "message": "Something went wrong",
                                   "param": None, "sequence_number": 1})


def shape(value):
    """A JSON value reduced to its keys, recursively: dicts keep their keys (values reduced), lists their first item."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return None


def collapse(names):
    """Event names with runs of the same name folded into one (the published streams show two deltas, ours more)."""
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


def message(**extra):
    return json.dumps({"model": "sim-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                       **extra})


def test_anthropic_message_matches_the_published_example(sims, gateway_factory):
    """A non-streamed Message and a count_tokens answer have exactly the published example's keys (usage may carry
    more counters: Anthropic adds cache ones)."""
    gw = gateway_factory(sims[:1])
    status, _, raw = gw.call("POST", "/v1/messages", message())
    assert status == 200, raw
    body = json.loads(raw)
    usage = body.pop("usage")
    expected = shape(ANTHROPIC_MESSAGE)
    assert set(usage) >= set(expected.pop("usage"))
    assert shape(body) == expected
    status, _, raw = gw.call("POST", "/v1/messages/count_tokens", message())
    assert status == 200 and shape(json.loads(raw)) == shape(ANTHROPIC_COUNT), raw


def test_anthropic_stream_matches_the_published_example(sims, gateway_factory):
    """A streamed Message has the published event order (pings, which may appear anywhere, aside) and each event the
    published example's keys, nested keys included."""
    gw = gateway_factory(sims[:1])
    status, _, raw = gw.call("POST", "/v1/messages", message(stream=True))
    assert status == 200, raw
    ours = typed_events(raw)
    published = [(name, data) for name, data in typed_events(ANTHROPIC_STREAM) if name != "ping"]
    assert collapse([name for name, _ in ours]) == collapse([name for name, _ in published])
    published_shapes = {name: shape(data) for name, data in published}
    for name, data in ours:
        usage = data.get("message", data).get("usage")
        expected = published_shapes[name]
        if usage is not None:  # usage may carry more counters, as above
            assert set(usage) >= set(expected.get("message", expected)["usage"]), (name, usage)
            data = json.loads(json.dumps(data))
            expected = json.loads(json.dumps(expected))
            data.get("message", data).pop("usage")
            expected.get("message", expected).pop("usage")
        assert shape(data) == expected, name


def test_anthropic_error_matches_the_published_example(sims, gateway_factory):
    """The gateway's Anthropic-shaped errors (bad JSON, missing field, unknown model, wrong method) have the
    published shape: type, error {type, message} and the request's id as request_id (the request-id header's)."""
    gw = gateway_factory(sims[:1])
    published = shape(ANTHROPIC_ERROR)
    for method, path, body in [("POST", "/v1/messages", "{"), ("POST", "/v1/messages", '{"model": "sim-model"}'),
                               ("POST", "/v1/messages", message(model="no-such-model")),
                               ("GET", "/v1/messages/count_tokens", None)]:
        status, headers, raw = gw.call(method, path, body)
        assert status >= 400, raw
        ours = json.loads(raw)
        assert ours["type"] == "error"
        assert shape(ours["error"]) == published["error"], (path, ours)
        assert set(ours) == set(published), ours
        assert ours["request_id"] == headers["request-id"], (path, ours)


def test_responses_stream_matches_the_published_events(sims, gateway_factory):
    """A streamed Response has the published event order for a text answer and each event the keys of the API
    reference's example; the response objects inside use only the published Response object's keys."""
    gw = gateway_factory(sims[:1])
    status, _, raw = gw.call("POST", "/v1/responses", json.dumps({"model": "sim-model", "input": "hi",
                                                                  "max_output_tokens": 3, "stream": True}))
    assert status == 200, raw
    ours = typed_events(raw)
    assert collapse([name for name, _ in ours]) == [name for name, _ in RESPONSES_EVENTS]
    published = dict(RESPONSES_EVENTS)
    for name, data in ours:
        assert set(data) - OPTIONAL_EVENT_KEYS == published[name], (name, sorted(data))
        if "response" in data:
            keys = set(data["response"])
            assert keys <= RESPONSE_OBJECT_KEYS, keys - RESPONSE_OBJECT_KEYS
            assert keys >= {"id", "object", "created_at", "status", "model", "output", "usage"}, keys


def test_a_cut_responses_stream_ends_with_the_published_error_event(sims, gateway_factory):
    """The event that closes a Responses stream the gateway cuts is the published `error` event, numbered next."""
    gw = gateway_factory(sims[:1], config={"upstream": {"max_response_bytes": 4096}})
    status, _, raw = gw.call("POST", "/v1/responses", json.dumps({"model": "sim-model", "input": "a long answer",
                                                                  "max_output_tokens": 200, "stream": True}))
    assert status == 200
    blocks = [b for b in raw.decode().split("\n\n") if b.strip()]
    events = typed_events("\n\n".join(blocks[:-1]))
    (name, data), = typed_events(blocks[-1])
    assert name == RESPONSES_ERROR_EVENT[0]
    assert set(data) == set(RESPONSES_ERROR_EVENT[1]) and data["type"] == "error"
    assert data["sequence_number"] == events[-1][1]["sequence_number"] + 1
