"""The relay against misbehaving engines (small raw-socket fakes on loopback): a request's own failure does not eject
the pod, interim and bodiless responses are framed right, large bodies pass, HTTP/1.0 clients get close-delimited
bodies, and a client hanging up during a fresh-connection retry is handled. Every test also checks that a normal
client is served by the same pod right after (no 503 "no ready pod")."""
import ctypes
import http.client
import json
import os
import resource
import socket
import struct
import threading
import time

import pytest

from harness import GATEWAY_BIN, Sim, sanitized, sse_events, wait_until

MODEL = "sim-model"
IO_TIMEOUT_S = 10
FAKE_LIFETIME_S = 120
MAX_REQUESTS_PER_CONNECTION = 10_000
NORMAL = b'{"id":"ok","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}'


def read_until(sock, buf, done):
    """Receives onto `buf` until done(buf); None when the peer closes first or IO_TIMEOUT_S passes."""
    deadline = time.monotonic() + IO_TIMEOUT_S
    while not done(buf):
        data = sock.recv(65536)
        if not data or time.monotonic() > deadline:
            return None
        buf += data
    return buf


def answer(status_line, body=b"", headers=()):
    head = [status_line, f"Content-Length: {len(body)}", "Content-Type: application/json", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class FakeEngine:
    """An HTTP/1.1 engine on a raw socket: `GET /health` answers 200, other GETs 404; every POST goes to
    `respond(body)`, which returns the bytes to send, or a list of steps (bytes to send, or a float: seconds to pause
    before the next), or None to reset the connection (SO_LINGER 0). Keep-alive unless told."""

    def __init__(self, respond, name="fake-0"):
        self.respond, self.name = respond, name
        self.requests = []          # bodies of the POST requests, in arrival order
        self.close_after_answer = False
        self.accepting = threading.Event()
        self.accepting.set()
        self.paused = threading.Event()     # set while the accept loop waits for `accepting` (accepts nothing)
        self.closed_after_answer = 0        # connections this engine closed after an answer (close_after_answer)
        self.server = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.port = self.server.getsockname()[1]
        self.server.settimeout(0.1)
        self.stopped = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def entry(self):
        return {"name": self.name, "address": f"127.0.0.1:{self.port}", "models": [MODEL]}

    def accept_loop(self):
        deadline = time.monotonic() + FAKE_LIFETIME_S
        while not self.stopped and time.monotonic() < deadline:
            if not self.accepting.is_set():
                self.paused.set()
                self.accepting.wait(0.1)
                continue
            self.paused.clear()
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        conn.settimeout(IO_TIMEOUT_S)
        buf = b""
        try:
            for _ in range(MAX_REQUESTS_PER_CONNECTION):
                buf = read_until(conn, buf, lambda b: b"\r\n\r\n" in b)
                if buf is None:
                    return
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.decode().split("\r\n")
                fields = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
                length = int(fields.get("content-length", "0"))
                buf = read_until(conn, buf, lambda b: len(b) >= length)
                if buf is None:
                    return
                body, buf = buf[:length], buf[length:]
                if lines[0].startswith("GET /health"):
                    conn.sendall(answer("HTTP/1.1 200 OK", b"{}"))
                    continue
                if lines[0].startswith("GET "):  # the gateway's /metrics scrapes: this engine has none
                    conn.sendall(answer("HTTP/1.1 404 Not Found", b"{}"))
                    continue
                self.requests.append(body)
                close = self.close_after_answer  # read before answering: the test may change it once answered
                out = self.respond(body)
                if out is None:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                for step in out if isinstance(out, list) else [out]:
                    if isinstance(step, float):
                        time.sleep(step)  # the engine's own pacing, the thing under test: no condition to wait for
                    else:
                        conn.sendall(step)
                if close:
                    conn.close()
                    self.closed_after_answer += 1
                    return
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self):
        self.stopped = True
        self.server.close()


def chat_body(content, stream=False):
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4,
                       "stream": stream})


def served_normally(gw, pod_name):
    """A normal request right now is answered 200 by `pod_name` (a 503 would mean the pod was ejected)."""
    status, headers, body = gw.call("POST", "/v1/chat/completions", chat_body("normal"))
    assert status == 200, (status, body[:300])
    assert headers["target-pod"] == pod_name


def test_a_request_that_resets_the_engine_does_not_eject_its_pod(tmp_path, gateway_factory):
    """An engine dropping the connection on one poisoned request, again and again: that client gets 502s, and a
    normal client at the same time is still served by the only pod (no 503 "no ready pod")."""
    engine = FakeEngine(lambda body: None if b"poison" in body else answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()], config={"health_check": {"max_ejection_percent": 100}})
        for _ in range(5):
            status, _, body = gw.call("POST", "/v1/chat/completions", chat_body("poison"))
            assert status == 502, body
            assert json.loads(body)["error"]["code"] == 502
            served_normally(gw, "fake-0")
        assert gw.debug_pods()[0]["ready"]
    finally:
        engine.stop()


def test_resets_from_several_different_requests_eject_the_pod(tmp_path, gateway_factory):
    """The same engine resetting three different requests in a row is ejected (max_ejection_percent 100, no panic),
    so the distinct-request rule does not protect a pod that fails everything."""
    engine = FakeEngine(lambda body: None if b"poison" in body else answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()], config={
            "health_check": {"max_ejection_percent": 100, "panic_threshold_percent": 0, "eject_base_ms": 60000,
                             "eject_max_ms": 60000}})
        for i in range(3):
            status, _, _ = gw.call("POST", "/v1/chat/completions", chat_body(f"poison {i}"))
            assert status == 502
        status, _, body = gw.call("POST", "/v1/chat/completions", chat_body("normal"))
        assert status == 503, body
    finally:
        engine.stop()


def test_same_request_failing_on_two_pods_ejects_neither(tmp_path, gateway_factory):
    """A poisoned request reset by two pods in turn (one retry) is the request's fault: sent with three different
    bodies, it would eject a pod that failed them alone, but here both pods keep serving normal clients."""
    engines = [FakeEngine(lambda body: None if b"poison" in body else answer("HTTP/1.1 200 OK", NORMAL),
                          name=f"fake-{i}") for i in range(2)]
    try:
        gw = gateway_factory([e.entry() for e in engines], config={
            "health_check": {"max_ejection_percent": 100, "panic_threshold_percent": 0, "eject_base_ms": 60000,
                             "eject_max_ms": 60000}})
        wait_until(lambda: all(p["ready"] for p in gw.debug_pods()), what="both pods ready")  # /readyz needs one
        for i in range(4):
            status, _, _ = gw.call("POST", "/v1/chat/completions", chat_body(f"poison {i}"))
            assert status == 502
        assert all(p["ready"] for p in gw.debug_pods()), gw.debug_pods()
        assert sum(len(e.requests) for e in engines) == 8  # each poisoned request went to both pods
    finally:
        for e in engines:
            e.stop()


def test_interim_103_is_skipped_and_connection_listed_headers_dropped(tmp_path, gateway_factory):
    """An engine answering 103 Early Hints before its 200: the client gets the 200 and its body (not the 103), the
    header the engine listed in Connection is dropped, and the next request on the pooled connection gets its own
    answer."""
    def respond(body):
        n = len(engine.requests)
        final = answer("HTTP/1.1 200 OK", json.dumps({"n": n}).encode(), ["Connection: keep-alive, X-Hop", "X-Hop: 1"])
        return b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + final

    engine = FakeEngine(respond)
    try:
        gw = gateway_factory([engine.entry()], config={"threads": 1})
        for n in (1, 2):
            status, headers, body = gw.call("POST", "/v1/chat/completions", chat_body("hi"))
            assert status == 200, (status, body)
            assert json.loads(body) == {"n": n}
            assert "x-hop" not in headers
        served_normally(gw, "fake-0")
    finally:
        engine.stop()


def test_204_is_relayed_without_a_body_and_the_connection_stays_usable(tmp_path, gateway_factory):
    """A 204 from the engine reaches the client with no body framing, so the same client connection then carries
    a normal request and response."""
    engine = FakeEngine(lambda body: b"HTTP/1.1 204 No Content\r\n\r\n" if b"empty" in body
                        else answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()])
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=IO_TIMEOUT_S)
        conn.request("POST", "/v1/chat/completions", body=chat_body("empty"))
        res = conn.getresponse()
        assert res.status == 204 and res.read() == b""
        assert res.getheader("transfer-encoding") is None
        conn.request("POST", "/v1/chat/completions", body=chat_body("normal"))
        res = conn.getresponse()
        assert res.status == 200 and res.read() == NORMAL
        conn.close()
        served_normally(gw, "fake-0")
    finally:
        engine.stop()


def closed_within(sock, low_s, high_s):
    """The peer closes `sock` (recv gives b"") no sooner than low_s and no later than high_s from now."""
    sock.settimeout(high_s + 1)
    start = time.monotonic()
    assert sock.recv(1) == b""
    waited = time.monotonic() - start
    assert low_s <= waited < high_s, waited


def test_client_idle_limit_closes_only_idle_connections(tmp_path, gateway_factory):
    """limits.client_idle_timeout_ms closes a connection that sends nothing for that long (one that never sent a
    byte, and a keep-alive one after its answers), counts only the time waited for a request (pauses under the limit
    between requests add up to more than it and the connection stays), and never fires while a request is served (an
    answer slower than the limit arrives whole). Fails if the idle deadline never fires, if it fires during a request
    (it cancels the client socket's reads, the hang-up watcher's too), or if it is not restarted per wait."""
    idle_s = 0.6
    engine = FakeEngine(lambda body: [1.5, answer("HTTP/1.1 200 OK", NORMAL)] if b"slow" in body
                        else answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()], config={"limits": {"client_idle_timeout_ms": int(idle_s * 1000)}})
        silent = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        closed_within(silent, idle_s - 0.1, idle_s + 3)
        silent.close()
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=IO_TIMEOUT_S)
        for _ in range(4):
            conn.request("POST", "/v1/chat/completions", body=chat_body("normal"))
            res = conn.getresponse()
            assert res.status == 200 and res.read() == NORMAL
            time.sleep(idle_s / 2)  # the client's own pacing, the thing under test: 4 x 0.3 s idle, each under 0.6
        conn.request("POST", "/v1/chat/completions", body=chat_body("slow"))
        res = conn.getresponse()
        assert res.status == 200 and res.read() == NORMAL  # 1.5 s of the engine's: the client was not idle
        closed_within(conn.sock, idle_s - 0.1, idle_s + 3)
        conn.close()
        assert len(engine.requests) == 5
    finally:
        engine.stop()


def test_a_client_gone_after_the_idle_limit_mid_request_is_still_seen(tmp_path, gateway_factory):
    """The client idle limit is paused while a request is served: a client that hangs up after longer than the
    limit, while the engine still computes, ends the request at once (499, the engine's connection closed), as the
    hang-up watcher sees it. Fails if the idle deadline fires during the request: its cancel of the client socket's
    reads also stops the watcher, and the hang-up is then seen only when the engine answers, seconds later."""
    idle_s, engine_s = 0.5, 8.0
    engine = FakeEngine(lambda body: [engine_s, answer("HTTP/1.1 200 OK", NORMAL)])
    try:
        gw = gateway_factory([engine.entry()], config={"limits": {"client_idle_timeout_ms": int(idle_s * 1000)}})
        client = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        body = chat_body("slow")
        client.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        wait_until(lambda: len(engine.requests) == 1, timeout=IO_TIMEOUT_S, what="the engine has the request")
        time.sleep(3 * idle_s)  # the client's own pacing, the thing under test: past the idle limit, mid-request
        client.close()
        closed_at = time.monotonic()
        wait_until(lambda: gw.metric("prefixgate_requests_total", status="499") == 1, timeout=engine_s / 2,
                   what="the hang-up seen while the engine still computes")
        assert time.monotonic() - closed_at < engine_s - 3 * idle_s - 1  # long before the engine's answer
        assert gw.metric("prefixgate_requests_total", status="200") == 0
    finally:
        engine.stop()


def test_response_larger_than_8_mib_is_relayed_whole(tmp_path, gateway_factory):
    """A 9 MiB answer (large embeddings) passes whole, with no retry and no ejection (Beast's default 8 MiB limit
    once failed it, re-ran it on a fresh connection and ejected the pod)."""
    big = b'{"data":"' + b"x" * (9 << 20) + b'"}'
    engine = FakeEngine(lambda body: answer("HTTP/1.1 200 OK", big) if b"big" in body
                        else answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()])
        status, _, body = gw.call("POST", "/v1/chat/completions", chat_body("big"))
        assert status == 200 and body == big
        assert len(engine.requests) == 1
        served_normally(gw, "fake-0")
    finally:
        engine.stop()


def test_upstream_max_response_bytes(tmp_path, gateway_factory):
    """Over upstream.max_response_bytes: a non-streamed answer becomes one clean 502 naming the limit, a stream
    that already began ends with an SSE error event; neither is retried nor ejects the pod."""
    stream_body = b"".join(b'data: {"choices":[{"index":0,"delta":{"content":"%d"}}]}\n\n' % i for i in range(200))
    def respond(body):
        if b"long-events" in body:
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(stream_body[i:i + 1000]), stream_body[i:i + 1000])
                              for i in range(0, len(stream_body), 1000))
            return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
                    chunks + b"0\r\n\r\n")
        return answer("HTTP/1.1 200 OK", b"y" * 8192 if b"big" in body else NORMAL)

    engine = FakeEngine(respond)
    try:
        gw = gateway_factory([engine.entry()], config={"upstream": {"max_response_bytes": 4096}})
        status, _, body = gw.call("POST", "/v1/chat/completions", chat_body("big"))
        assert status == 502
        assert "upstream.max_response_bytes" in json.loads(body)["error"]["message"]
        assert len(engine.requests) == 1
        status, _, raw = gw.call("POST", "/v1/chat/completions", chat_body("long-events", stream=True))
        events = sse_events(raw)
        assert status == 200 and 0 < len(events) < 200
        assert "upstream.max_response_bytes" in json.loads(events[-1])["error"]["message"]
        assert len(engine.requests) == 2
        served_normally(gw, "fake-0")
    finally:
        engine.stop()


def test_http10_client_gets_a_close_delimited_stream(tmp_path, gateway_factory):
    """An HTTP/1.0 client cannot read chunked framing: it gets the stream's bytes as they are, then the connection
    closes; a normal client is served right after."""
    sim = Sim(tmp_path, "engine-0")
    try:
        gw = gateway_factory([sim])
        body = chat_body("an old client", stream=True)
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        sock.sendall((f"POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        raw = b""
        deadline = time.monotonic() + IO_TIMEOUT_S
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break  # the gateway closed: the end of the body
            raw += data
        sock.close()
        head, payload = raw.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
        assert payload.startswith(b"data: ") and sse_events(payload)[-1] == "[DONE]"
        served_normally(gw, "engine-0")
    finally:
        sim.stop()


def test_client_hanging_up_during_a_fresh_connection_retry(tmp_path, gateway_factory):
    """The engine closed the pooled connection, so the request goes out on a new one (the dead one is seen before
    reuse and dropped); while that connect waits (the engine's accept queue is full), the client hangs up. The
    watcher must close the new connection, not the dropped one (ASan builds report a use-after-free), and the pod
    serves the next client."""
    engine = FakeEngine(lambda body: answer("HTTP/1.1 200 OK", NORMAL))
    fillers = []
    try:
        gw = gateway_factory([engine.entry()], config={
            "threads": 1, "upstream": {"pool_idle_ms": 60000, "connect_timeout_ms": 5000},
            "health_check": {"interval_ms": 60000, "max_ejection_percent": 100}})
        engine.close_after_answer = True  # the pooled connection dies right after this answer
        served_normally(gw, "fake-0")
        engine.close_after_answer = False
        # The engine closed: its FIN is on the gateway's pooled connection (loopback delivers it at once).
        wait_until(lambda: engine.closed_after_answer == 1, timeout=IO_TIMEOUT_S, what="the engine closed")
        engine.accepting.clear()
        wait_until(engine.paused.is_set, timeout=IO_TIMEOUT_S, what="the engine's accept loop idle")
        for _ in range(3):  # fill the accept queue (backlog 0): further SYNs are dropped, connects hang
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", engine.port))
            fillers.append(s)
        client = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        body = chat_body("hang up during the retry")
        client.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        # The dead pooled connection was seen and dropped; the fresh connect is waiting.
        wait_until(lambda: gw.metric("prefixgate_upstream_stale_connections_total", stage="detected") == 1,
                   timeout=IO_TIMEOUT_S, what="the stale connection detected")
        client.close()
        # The watcher ended the request (while the connect still waited: the accept queue is still full).
        wait_until(lambda: gw.debug_pods()[0]["in_flight"] == 0, timeout=IO_TIMEOUT_S, what="the request ended")
        for s in fillers:
            s.close()
        engine.accepting.set()
        assert gw.proc.poll() is None, "the gateway died"
        wait_until(lambda: gw.debug_pods()[0]["in_flight"] == 0, timeout=IO_TIMEOUT_S, what="in-flight back to 0")
        # The case under test happened: the dead pooled connection dropped before reuse, the fresh connection ended
        # by the client leaving. (The metrics are recorded just after the in-flight count drops.)
        wait_until(lambda: gw.metric("prefixgate_requests_total", status="499") == 1, timeout=IO_TIMEOUT_S,
                   what="the request ended by the client counted")
        assert gw.metric("prefixgate_upstream_stale_connections_total", stage="detected") == 1
        assert gw.metric("prefixgate_upstream_stale_connections_total", stage="sent") == 0
        served_normally(gw, "fake-0")
    finally:
        for s in fillers:
            s.close()
        engine.stop()


def wait_stable(read, reads=3, interval_s=0.1, timeout_s=IO_TIMEOUT_S):
    """Waits until `read()` gives the same value `reads` times in a row (a process's descriptors settled)."""
    deadline, seen = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        seen = (seen + [read()])[-reads:]
        if len(seen) == reads and all(v == seen[0] for v in seen):
            return seen[0]
        time.sleep(interval_s)
    raise AssertionError(f"still changing after {timeout_s} s: {seen}")


def test_running_out_of_file_descriptors_is_not_a_pod_failure(tmp_path, gateway_factory):
    """With the gateway's file limit reached (EMFILE when it opens the upstream socket), the client gets 503 with
    retry-after, and once descriptors are available again the pod serves at once (it was not ejected)."""
    if sanitized(GATEWAY_BIN):
        # The sanitizer runtimes need descriptors themselves (UBSan's vptr check probes memory through a pipe): with
        # none left they report every type they had not cached as invalid and halt. The release build runs it.
        pytest.skip("a sanitizer build cannot run out of file descriptors cleanly")
    engine = FakeEngine(lambda body: answer("HTTP/1.1 200 OK", NORMAL, ["Connection: close"]))  # nothing pooled
    try:
        gw = gateway_factory([engine.entry()], config={
            "threads": 1, "health_check": {"interval_ms": 60000, "max_ejection_percent": 100},
            "engine_metrics": {"scrape_interval_ms": 60000}})
        served_normally(gw, "fake-0")
        pid = gw.proc.pid
        open_fds = lambda: sorted(int(f) for f in os.listdir(f"/proc/{pid}/fd"))  # noqa: E731
        client = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        wait_stable(open_fds)  # accepted, and the start-up checks' connections closed
        # A socket gets the lowest free descriptor: with the limit there, the next one the gateway opens fails (EMFILE).
        fds = open_fds()
        lowest_free = next(i for i in range(len(fds) + 1) if i not in fds)
        limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest_free, limits[1]))
        try:
            body = chat_body("no descriptor left")
            client.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
            raw = read_until(client, b"", lambda b: b"\r\n\r\n" in b and b.endswith(b"}"))
            assert raw, "no answer"
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
            client.close()
        head, payload = raw.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 503"), raw
        assert b"retry-after: 1" in head.lower()
        assert json.loads(payload)["error"]["code"] == 503
        assert len(engine.requests) == 1  # only the first, normal request reached the engine
        served_normally(gw, "fake-0")
    finally:
        engine.stop()


def chunked(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_stream_paced_by_the_engine_arrives_whole_then_a_stall_ends_it(tmp_path, gateway_factory):
    """The relay reads the engine's socket through net::ReadyReader (no per-read timer): events written with pauses
    longer than a read takes, split inside a chunk's size line and inside an event, and one larger than the relay's
    16 KiB buffer all reach the client, every byte in order; then a stall longer than upstream.idle_timeout_ms ends
    the stream with the documented SSE error event (the engine's own close comes much later), and the pod still
    serves. Fails if a readiness wait lost a wake-up (the stream would hang to the engine's close) or bytes."""
    events = [b'data: {"n":1}\n\n', b'data: {"n":2,"text":"split across writes"}\n\n',
              b"data: " + b"x" * (40 * 1024) + b"\n\n", b'data: {"n":4}\n\n']
    c2, c4 = chunked(events[1]), chunked(events[3])
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    idle_s, stall_s = 0.8, 6.0
    steps = [head + chunked(events[0]), 0.3, c2[:1], 0.1, c2[1:25], 0.1, c2[25:], 0.3,
             chunked(events[2]) + c4[:5], 0.2, c4[5:], stall_s]
    engine = FakeEngine(lambda body: steps if b"paced" in body else answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()], config={"upstream": {"idle_timeout_ms": int(idle_s * 1000)}})
        body = chat_body("paced", stream=True)
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        raw, last_event_at, ended_at = b"", None, None
        deadline = time.monotonic() + IO_TIMEOUT_S
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                ended_at = time.monotonic()  # the gateway closed after the error event
                break
            raw += data
            if b'{"n":4}' in raw and last_event_at is None:
                last_event_at = time.monotonic()
        sock.close()
        assert ended_at is not None, "the stream did not end"
        head_out, payload = raw.split(b"\r\n\r\n", 1)
        assert head_out.startswith(b"HTTP/1.1 200") and b"chunked" in head_out.lower()
        decoded, rest = b"", payload
        while rest:
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line, 16)
            if size == 0:
                break
            decoded, rest = decoded + rest[:size], rest[size + 2:]
        relayed = b"".join(events)
        assert decoded[:len(relayed)] == relayed  # every byte, in order
        error = json.loads(sse_events(decoded[len(relayed):])[-1])["error"]
        assert "response interrupted" in error["message"] and "timeout" in error["message"], error
        assert idle_s * 0.9 <= ended_at - last_event_at < stall_s - 1, ended_at - last_event_at
        served_normally(gw, "fake-0")
    finally:
        engine.stop()


def read_response(sock):
    """The raw bytes of one response read until the gateway closes the connection or IO_TIMEOUT_S passes."""
    raw, deadline = b"", time.monotonic() + IO_TIMEOUT_S
    while time.monotonic() < deadline:
        data = sock.recv(65536)
        if not data:
            break
        raw += data
    return raw


def client_chunks(payload):
    """The chunks of a chunked body, as the gateway framed them (up to the last chunk)."""
    chunks, rest = [], payload
    while rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            break
        chunks.append(rest[:size])
        rest = rest[size + 2:]
    return chunks


def test_events_read_together_are_written_together_and_a_bad_chunk_after_them_still_lets_them_through(
        tmp_path, gateway_factory):
    """Several SSE events that reach the gateway in one read go to the client in one write (one chunk of its
    framing): Beast's parser stops after each chunk, and the relay gathers what it already read before writing.
    The gathering stops at a partial chunk head (the rest comes later and the event arrives whole) and at a
    malformed chunk, whose error ends the stream only after the events before it were delivered."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    together = [b'data: {"n":%d}\n\n' % i for i in range(1, 4)]
    split = b'data: {"n":4,"text":"after a partial chunk head"}\n\n'
    tail = [b'data: {"n":5}\n\n', b'data: {"n":6}\n\n']
    c_split = chunked(split)
    steps = [head, 0.2, b"".join(chunked(e) for e in together) + c_split[:1], 0.3, c_split[1:], 0.3,
             b"".join(chunked(e) for e in tail) + b"zz\r\nnot a chunk\r\n", 2.0]
    engine = FakeEngine(lambda body: steps if b"gathered" in body else answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()])
        body = chat_body("gathered", stream=True)
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        raw = read_response(sock)
        sock.close()
        head_out, payload = raw.split(b"\r\n\r\n", 1)
        assert head_out.startswith(b"HTTP/1.1 200") and b"chunked" in head_out.lower(), raw[:300]
        chunks = client_chunks(payload)
        assert chunks[0] == b"".join(together), chunks  # three events read at once, one write
        assert chunks[1] == split, chunks
        assert chunks[2] == b"".join(tail), chunks      # delivered before the bad chunk's error
        error = json.loads(sse_events(b"".join(chunks[3:]))[-1])["error"]
        assert "response interrupted" in error["message"], error
        served_normally(gw, "fake-0")
    finally:
        engine.stop()


def test_an_engine_closing_right_after_its_last_bytes_ends_the_stream_at_once(tmp_path, gateway_factory):
    """The engine writes an event and half of the next and closes the connection in the same instant, so its FIN
    reaches the gateway with those bytes and the read that returns them also consumes the FIN: no later readiness
    edge will come. The gateway must still see the end at once (a cut stream: the events, then the SSE error event),
    long before upstream.idle_timeout_ms, and a close-delimited answer must end whole. Fails if a read after a short
    one waits for an edge without first trying the socket (nginx's short-read rule without EPOLLRDHUP, which asio
    does not register)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    event = b'data: {"n":1}\n\n'
    cut = head + chunked(event) + chunked(b'data: {"n":2,"text":"never finished"}\n\n')[:20]
    close_delimited = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + NORMAL

    def respond(body):
        return [cut] if b"cut" in body else [close_delimited]

    engine = FakeEngine(respond)
    engine.close_after_answer = True
    idle_s = 8.0
    try:
        gw = gateway_factory([engine.entry()], config={"upstream": {"idle_timeout_ms": int(idle_s * 1000)}})
        for _ in range(5):
            body = chat_body("cut", stream=True)
            sock = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
            started = time.monotonic()
            sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
            raw = read_response(sock)
            took = time.monotonic() - started
            sock.close()
            assert took < idle_s / 2, f"the stream's end was seen only after {took:.1f} s (idle timeout {idle_s} s)"
            chunks = client_chunks(raw.split(b"\r\n\r\n", 1)[1])
            assert b"".join(chunks).startswith(event), chunks
            error = json.loads(sse_events(b"".join(chunks))[-1])["error"]
            assert "response interrupted" in error["message"], error
            started = time.monotonic()
            status, _, answer_body = gw.call("POST", "/v1/chat/completions", chat_body("whole"))
            assert time.monotonic() - started < idle_s / 2
            assert status == 200 and json.loads(answer_body)["id"] == "ok", (status, answer_body[:300])
    finally:
        engine.stop()


TCP_INQ = 36  # linux/tcp.h: with it on, each read reports the bytes still queued (net/drained_reads.h)
SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture


def tcp_sockets_of(pid):
    """Copies of the TCP sockets process `pid` holds (pidfd_getfd: Linux 5.6+, run by its parent or root)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    copies = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    continue
            except OSError:
                continue  # closed meanwhile
            copy = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(fd), 0)
            if copy < 0:
                raise OSError(ctypes.get_errno(), f"pidfd_getfd of the gateway's fd {fd}")
            sock = socket.socket(fileno=copy)
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                copies.append(sock)
            else:
                sock.close()
    finally:
        os.close(pidfd)
    return copies


def test_the_gateways_client_and_engine_connections_report_their_queued_bytes(tmp_path, gateway_factory):
    """The gateway switches TCP_INQ on for the connections it accepts and opens, which is what lets a read that
    drained a socket make the next one wait for epoll instead of meeting EAGAIN (net/drained_reads.h; the unit tests
    check the reads themselves). Read from the gateway's own sockets: the kept-alive client connection and the pooled
    engine connection have it on; its listening sockets (one per event loop), which read nothing, have it off (the check can see both)."""
    engine = FakeEngine(lambda body: answer("HTTP/1.1 200 OK", NORMAL))
    try:
        gw = gateway_factory([engine.entry()])
        client = socket.create_connection(("127.0.0.1", gw.port), timeout=IO_TIMEOUT_S)
        body = chat_body("hello")
        client.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        head = read_until(client, b"", lambda b: b"\r\n\r\n" in b)
        assert head is not None and head.startswith(b"HTTP/1.1 200"), head
        sockets = tcp_sockets_of(gw.proc.pid)
        try:
            def peer(sock):
                try:
                    return sock.getpeername()[:2]
                except OSError:
                    return None  # a listening socket

            to_client = [s for s in sockets if peer(s) == client.getsockname()[:2]]
            to_engine = [s for s in sockets if peer(s) == ("127.0.0.1", engine.port)]
            listening = [s for s in sockets if peer(s) is None and s.getsockname()[1] == gw.port]
            assert len(to_client) == 1 and to_engine and listening, [peer(s) for s in sockets]
            assert to_client[0].getsockopt(socket.IPPROTO_TCP, TCP_INQ) == 1
            assert all(s.getsockopt(socket.IPPROTO_TCP, TCP_INQ) == 1 for s in to_engine)
            assert all(s.getsockopt(socket.IPPROTO_TCP, TCP_INQ) == 0 for s in listening)
        finally:
            for s in sockets:
                s.close()
        client.close()
        served_normally(gw, engine.name)
    finally:
        engine.stop()
