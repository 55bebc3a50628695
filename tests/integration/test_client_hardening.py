"""What a client can make the gateway hold or do before it is known (issue 24): a head announcing a large body costs
no body memory, a refused key is answered before the body is read, the bodies held gateway-wide are bounded
(limits.max_buffered_body_bytes: 503 with retry-after beyond it), and a client that leaves after sending bytes of a
pipelined request still cancels the engine's work."""
import json
import socket
import time
from pathlib import Path

import yaml

from harness import Gateway, Sim, settled, wait_until

MODEL = "sim-model"
IO_TIMEOUT_S = 10
SECRET = "sk-client-hardening-0123456789"


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def head(path="/v1/chat/completions", length=None, headers=()):
    lines = [f"POST {path} HTTP/1.1", "Host: gateway", "Content-Type: application/json", *headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chat_body(size=None, max_tokens=1, stream=False):
    """A chat request body; with `size`, padded to exactly that many bytes."""
    def make(content):
        return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}],
                           "max_tokens": max_tokens, "stream": stream}).encode()
    if size is None:
        return make("hello")
    body = make("")
    return make("x" * (size - len(body)))


def read_response(sock):
    """(status, headers, body) of one Content-Length response read from `sock`; None when the peer closes first."""
    sock.settimeout(IO_TIMEOUT_S)
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    head_text, rest = buf.split(b"\r\n\r\n", 1)
    lines = head_text.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            return None
        rest += data
    return int(lines[0].split()[1]), headers, rest[:length]


def connect(gw):
    return socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)


def write_keys(tmp_path):
    (Path(tmp_path) / "keys.yaml").write_text(yaml.safe_dump({"keys": [{"name": "team", "key": SECRET}]}))
    return {"auth": {"api_keys_file": "keys.yaml"}}


def test_heads_announcing_large_bodies_cost_no_body_memory(tmp_path):
    """20 connections each sending only a head with Content-Length: 32 MiB (the largest body allowed), to a proxied
    and an unknown path: the gateway's memory grows by the bytes that came, not by the lengths announced (it used to
    reserve and zero-fill 32 MiB each: +640 MiB for as long as the clients waited)."""
    sim = Sim(tmp_path, "engine-0")
    gw = Gateway(tmp_path, [sim], config={"threads": 1})
    sockets = []
    try:
        assert gw.chat("warm up")[0] == 200
        before = settled(lambda: rss_mib(gw.proc.pid))
        for i in range(20):
            s = connect(gw)
            s.sendall(head("/v1/chat/completions" if i % 2 == 0 else "/no/such/path", length=32 << 20))
            sockets.append(s)
        time.sleep(0.5)  # nothing to wait for: the gateway only waits for the bodies
        after = settled(lambda: rss_mib(gw.proc.pid))
        assert after - before < 64, f"RSS grew from {before:.0f} to {after:.0f} MiB for 20 heads"
        # Every connection is still there, waiting for its body: the gateway neither answered nor closed it.
        for s in sockets:
            s.settimeout(0.05)
            try:
                got = s.recv(1)
            except socket.timeout:
                continue
            raise AssertionError(f"the gateway answered or closed a connection waiting for its body: {got!r}")
        assert gw.chat("still served")[0] == 200
    finally:
        for s in sockets:
            s.close()
        gw.stop()
        sim.stop()


def test_refused_key_is_answered_before_the_body_is_read(tmp_path):
    """With API keys on, a head without a key that announces a body gets its 401 at once, with `connection: close`,
    without the body being sent (the gateway used to wait for the whole body first); the client may still send
    body bytes after it without losing the answer, and the connection then closes. A bodiless refusal keeps the
    connection."""
    sim = Sim(tmp_path, "engine-0")
    gw = Gateway(tmp_path, [sim], config=write_keys(tmp_path))
    try:
        with connect(gw) as s:
            s.sendall(head(length=1 << 20))
            answer = read_response(s)
            assert answer is not None, "no answer before the body"
            status, headers, body = answer
            assert status == 401, body
            assert headers["connection"] == "close"
            assert headers["www-authenticate"] == "Bearer"
            assert json.loads(body)["error"]["type"] == "authentication_error"
            s.sendall(b"x" * 65536)  # the client goes on with its body: read and dropped
            deadline = time.monotonic() + IO_TIMEOUT_S
            while s.recv(65536) and time.monotonic() < deadline:
                pass
            assert time.monotonic() < deadline, "the connection stayed open"
        with connect(gw) as s:  # part of the body sent with the head: the same
            s.sendall(head(length=100000, headers=["authorization: Bearer sk-wrong"]) + b"{" * 1000)
            status, headers, _ = read_response(s)
            assert status == 401 and headers["connection"] == "close"
        with connect(gw) as s:  # no body: the connection is kept for the next request
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: gateway\r\n\r\n")
            status, headers, _ = read_response(s)
            assert status == 401 and headers.get("connection") != "close"
            body = chat_body()
            s.sendall(head(length=len(body), headers=[f"authorization: Bearer {SECRET}"]) + body)
            assert read_response(s)[0] == 200
        assert sim.completions_seen()[-1]["status"] == 200 and len(sim.completions_seen()) == 1
    finally:
        gw.stop()
        sim.stop()


def test_bodies_over_the_buffered_budget_get_503_with_retry_after(tmp_path):
    """Two 90,000-byte uploads at once under limits.max_buffered_body_bytes = 100,000: whichever grows its buffer
    second gets 503 service_unavailable with retry-after (counted in prefixgate_body_budget_refusals_total) instead
    of the memory; the other is served, and once it is done the refused one succeeds when sent again."""
    sim = Sim(tmp_path, "engine-0")
    gw = Gateway(tmp_path, [sim], config={"limits": {"max_body_bytes": 100000, "max_buffered_body_bytes": 100000}})
    try:
        body = chat_body(size=90000)
        uploads = [connect(gw), connect(gw)]
        for s in uploads:  # all but the last byte: both bodies are being buffered at once
            s.sendall(head(length=len(body)) + body[:-1])
        answers = []
        for s in uploads:
            try:
                s.sendall(body[-1:])
            except (BrokenPipeError, ConnectionResetError):
                pass
            answers.append(read_response(s))
            s.close()
        statuses = sorted(a[0] for a in answers)
        assert statuses == [200, 503], answers
        _, headers, error = next(a for a in answers if a[0] == 503)
        assert headers["retry-after"] == "1"
        err = json.loads(error)["error"]
        assert err["type"] == "service_unavailable"
        assert "limits.max_buffered_body_bytes" in err["message"]
        assert gw.metric("prefixgate_body_budget_refusals_total") == 1
        # The served request's charge is released when its session is done with it, just after the client read
        # its answer: the retry waits for that (bounded), and is then served.
        wait_until(lambda: gw.call("POST", "/v1/chat/completions", body)[0] == 200, timeout=10,
                   what="the retried upload served once the other one's body was released")
        assert "reason=body_buffer_full" in gw.read_log()
    finally:
        gw.stop()
        sim.stop()


def test_client_leaving_after_a_pipelined_byte_still_cancels_the_engine(tmp_path):
    """A client sends a (non-streamed) request and one byte of its next, pipelined request, then leaves: the gateway
    still sees the hang-up and closes the engine connection, so the engine cancels the work (the watcher used to stop
    at the first pipelined byte, and the engine generated all 600 tokens)."""
    sim = Sim(tmp_path, "slow", "--decode-ms-per-token", "20", time_scale="1")
    gw = Gateway(tmp_path, [sim])
    try:
        body = chat_body(max_tokens=600)
        s = connect(gw)
        s.sendall(head(length=len(body)) + body)
        wait_until(lambda: sim.requests(), timeout=5, what="the engine to get the request")
        time.sleep(0.2)  # the relay is waiting for the answer, its watcher armed
        s.sendall(b"P")
        time.sleep(0.2)
        s.shutdown(socket.SHUT_RDWR)
        s.close()
        seen = wait_until(lambda: [r for r in sim.completions_seen() if r["cancelled"]], timeout=5,
                          what="the engine to see the cancel")
        assert not seen[0]["completed"]
        wait_until(lambda: gw.debug_pods()[0]["in_flight"] == 0, timeout=5, what="in-flight back to 0")
    finally:
        gw.stop()
        sim.stop()


def test_a_request_pipelined_during_a_response_is_served_after_it(tmp_path):
    """Bytes of the next request sent while the previous one's answer is being generated are kept (the hang-up
    watcher moves them into the connection's buffer) and served, in order, once the first answer is written."""
    sim = Sim(tmp_path, "slow", "--decode-ms-per-token", "20", time_scale="1")
    gw = Gateway(tmp_path, [sim])
    try:
        first, second = chat_body(max_tokens=20), chat_body(max_tokens=2)
        with connect(gw) as s:
            s.sendall(head(length=len(first)) + first)
            wait_until(lambda: sim.requests(), timeout=5, what="the engine to get the first request")
            pipelined = head(length=len(second)) + second
            s.sendall(pipelined[:10])
            time.sleep(0.1)
            s.sendall(pipelined[10:])
            answers = [read_response(s), read_response(s)]
        assert [a[0] for a in answers] == [200, 200], answers
        assert [json.loads(a[2])["usage"]["completion_tokens"] for a in answers] == [20, 2]
    finally:
        gw.stop()
        sim.stop()


def test_long_bodies_reach_the_engine_whole_however_they_arrive(tmp_path):
    """A 300 KB Content-Length body (more than the first 64 KiB step of its buffer) sent at once, in a head-sized
    first piece then the rest, and in 70 KB pieces with pauses: the gateway sizes its buffer for the bytes that have
    arrived (the kernel's queue included) and grows it as more come; every way, the engine receives the body byte for
    byte (its length, and a prompt it parses into the same token count) and the client gets 200. A byte lost or
    zero-filled in a growth would make the JSON unparseable (400) or change the engine's count."""
    sim = Sim(tmp_path, "engine-0", "--max-model-len", "1000000")
    gw = Gateway(tmp_path, [sim])
    try:
        words = " ".join(f"w{i % 977}x{i % 13}" for i in range(40000))
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": words[:299000]}],
                           "max_tokens": 1}).encode()
        assert len(body) > 256 * 1024
        ways = {"at once": [len(body)], "head then rest": [1000, len(body) - 1000],
                "70 KB pieces": [70000] * (len(body) // 70000) + [len(body) % 70000]}
        seen = []
        for name, pieces in ways.items():
            s = connect(gw)
            s.sendall(head(length=len(body)))
            sent = 0
            for n in pieces:
                s.sendall(body[sent:sent + n])
                sent += n
                if len(pieces) > 1:
                    time.sleep(0.05)  # the gateway reads (and sizes its buffer for) what has come so far
            assert sent == len(body)
            status, _, answer = read_response(s)
            s.close()
            assert status == 200, (name, answer[:300])
            record = [r for r in sim.completions_seen()][-1]
            assert record["body_bytes"] == len(body), (name, record)
            seen.append(record["prompt_tokens"])
        assert len(set(seen)) == 1 and seen[0] > 0, seen
    finally:
        gw.stop()
        sim.stop()
