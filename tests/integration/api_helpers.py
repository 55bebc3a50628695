"""What the API-surface tests share (Responses, Anthropic Messages, rerank and score, the SDK conformance test):
reading a named-event SSE body, checking OpenAI- and Anthropic-shaped error bodies, an API keys file, a streamed
POST read chunk by chunk, and a gateway in front of its own simulators that stops everything after the block."""
import contextlib
import http.client
import json
import os
from pathlib import Path

import yaml

from harness import Gateway, read_chunks

# Anthropic's error types (https://docs.claude.com/en/api/errors, "HTTP errors").
ANTHROPIC_ERROR_TYPES = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                         "request_too_large", "rate_limit_error", "api_error", "overloaded_error"}


def typed_events(raw):
    """[(event name, data as JSON)] of an SSE body whose events are named (`event: X` then `data: {...}`), as the
    Responses and Messages streams are, in order; every event must have both lines."""
    out = []
    for block in (raw.decode() if isinstance(raw, bytes) else raw).split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        out.append((lines[0][len("event: "):], json.loads(lines[1][len("data: "):])))
    return out


def openai_error(raw):
    """The `error` object of an OpenAI-shaped error body, checked to have its four fields."""
    err = json.loads(raw)["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    return err


def anthropic_error(raw):
    """The `error` object of an Anthropic-shaped error body, checked: {"type": "error", "error": {"type",
    "message"}} with a type from Anthropic's list."""
    body = json.loads(raw)
    assert body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] in ANTHROPIC_ERROR_TYPES, body
    return body["error"]


def api_keys_config(tmp_path, keys):
    """Writes `keys` ([{"name", "key", "models"?}]) as tmp_path/keys.yaml (atomically: the gateway may be watching)
    and returns the gateway config that turns API keys on with it."""
    path = Path(tmp_path) / "keys.yaml"
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(yaml.safe_dump({"keys": keys}))
    os.replace(tmp, path)
    return {"auth": {"api_keys_file": path.name}}


def post_stream(gw, path, body, headers=None):
    """POSTs `body` to the gateway and reads the answer chunk by chunk as it arrives; returns (status, content
    type, [(arrival time, bytes)])."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        res = conn.getresponse()
        return res.status, res.getheader("content-type") or "", read_chunks(res)
    finally:
        conn.close()


@contextlib.contextmanager
def gateway_over(tmp_path, sims, **gateway_kwargs):
    """A gateway in front of `sims` (made by the test for their own options), yielded; the gateway and the sims
    are stopped when the block ends, whatever happened in it."""
    gw = None
    try:
        gw = Gateway(tmp_path, sims, **gateway_kwargs)
        yield gw
    finally:
        if gw is not None:
            gw.stop()
        for s in sims:
            s.stop()
