"""The gateway's background requests to pods (engine metrics scrapes, health checks) on connections kept alive
between rounds (net::KeptConnection), against an engine stand-in that counts its connections and can close them in
each way a real server does: after every answer (Connection: close), when idle, or as a request arrives."""
import socketserver
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from harness import wait_until

METRICS = ('vllm:num_requests_running{model_name="m"} 0\n'
           'vllm:num_requests_waiting{model_name="m"} 0\n'
           'vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n').encode()
FAST = {"engine_metrics": {"scrape_interval_ms": 40, "scrape_timeout_ms": 1000},
        "health_check": {"interval_ms": 80, "timeout_ms": 1000}}


class Engine:
    """A vLLM-like pod serving /metrics and /health over HTTP/1.1. `mode`: keep (keeps connections open), close
    (answers with Connection: close and closes), idle (closes a connection idle for 15 ms: the next round finds it
    closed), drop (closes a reused connection when its second request arrives, without answering)."""

    def __init__(self, mode):
        self.mode = mode
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = {"/metrics": 0, "/health": 0}
        self.dropped = 0
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 0.015 if mode == "idle" else 30

            def setup(self):
                super().setup()
                self.served = 0
                with engine.lock:
                    engine.connections += 1

            def do_GET(self):
                if engine.mode == "drop" and self.served == 1:
                    with engine.lock:
                        engine.dropped += 1
                    self.close_connection = True
                    return
                self.served += 1
                body = METRICS if self.path == "/metrics" else b"ok"
                with engine.lock:
                    engine.requests[self.path] = engine.requests.get(self.path, 0) + 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                if engine.mode == "close":
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

            def log_error(self, *args):  # the idle mode's timeouts
                pass

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def entry(self):
        return {"name": f"engine-{self.mode}", "address": f"127.0.0.1:{self.port}", "models": ["m"], "engine": "vllm"}

    def counts(self):
        with self.lock:
            return self.connections, dict(self.requests), self.dropped

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine_of():
    made = []

    def make(mode):
        made.append(Engine(mode))
        return made[-1]

    yield make
    for e in made:
        e.stop()


def rounds(engine, metrics, health):
    """Waits until the engine has answered `metrics` scrapes and `health` checks; its counts then."""
    wait_until(lambda: engine.counts()[1]["/metrics"] >= metrics and engine.counts()[1]["/health"] >= health,
               timeout=20, what=f"{metrics} scrapes and {health} health checks")
    return engine.counts()


def assert_pod_read_cleanly(gw, engine):
    """Every scrape read, the pod ready and its load fresh: the server's closes cost nothing visible."""
    assert gw.metric("prefixgate_engine_scrape_errors_total") == 0
    pod = next(p for p in gw.debug_pods() if p["name"] == engine.entry()["name"])
    assert pod["ready"] is True
    assert pod["engine_metrics"]["stale"] is False and pod["engine_metrics"]["kv_cache_usage"] == 0.25


def test_scrapes_and_health_checks_reuse_their_connections(gateway_factory, engine_of):
    """Against a server that keeps connections open, 30 scrapes and 10 health checks take a handful of connections
    (one per task, and the first health check's), not one each."""
    engine = engine_of("keep")
    gw = gateway_factory([engine.entry()], config=FAST)
    connections, requests, _ = rounds(engine, 30, 10)
    assert connections <= 4, (connections, requests)
    assert_pod_read_cleanly(gw, engine)


@pytest.mark.parametrize("mode", ["close", "idle", "drop"])
def test_a_server_closing_its_connections_costs_no_round(gateway_factory, engine_of, mode):
    """A server that closes after every answer (Connection: close), closes idle connections (seen before reuse:
    a fresh connection, no failed round), or closes a reused connection as the request arrives (tried once more on a
    fresh one: a GET is idempotent): every scrape and health check still succeeds."""
    engine = engine_of(mode)
    gw = gateway_factory([engine.entry()], config=FAST)
    connections, requests, dropped = rounds(engine, 20, 8)
    assert_pod_read_cleanly(gw, engine)
    served = requests["/metrics"] + requests["/health"]
    if mode == "close":
        assert connections >= served - 2, (connections, requests)
    if mode == "drop":
        assert dropped >= 5, dropped
