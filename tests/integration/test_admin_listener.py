"""The admin listener hardened: an optional bearer token (auth.admin_token_file) with the probes left open, a
small body limit on /debug/route, deadlines that free a stalled connection, and a health listener serving only the
probes."""
import json
import os
import socket
import time
from pathlib import Path

from harness import Gateway, Sim, request, wait_until


def test_admin_token_guards_everything_but_the_probes_and_reloads(tmp_path):
    """With auth.admin_token_file, /metrics, /debug/* need the bearer token (401 otherwise) while /healthz and
    /readyz stay open; a rewritten token file takes effect without a restart."""
    sim = Sim(tmp_path, "engine-0")
    token_file = tmp_path / "admin-token"
    token_file.write_text("first-admin-token\n")  # a Secret's trailing newline is not part of the token
    gw = Gateway(tmp_path, [sim], config={"auth": {"admin_token_file": "admin-token", "file_poll_interval_ms": 100}})
    try:
        for method, path, body in (("GET", "/metrics", None), ("GET", "/debug/pods", None),
                                   ("POST", "/debug/route", json.dumps({"model": "sim-model", "messages": []}))):
            status, headers, res = gw.admin(method, path, body)
            assert status == 401, path
            assert json.loads(res)["error"]["type"] == "authentication_error"
            assert gw.admin(method, path, body, {"authorization": "Bearer wrong-token"})[0] == 401
        good = {"authorization": "Bearer first-admin-token"}
        assert gw.admin("GET", "/metrics", headers=good)[0] == 200
        assert gw.admin("GET", "/debug/pods", headers=good)[0] == 200
        assert gw.admin("GET", "/healthz")[0] == 200
        assert gw.admin("GET", "/readyz")[0] == 200

        tmp = Path(str(token_file) + ".tmp")
        tmp.write_text("second-admin-token")
        os.replace(tmp, token_file)
        wait_until(lambda: gw.admin("GET", "/metrics", headers={"authorization": "Bearer second-admin-token"})[0] == 200,
                   timeout=2.5, interval=0.1, what="the new admin token")
        assert gw.admin("GET", "/metrics", headers=good)[0] == 401
        # An emptied file is refused; the token in force stays.
        token_file.write_text("\n")
        wait_until(lambda: "admin token file ignored" in gw.read_log(), timeout=3, what="the empty token reported")
        assert gw.admin("GET", "/metrics", headers={"authorization": "Bearer second-admin-token"})[0] == 200
        assert "second-admin-token" not in gw.read_log()
    finally:
        gw.stop()
        sim.stop()


def test_debug_route_body_over_the_admin_limit_is_413(tmp_path):
    """/debug/route refuses a body over limits.admin_max_body_bytes with 413 (before parsing it) and still answers
    a normal one."""
    sim = Sim(tmp_path, "engine-0")
    gw = Gateway(tmp_path, [sim], config={"limits": {"admin_max_body_bytes": 65536}})
    try:
        big = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "x" * 70000}]})
        status, _, body = gw.admin("POST", "/debug/route", big)
        assert status == 413
        assert "limits.admin_max_body_bytes" in json.loads(body)["error"]["message"]
        small = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "x" * 1000}]})
        status, _, body = gw.admin("POST", "/debug/route", small)
        assert status == 200
        assert json.loads(body)["pod"] == "engine-0"
    finally:
        gw.stop()
        sim.stop()


def test_a_stalled_admin_client_is_cut_off_while_probes_keep_answering(tmp_path):
    """A client that sends half a request head (or half a body) and stops holds nothing: /healthz answers at once
    meanwhile, and the stalled connection is closed after limits.header_timeout_ms (here 500 ms)."""
    sim = Sim(tmp_path, "engine-0")
    gw = Gateway(tmp_path, [sim], config={"limits": {"header_timeout_ms": 500}})
    stalled = []
    try:
        for partial in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
                        b"POST /debug/route HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\""):
            s = socket.create_connection(("127.0.0.1", gw.admin_port), timeout=5)
            s.sendall(partial)
            stalled.append(s)
        start = time.monotonic()
        for _ in range(5):
            assert gw.admin("GET", "/healthz")[0] == 200
        assert time.monotonic() - start < 1.0
        for s in stalled:
            s.settimeout(5)
            begin = time.monotonic()
            data = b""
            while chunk := s.recv(4096):  # ends when the gateway closes the connection
                data += chunk
            assert time.monotonic() - begin < 3
            assert data == b"" or data.startswith(b"HTTP/1.1 408")
    finally:
        for s in stalled:
            s.close()
        gw.stop()
        sim.stop()


def test_health_listener_serves_only_the_probes(tmp_path):
    """health_listen opens a third listener that answers /healthz and /readyz (no token even with
    admin_token_file) and nothing else."""
    sim = Sim(tmp_path, "engine-0")
    (tmp_path / "admin-token").write_text("an-admin-token")
    gw = Gateway(tmp_path, [sim], listeners=3,
                 config={"health_listen": "127.0.0.1:0", "auth": {"admin_token_file": "admin-token"}})
    try:
        health_port = gw.ports[2]
        assert health_port not in (gw.port, gw.admin_port)
        assert request("127.0.0.1", health_port, "GET", "/healthz")[0] == 200
        assert request("127.0.0.1", health_port, "GET", "/readyz")[0] == 200
        for path in ("/metrics", "/debug/pods"):
            assert request("127.0.0.1", health_port, "GET", path)[0] == 404
            assert request("127.0.0.1", health_port, "GET", path,
                           headers={"authorization": "Bearer an-admin-token"})[0] == 404
        assert request("127.0.0.1", health_port, "POST", "/debug/route", "{}")[0] == 404
    finally:
        gw.stop()
        sim.stop()
