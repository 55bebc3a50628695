"""Hostile and broken clients on raw sockets against the real gateway: each bad request costs only itself. Every
test checks the bad client's answer, that nothing of it reaches an engine or a metric label, and that a normal
client is served right after (on the same gateway, by the same pod)."""
import json
import os
import re
import socket
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import GATEWAY_BIN, sanitized, wait_until

CHAT = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2})


def raw_exchange(port, data, timeout=5.0):
    """Sends raw bytes, then reads until the gateway closes the connection or `timeout`; returns the bytes read."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(data)
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                part = sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not part:
                break
            got += part
        return got
    finally:
        sock.close()


def first_response(raw):
    """(status, lower-cased head text, body bytes by Content-Length) of the first response in `raw`."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    text = head.decode("latin-1").lower()
    status = int(text.split(" ", 2)[1])
    m = re.search(r"content-length: (\d+)", text)
    return status, text, rest[:int(m.group(1))] if m else rest


def post(path, body, extra=""):
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + (body if isinstance(body, bytes) else body.encode())


def assert_normal_client_served(gw, sim):
    status, headers, body = gw.chat("a normal client right after")
    assert status == 200, body
    assert headers["target-pod"] == sim.name


def request_series(gw):
    families = {f.name: f for f in text_string_to_metric_families(gw.metrics_text())}
    return [s for s in families["prefixgate_requests"].samples if s.name == "prefixgate_requests_total"]


@pytest.fixture
def gw(sims, gateway_factory):
    return gateway_factory(sims[:1], config={"limits": {"header_timeout_ms": 800}})


def test_made_up_model_names_share_one_metric_label(gw, sims):
    """Hundreds of made-up model names (and a 1 MiB one) are all counted under model="unknown": /metrics does not
    grow with them, the error echoes a cut name, and the log line stays short."""
    for i in range(200):
        status, _, body = gw.chat("x", model=f"made-up-{i}")
        assert status == 404
    huge = "m" * (1 << 20)
    status, _, body = gw.chat("x", model=huge)
    assert status == 404
    assert len(body) < 4096, "the error echoed the whole model name"
    # A request is counted just after its response is written: wait for the last one.
    wait_until(lambda: sum(s.value for s in request_series(gw)) == 201, timeout=3, what="201 requests counted")
    models = {s.labels["model"] for s in request_series(gw)}
    assert models == {"unknown"}, models
    log = gw.read_log()
    assert max(len(line) for line in log.splitlines()) < 4096
    assert_normal_client_served(gw, sims[0])
    # Counted just after its last byte went out: wait for it.
    wait_until(lambda: {s.labels["model"] for s in request_series(gw)} == {"unknown", "sim-model"}, timeout=3,
               what="the normal request counted under its model")


@pytest.mark.parametrize("where", ["path", "strategy", "model"])
def test_invalid_utf8_gets_an_error_response_not_a_dropped_connection(gw, sims, where):
    """Bytes that are not UTF-8 in the path, the routing-strategy header or the model get a JSON error (the bytes
    escaped, or refused by the JSON parser) on a connection that stays usable; the log shows them escaped."""
    bad = b"\xff\xfe\xc3("
    if where == "path":
        data = b"GET /v1/" + bad + b" HTTP/1.1\r\nHost: gw\r\n\r\n"
        expected, words = 404, "\\xff\\xfe\\xc3("
    elif where == "strategy":
        data = post("/v1/chat/completions", CHAT, "routing-strategy: ").replace(b"routing-strategy: ",
                                                                                b"routing-strategy: " + bad + b"\r\n")
        expected, words = 400, "unknown routing strategy '\\xff\\xfe\\xc3('"
    else:
        body = b'{"model": "sim-' + bad + b'", "messages": [{"role": "user", "content": "x"}]}'
        data = post("/v1/chat/completions", body)
        expected, words = 400, "not valid UTF-8"
    raw = raw_exchange(gw.port, data, timeout=2)
    assert raw, "the gateway dropped the connection without a response"
    status, head, body = first_response(raw)
    assert status == expected, raw[:500]
    error = json.loads(body.decode("utf-8"))["error"]
    assert error["code"] == expected and words in error["message"], error
    assert "connection: close" not in head
    if where != "model":
        wait_until(lambda: "\\xff" in gw.read_log(), timeout=3, what="the escaped bytes in the log")
    assert_normal_client_served(gw, sims[0])
    assert len(sims[0].completions_seen()) == 1  # only the normal client's request reached the engine


@pytest.mark.parametrize("encoding", ["gzip", "chunked, chunked", "gzip, chunked", "identity"])
def test_transfer_encoding_other_than_final_chunked_is_400(gw, sims, encoding):
    """Only one final `chunked` is accepted: anything else would leave the body's end ambiguous (smuggling)."""
    data = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: {encoding}\r\n\r\n"
            f"{len(CHAT):x}\r\n{CHAT}\r\n0\r\n\r\n").encode()
    status, _, body = first_response(raw_exchange(gw.port, data))
    assert status == 400
    assert "Transfer-Encoding" in json.loads(body)["error"]["message"]
    assert sims[0].completions_seen() == []
    assert_normal_client_served(gw, sims[0])


def test_content_length_with_transfer_encoding_is_400(gw, sims):
    data = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: {len(CHAT)}\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n{len(CHAT):x}\r\n{CHAT}\r\n0\r\n\r\n").encode()
    status, _, _ = first_response(raw_exchange(gw.port, data))
    assert status == 400
    assert sims[0].completions_seen() == []


def test_chunked_body_trailers_are_not_forwarded_as_headers(gw, sims):
    """A chunked request's trailer fields never become headers of the request the engine receives."""
    half = len(CHAT) // 2
    data = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n{half:x}\r\n{CHAT[:half]}\r\n{len(CHAT) - half:x}\r\n{CHAT[half:]}\r\n"
            f"0\r\nX-Smuggled: yes\r\nAuthorization: Bearer stolen\r\n\r\n").encode()
    status, _, _ = first_response(raw_exchange(gw.port, data, timeout=3))
    assert status == 200
    seen = sims[0].completions_seen()[-1]["headers"]
    assert "x-smuggled" not in seen and "authorization" not in seen, seen


@pytest.mark.parametrize("kind", ["extension", "size-line", "trailers"])
def test_oversized_chunk_framing_is_refused_with_431(gw, sims, kind):
    """Chunk extensions, chunk-size lines and trailer sections are bounded: the request gets 431, the gateway's
    memory does not grow with them, and nothing reaches the engine."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
    if kind == "extension":
        framing = b"5;" + b"e" * 8000 + b"=1\r\nhello\r\n0\r\n\r\n"
    elif kind == "size-line":
        framing = b"0" * 300_000 + b"5\r\nhello\r\n0\r\n\r\n"
    else:
        framing = b"5\r\nhello\r\n0\r\n" + b"X-T: " + b"t" * 300_000 + b"\r\n\r\n"
    raw = raw_exchange(gw.port, head + framing)
    status, _, body = first_response(raw)
    assert status == 431, raw[:300]
    assert json.loads(body)["error"]["code"] == 431
    assert sims[0].completions_seen() == []
    assert_normal_client_served(gw, sims[0])


def test_head_request_gets_the_head_only_and_the_connection_stays_framed(gw, sims):
    """HEAD /v1/models: the head with the body's length and no body, so the next response on the connection is
    read from the right byte."""
    data = b"HEAD /v1/models HTTP/1.1\r\nHost: gw\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
    raw = raw_exchange(gw.port, data)
    first, _, rest = raw.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    length = int(re.search(rb"(?i)content-length: (\d+)", first).group(1))
    assert length > 0
    assert rest.startswith(b"HTTP/1.1 200"), rest[:100]  # no body bytes between the two heads
    status, _, body = first_response(rest)
    assert status == 200 and len(body) == length and json.loads(body)["data"][0]["id"] == "sim-model"


def test_http10_client_gets_a_readable_answer_and_a_closed_connection(gw, sims):
    raw = raw_exchange(gw.port, b"GET /v1/models HTTP/1.0\r\n\r\n")
    assert raw.startswith(b"HTTP/1.0 200")
    assert b"transfer-encoding" not in raw.lower()
    status, _, body = first_response(raw)
    assert json.loads(body)["object"] == "list"


def test_slow_head_gets_408_at_the_header_timeout(gw, sims):
    """A client that never finishes its head gets a 408 (OpenAI-shaped, connection: close) after
    limits.header_timeout_ms, then the connection closes; a normal client is served meanwhile."""
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
    assert_normal_client_served(gw, sims[0])
    started = time.monotonic()
    raw = b""
    while True:
        part = sock.recv(65536)
        if not part:
            break
        raw += part
    sock.close()
    assert time.monotonic() - started < 3
    status, head, body = first_response(raw)
    assert status == 408 and "connection: close" in head
    assert "limits.header_timeout_ms" in json.loads(body)["error"]["message"]
    wait_until(lambda: "status=408" in gw.read_log(), timeout=3, what="the 408 log line")

def cpu_seconds(pid):
    """User + system CPU time of a process, from /proc/PID/stat."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_out_of_file_descriptors_pauses_accepting_and_recovers(sims, gateway_factory):
    """With the descriptor limit exhausted by idle clients, the gateway backs off instead of spinning on accept,
    says so in its log, and serves again as soon as descriptors are free."""
    if sanitized(GATEWAY_BIN):
        pytest.skip("a sanitizer build cannot run out of file descriptors cleanly (its runtime needs some)")
    gw = gateway_factory(sims[:1], launcher=["prlimit", "--nofile=64:64"])
    hogs = []
    try:
        for _ in range(80):
            hogs.append(socket.create_connection(("127.0.0.1", gw.port), timeout=2))
        wait_until(lambda: "pausing accepts" in gw.read_log(), timeout=5, what="the accept back-off")
        before = cpu_seconds(gw.proc.pid)
        time.sleep(1.0)
        assert cpu_seconds(gw.proc.pid) - before < 0.3, "the accept loop spins while out of descriptors"
    finally:
        for s in hogs:
            s.close()
    wait_until(lambda: gw.chat("served again", max_tokens=2)[0] == 200, timeout=10, what="service after EMFILE")
    assert "open file limit 64 is below" in gw.read_log()  # it could not raise the hard limit, and says so


def test_file_limit_is_raised_for_max_connections(sims, gateway_factory):
    gw = gateway_factory(sims[:1], config={"limits": {"max_connections": 1000}}, launcher=["prlimit", "--nofile=256:8192"])
    limits = open(f"/proc/{gw.proc.pid}/limits").read()
    soft = int(re.search(r"Max open files\s+(\d+)", limits).group(1))
    assert soft == 1000 * 2 + 1024
    assert "open file limit raised from 256 to 3024" in gw.read_log()


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_one_huge_prompt_does_not_keep_its_scratch_memory(sims, gateway_factory):
    """A 6 MiB prompt without spaces is one tiktoken piece (its merge scratch alone is ~120 MiB): once answered,
    the gateway's memory comes back near where it was, on every thread, instead of staying at its peak."""
    if sanitized(GATEWAY_BIN):
        pytest.skip("AddressSanitizer keeps freed memory in quarantine: RSS cannot show a release")
    gw = gateway_factory(sims[:1], config={"threads": 1, "routing": {
        "strategy": "prefix-cache", "prefix_cache": {"tokenizer": "tiktoken"}}})
    assert gw.chat("warm up", max_tokens=1)[0] == 200
    before = rss_mib(gw.proc.pid)
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "a" * (6 << 20)}], "max_tokens": 1})
    status, headers, _ = gw.call("POST", "/v1/chat/completions", body, timeout=120)
    assert headers.get("target-pod") == sims[0].name  # routed (tokenized, hashed) and relayed; the engine says 400
    assert status == 400
    assert gw.chat("a normal prompt after it", max_tokens=1)[0] == 200
    after = rss_mib(gw.proc.pid)
    assert after - before < 40, f"RSS grew from {before:.0f} to {after:.0f} MiB and stayed"
