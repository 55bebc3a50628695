"""The gateway core through real processes: streaming relay, headers, errors, metrics, discovery, failures."""
import http.client
import json
import signal
import socket
import subprocess
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import GATEWAY_BIN, Gateway, Sim, read_chunks, request, settled, sse_events, stream_content, wait_until, write_pods


def test_stream_arrives_event_by_event_with_the_same_content_as_direct(tmp_path):
    """A streamed completion is relayed chunk by chunk (not buffered) and its content equals the engine's own."""
    sim = Sim(tmp_path, "slow", "--decode-ms-per-token", "30", time_scale="1")
    gw = Gateway(tmp_path, [sim])
    try:
        body = json.dumps({"model": "sim-model", "stream": True, "max_tokens": 12,
                           "messages": [{"role": "user", "content": "tell me a story about routers"}]})
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        assert res.status == 200
        assert res.getheader("content-type").startswith("text/event-stream")
        chunks = read_chunks(res)
        conn.close()
        raw = b"".join(data for _, data in chunks)
        arrivals = [t for t, data in chunks if b"data: " in data]
        # 12 tokens 30 ms apart: relayed one by one, the events arrive spread over >= ~300 ms.
        assert len(arrivals) >= 12
        assert arrivals[-2] - arrivals[0] > 0.2
        _, _, direct = request("127.0.0.1", sim.port, "POST", "/v1/chat/completions", body)
        assert stream_content(raw) == stream_content(direct)
        assert stream_content(raw) != ""
    finally:
        gw.stop()
        sim.stop()


def test_non_streamed_response_is_identical_to_direct(sims, gateway_factory):
    """A non-streamed completion's body passes through unchanged, with the gateway's headers added."""
    gw = gateway_factory(sims[:1])
    body = json.dumps({"model": "sim-model", "prompt": "the same prompt", "max_tokens": 6})
    status, headers, via = gw.call("POST", "/v1/completions", body)
    assert status == 200
    _, _, direct = request("127.0.0.1", sims[0].port, "POST", "/v1/completions", body)
    a, b = json.loads(via), json.loads(direct)
    assert a["choices"] == b["choices"]
    assert headers["target-pod"] == "engine-0"
    assert headers["routing-strategy"] == "least-request"
    assert len(headers["request-id"]) == 32


def test_headers_end_to_end_pass_and_hop_by_hop_do_not(sims, gateway_factory):
    """authorization and custom headers reach the engine; hop-by-hop ones (and those named by Connection) do not;
    a client's x-request-id is kept."""
    gw = gateway_factory(sims[:1])
    sock = socket.create_connection(("127.0.0.1", gw.port))
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer sk-test\r\n"
                  f"X-Custom: yes\r\nX-Private: secret\r\nConnection: keep-alive, X-Private\r\nTE: trailers\r\n"
                  f"Keep-Alive: timeout=5\r\nX-Request-Id: my-id-123\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    sock.close()
    head = raw.split(b"\r\n\r\n")[0].decode().lower()
    assert "request-id: my-id-123" in head
    seen = sims[0].completions_seen()[-1]["headers"]
    assert seen["authorization"] == "Bearer sk-test"
    assert seen["x-custom"] == "yes"
    assert seen["x-request-id"] == "my-id-123"
    for hop in ("x-private", "te", "keep-alive"):
        assert hop not in seen, hop
    assert seen["host"] == f"127.0.0.1:{sims[0].port}"


def test_a_clients_request_id_is_kept_up_to_128_printable_bytes_else_a_new_one_is_made(sims, gateway_factory):
    """The request id (kept in place, no allocation): a printable x-request-id of up to 128 bytes is the request's
    id, to the client and the engine; a longer one, or one with a space, is replaced by 32 new hex digits."""
    gw = gateway_factory(sims[:1])
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    longest = "r" * 127 + "~"
    made = set()
    for given, kept in ((longest, True), ("r" * 129, False), ("has space", False), ("", False)):
        status, headers, _ = gw.call("POST", "/v1/chat/completions", body, {"x-request-id": given} if given else {})
        assert status == 200
        seen = sims[0].completions_seen()[-1]["headers"]["x-request-id"]
        assert headers["request-id"] == seen
        if kept:
            assert seen == given
        else:
            assert len(seen) == 32 and all(c in "0123456789abcdef" for c in seen), seen
            made.add(seen)
    assert len(made) == 3  # each request its own


@pytest.mark.parametrize("case", [
    ("POST", "/v1/chat/completions", '{"model": "sim-model", "messages": [', {}, 400, "not valid JSON", None),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}]}', {}, 400, "'model' is required", "model"),
    ("POST", "/v1/chat/completions", '{"model": 7, "messages": []}', {}, 400, "'model' must be a string", "model"),
    ("POST", "/v1/chat/completions", '{"model": "sim-model", "messages": "hi"}', {}, 400, "'messages' must be an array", "messages"),
    ("POST", "/v1/completions", '{"model": "sim-model", "prompt": {"a": 1}}', {}, 400, "'prompt' must be", "prompt"),
    ("POST", "/v1/chat/completions", '{"model": "no-such-model", "messages": [{"content": "x"}]}', {}, 404, "no-such-model", None),
    ("POST", "/v1/chat/completions", '{"model": "sim-model", "messages": [{"content": "x"}]}', {"routing-strategy": "fastest"},
     400, "unknown routing strategy 'fastest'", None),
    ("POST", "/v1/chat/completions", json.dumps({"model": "sim-model", "messages": [{"content": "x" * 5000}]}), {}, 413,
     "larger than limits.max_body_bytes", None),
    ("GET", "/v1/chat/completions", None, {}, 405, "method not allowed", None),
    ("GET", "/v2/nothing", None, {}, 404, "unknown path", None),
    ("POST", "/v1/chat/completions", '{"model": "sim-model", "messages": [{"content": "x"}]}', {"X-Big": "y" * 3000}, 431,
     "request header is larger", None),
], ids=["malformed-json", "missing-model", "model-type", "messages-type", "prompt-type", "unknown-model",
        "unknown-strategy", "body-too-large", "wrong-method", "unknown-path", "header-too-large"])
def test_bad_input_gets_a_clear_openai_error_and_never_reaches_an_engine(sims, gateway_factory, case):
    """Each kind of bad input gets its status and an OpenAI-shaped message; no engine sees it."""
    method, path, body, headers, status, words, param = case
    gw = gateway_factory(sims[:1], config={"limits": {"max_body_bytes": 4096, "max_header_bytes": 2048}})
    got_status, got_headers, got = gw.call(method, path, body, headers)
    assert got_status == status, got
    error = json.loads(got)["error"]
    assert words in error["message"], error
    assert error["code"] == status
    assert error["param"] == param
    assert isinstance(error["type"], str) and error["type"]
    assert sims[0].completions_seen() == []


def test_models_lists_the_union_of_ready_pods(tmp_path):
    """/v1/models is the union of the models of ready pods, in OpenAI's list shape."""
    a = Sim(tmp_path, "a", model="alpha")
    b = Sim(tmp_path, "b", model="beta")
    gw = Gateway(tmp_path, [a, b, {"name": "down", "address": "127.0.0.1:9", "models": ["gamma"]}])
    try:
        wait_until(lambda: len(json.loads(gw.call("GET", "/v1/models")[2])["data"]) == 2, what="two models")
        listed = json.loads(gw.call("GET", "/v1/models")[2])
        assert listed["object"] == "list"
        assert sorted(m["id"] for m in listed["data"]) == ["alpha", "beta"]
        assert json.loads(gw.chat("x", model="beta")[2])["model"] == "beta"
    finally:
        gw.stop()
        a.stop()
        b.stop()


def test_least_request_spreads_concurrent_requests(sims, gateway_factory):
    """Concurrent requests spread over every pod (in-flight is counted at the moment of choice)."""
    gw = gateway_factory(sims)
    results = []
    barrier = threading.Barrier(12)

    def one():
        barrier.wait()  # all 12 in flight together (each takes ~90 ms of simulated decode)
        results.append(gw.chat("same prompt every time", max_tokens=400)[1]["target-pod"])

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(results)) == ["engine-0", "engine-1", "engine-2"]
    assert max(results.count(p) for p in set(results)) <= 6
    # The count is released just after the last byte is written, so the client may see the answer first.
    wait_until(lambda: all(p["in_flight"] == 0 for p in gw.debug_pods()), timeout=5, what="in-flight back to 0")


def test_metrics_parse_as_prometheus_text(sims, gateway_factory):
    """/metrics is valid Prometheus text with the gateway's request counters by model, pod and status."""
    gw = gateway_factory(sims[:1])
    assert gw.chat("hello")[0] == 200
    gw.chat("hello", model="nope")
    def scrape():
        families = {f.name: f for f in text_string_to_metric_families(gw.metrics_text())}
        counts = {(s.labels["model"], s.labels["pod"], s.labels["status"]): s.value
                  for s in families["prefixgate_requests"].samples if s.name == "prefixgate_requests_total"}
        return (families, counts) if sum(counts.values()) == 2 else None

    # A request is counted just after its last byte went out: the client may read /metrics first.
    families, counts = wait_until(scrape, timeout=3, what="both requests counted")
    assert counts[("sim-model", "engine-0", "200")] == 1
    assert counts[("unknown", "", "404")] == 1  # a model no pod serves is never a label of its own
    assert "prefixgate_request_duration_seconds" in families
    ready = {s.labels["pod"]: s.value for s in families["prefixgate_pod_ready"].samples}
    assert ready == {"engine-0": 1.0}


def test_pods_file_change_takes_effect_mid_traffic_without_failures(sims, gateway_factory):
    """Rewriting the pods file adds and removes pods within 2 s while traffic flows, and no request fails."""
    gw = gateway_factory(sims[:2])
    stop = threading.Event()
    statuses, served = [], []

    def traffic():
        while not stop.is_set() and len(statuses) < 5000:
            status, headers, _ = gw.chat("traffic", max_tokens=2)
            statuses.append(status)
            served.append((time.monotonic(), headers.get("target-pod")))
            time.sleep(0.01)

    workers = [threading.Thread(target=traffic) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: len(statuses) > 20, what="traffic to start")
        write_pods(gw.pods_file, [sims[1], sims[2]])  # engine-0 leaves, engine-2 joins
        changed = time.monotonic()
        wait_until(lambda: any(t > changed and p == "engine-2" for t, p in served), timeout=5, what="engine-2 in use")
        wait_until(lambda: served[-1][0] > changed + 2.5, timeout=10, what="traffic 2.5 s after the change")
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert statuses and all(s == 200 for s in statuses), [s for s in statuses if s != 200]
    late = [p for t, p in served if t > changed + 2.0]
    assert late and "engine-0" not in late
    assert {p["name"] for p in gw.debug_pods()} == {"engine-1", "engine-2"}


def test_killed_pod_is_routed_around(sims, gateway_factory):
    """After a pod dies, requests keep succeeding on the others (connect failure -> another pod at once)."""
    gw = gateway_factory(sims)
    for _ in range(6):
        assert gw.chat("warm")[0] == 200
    sims[1].kill()
    statuses = [gw.chat("after the kill")[0] for _ in range(30)]
    assert statuses == [200] * 30
    wait_until(lambda: not {p["name"]: p for p in gw.debug_pods()}["engine-1"]["ready"], what="engine-1 not ready")
    pods = [gw.chat("later")[1]["target-pod"] for _ in range(10)]
    assert "engine-1" not in pods


def test_sigterm_drains_an_open_stream_to_completion(tmp_path):
    """On SIGTERM /readyz fails at once, new connections are refused, and an open stream still completes."""
    sim = Sim(tmp_path, "slow", "--decode-ms-per-token", "20", time_scale="1")
    gw = Gateway(tmp_path, [sim])
    try:
        body = json.dumps({"model": "sim-model", "stream": True, "max_tokens": 60,
                           "messages": [{"role": "user", "content": "a long answer please"}]})
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        assert res.status == 200
        gw.signal(signal.SIGTERM)
        wait_until(lambda: gw.admin("GET", "/readyz")[0] == 503, timeout=2, what="/readyz to fail")

        def refused():
            # The listeners close on their own event loops just after /readyz starts failing.
            try:
                socket.create_connection(("127.0.0.1", gw.port), timeout=2).close()
                return False
            except ConnectionRefusedError:
                return True

        wait_until(refused, timeout=3, what="new connections to be refused")
        rest = res.read()
        conn.close()
        events = sse_events(rest)
        assert events[-1] == "[DONE]"
        assert len([e for e in events if e != "[DONE]"]) >= 50
        assert gw.proc.wait(15) == 0
        assert "drained" in gw.read_log()
    finally:
        gw.stop()
        sim.stop()


def test_client_disconnect_stops_the_engine(tmp_path):
    """A client that goes away mid-stream makes the gateway close the upstream, so the engine stops generating."""
    sim = Sim(tmp_path, "slow", "--decode-ms-per-token", "20", time_scale="1")
    gw = Gateway(tmp_path, [sim])
    try:
        body = json.dumps({"model": "sim-model", "stream": True, "max_tokens": 500,
                           "messages": [{"role": "user", "content": "go on forever"}]})
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        res.fp.readline()
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        seen = wait_until(lambda: [r for r in sim.completions_seen() if r["cancelled"]], timeout=5,
                          what="the engine to see the cancel")
        assert not seen[0]["completed"]
        wait_until(lambda: gw.debug_pods()[0]["in_flight"] == 0, timeout=5, what="in-flight back to 0")
    finally:
        gw.stop()
        sim.stop()


def test_pooled_connection_closed_by_the_engine_is_never_written_into(tmp_path):
    """When the engine has closed a pooled keep-alive connection, the gateway sees it before reuse and opens a fresh
    one: no request is written into the dead connection, none is retried, and the close is counted apart
    (prefixgate_upstream_stale_connections_total{stage="detected"}), not as a retry or an engine failure."""
    sim = Sim(tmp_path, "a", "--keep-alive-timeout-ms", "300")
    gw = Gateway(tmp_path, [sim], config={"upstream": {"pool_idle_ms": 60000}, "threads": 1})
    try:
        assert gw.chat("first")[0] == 200
        time.sleep(0.6)  # the engine closes the idle connection; the gateway still pools it
        assert gw.chat("second")[0] == 200
        assert gw.chat("third")[0] == 200
        assert settled(lambda: gw.metric("prefixgate_upstream_stale_connections_total", stage="detected")) >= 1
        assert gw.metric("prefixgate_upstream_stale_connections_total", stage="sent") == 0
        assert gw.metric("prefixgate_retries_total") == 0
        assert gw.metric("prefixgate_upstream_errors_total") == 0
        assert len(sim.completions_seen()) == 3  # each request reached the engine once
    finally:
        gw.stop()
        sim.stop()


def test_check_validates_config_and_pods_file(tmp_path):
    """--check exits 0 for a valid configuration, else 1 with one line per problem naming file and key."""
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods:\n  - {name: a, address: 127.0.0.1:1, models: [m]}\n")
    good = tmp_path / "good.yaml"
    good.write_text("discovery: {file: pods.yaml}\nrouting: {strategy: random}\n")
    run = subprocess.run([GATEWAY_BIN, "--config", str(good), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("discovery: {file: pods.yaml}\nrouting: {strategy: fastest, prefix_cache: {block_size: x}}\n"
                   "limits: {max_bodybytes: 1}\n")
    run = subprocess.run([GATEWAY_BIN, "--config", str(bad), "--check"], capture_output=True, text=True)
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert any("bad.yaml: routing.prefix_cache.block_size: expected a whole number" in l for l in lines)
    assert any("bad.yaml: limits.max_bodybytes: unknown key" in l for l in lines)
    pods.write_text("pods:\n  - {name: a, address: nowhere, models: [m]}\n")
    run = subprocess.run([GATEWAY_BIN, "--config", str(good), "--check"], capture_output=True, text=True)
    assert run.returncode == 1
    assert "pods.yaml: pods[0].address: expected HOST:PORT, got 'nowhere'" in run.stderr
    env_run = subprocess.run([GATEWAY_BIN, "--config", str(good), "--check"], capture_output=True, text=True,
                             env={"AIBRIX_PREFIX_CACHE_BLOCK_SIZE": "big"})
    assert env_run.returncode == 1
    assert "AIBRIX_PREFIX_CACHE_BLOCK_SIZE (routing.prefix_cache.block_size): 'big'" in env_run.stderr


def test_help_and_version():
    """--help explains the flags and the environment variables; --version prints the version."""
    out = subprocess.run([GATEWAY_BIN, "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for words in ("--config", "--check", "--listen", "--admin-listen", "--threads", "--log-level",
                  "AIBRIX_PREFIX_CACHE_BLOCK_SIZE", "ROUTING_ALGORITHM"):
        assert words in out.stdout
    version = subprocess.run([GATEWAY_BIN, "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("prefixgate ")


def test_engine_that_never_answers_gets_504_and_others_keep_serving(sims, gateway_factory):
    """A pod that accepts and never answers yields a clean 504 after response_header_timeout_ms, is then ejected,
    and the other pod keeps serving; in-flight counts return to 0."""
    gw = gateway_factory(sims[:2], config={"upstream": {"response_header_timeout_ms": 300},
                                           "health_check": {"eject_base_ms": 5000}})
    sims[0].fault(stall=True)
    statuses = []
    for _ in range(20):  # least-request picks at random between idle pods: go until one hits the stalled pod
        started = time.monotonic()
        status, headers, body = gw.chat("hello")
        statuses.append(status)
        if status == 504:
            assert 0.25 < time.monotonic() - started < 5
            assert json.loads(body)["error"]["code"] == 504
            assert headers["request-id"]
            break
        assert status == 200 and headers["target-pod"] == "engine-1"
    assert statuses[-1] == 504
    after = [gw.chat("hello") for _ in range(5)]
    assert all(s == 200 and h["target-pod"] == "engine-1" for s, h, _ in after)
    wait_until(lambda: all(p["in_flight"] == 0 for p in gw.debug_pods()), timeout=5, what="in-flight back to 0")


def test_engine_errors_pass_through_unchanged(sims, gateway_factory):
    """With no other pod to retry on, an engine's own error response (here a 500) reaches the client as the engine
    sent it, with the gateway's headers added."""
    gw = gateway_factory(sims[:1])
    sims[0].fault(error_status=500)
    status, headers, body = gw.chat("hello")
    assert status == 500
    assert headers["target-pod"] == "engine-0"
    assert "error" in json.loads(body)


def test_pod_addressed_by_host_name(sims, gateway_factory):
    """A pod given by host name (as Kubernetes services are) is resolved, health-checked and proxied to."""
    entry = {"name": "by-name", "address": f"localhost:{sims[0].port}", "models": ["sim-model"]}
    gw = gateway_factory([entry])
    status, headers, _ = gw.chat("hello")
    assert status == 200 and headers["target-pod"] == "by-name"


def test_expect_100_continue(sims, gateway_factory):
    """A client that sends `Expect: 100-continue` (curl does for bodies over 1 KiB) gets `100 Continue` before it
    sends the body, and then the response; the engine never sees the Expect header."""
    gw = gateway_factory(sims[:1])
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "x" * 2000}], "max_tokens": 2})
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                  f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n").encode())
    interim = sock.recv(4096)
    assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
    sock.sendall(body.encode())
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    sock.close()
    assert raw.startswith(b"HTTP/1.1 200")
    assert "expect" not in sims[0].completions_seen()[-1]["headers"]


def test_streamed_response_ends_once_and_the_connection_is_reused(tmp_path, gateway_factory):
    """A relayed chunked stream ends with exactly one last chunk, so the same keep-alive connection serves the
    next request (a second `0\\r\\n\\r\\n` would corrupt it). An engine with no delays sends its last event and
    its end of body together: the case that once ended the response twice."""
    sim = Sim(tmp_path, "instant", time_scale="0")
    gw = gateway_factory([sim])
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    body = json.dumps({"model": "sim-model", "stream": True, "prompt": "hi", "max_tokens": 3})
    for _ in range(3):
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        raw = res.read()
        assert res.status == 200 and sse_events(raw)[-1] == "[DONE]"
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        data += sock.recv(65536)
    sock.settimeout(0.3)
    try:
        data += sock.recv(100)
    except socket.timeout:
        pass
    sock.close()
    sim.stop()
    assert data.count(b"0\r\n\r\n") == 1, data[-40:]  # nothing may follow the last chunk
