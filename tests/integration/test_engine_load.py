"""Live engine load through the real gateway and simulated engines: scraped /metrics on /debug/pods, KV-aware
strategies, measured capacity."""
import http.client
import json
import threading
from collections import Counter
from contextlib import contextmanager

from harness import Sim, wait_until

FAST_SCRAPE = {"engine_metrics": {"scrape_interval_ms": 50, "scrape_timeout_ms": 500}}


def engine_of(gw, name):
    """The pod's engine metrics (/debug/pods engine_metrics)."""
    return next(p["engine_metrics"] for p in gw.debug_pods() if p["name"] == name)


def pod_of(gw, name):
    return next(p for p in gw.debug_pods() if p["name"] == name)


def slow_sim(tmp_path, name, *extra):
    """A sim in real time with slow decoding (200 ms a token), so requests stay running for tens of seconds."""
    return Sim(tmp_path, name, "--decode-ms-per-token", "200", *extra, time_scale="1")


@contextmanager
def held_streams(port, count, content="hold", max_tokens=200):
    """Opens `count` streaming chat requests straight to an engine and keeps them running until the block ends;
    closing the connections cancels them in the engine."""
    conns = []
    try:
        for i in range(count):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            body = {"model": "sim-model", "stream": True, "max_tokens": max_tokens,
                    "messages": [{"role": "user", "content": f"{content} {i}"}]}
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            res = conn.getresponse()
            assert res.status == 200
            conns.append(conn)
        yield
    finally:
        for conn in conns:
            conn.close()


def test_debug_pods_shows_engine_metrics_that_move_under_load(tmp_path, gateway_factory):
    """/debug/pods shows each pod's scraped engine metrics (fresh, with cache_config_info), and `running` rises while
    requests run on that engine and falls back when they end."""
    busy, idle = slow_sim(tmp_path, "busy"), slow_sim(tmp_path, "idle")
    try:
        gw = gateway_factory([busy, idle], config=FAST_SCRAPE)
        first = wait_until(lambda: engine_of(gw, "busy")["scraped_ms_ago"] is not None and engine_of(gw, "busy"),
                           what="a first scrape")
        assert first["running"] == 0 and first["waiting"] == 0
        assert first["block_size"] == 16 and first["num_gpu_blocks"] == 400000 // 16
        assert first["kv_cache_usage"] == 0 and first["prefix_cache_queries"] == 0
        assert first["stale"] is False and first["scraped_ms_ago"] < 1000
        with held_streams(busy.port, 3):
            wait_until(lambda: engine_of(gw, "busy")["running"] == 3, what="running == 3 on the busy pod")
            loaded = engine_of(gw, "busy")
            assert loaded["kv_cache_usage"] > 0
            assert loaded["prefix_cache_queries"] > 0
            assert engine_of(gw, "idle")["running"] == 0
        wait_until(lambda: engine_of(gw, "busy")["running"] == 0, what="running back to 0")
    finally:
        busy.stop()
        idle.stop()


def test_pod_with_nearly_full_kv_cache_is_avoided(tmp_path, gateway_factory):
    """A pod whose engine reports its KV cache nearly full is excluded (load-balance and least-kv-cache never pick
    it, /debug/route marks it excluded), and least-kv-cache prefers the emptier of the remaining pods."""
    roomy = Sim(tmp_path, "roomy")
    full = slow_sim(tmp_path, "full", "--kv-capacity-tokens", "2048")
    half = slow_sim(tmp_path, "half", "--kv-capacity-tokens", "4096")
    long_prompt = "x" * 7200  # 1800 tokens + 150 output: ~123 of 128 blocks on "full", ~48 % of "half"
    try:
        gw = gateway_factory([roomy, full, half], config=FAST_SCRAPE)
        with held_streams(full.port, 1, long_prompt, 150), held_streams(half.port, 1, long_prompt, 150):
            wait_until(lambda: (engine_of(gw, "full")["kv_cache_usage"] or 0) > 0.9
                       and (engine_of(gw, "half")["kv_cache_usage"] or 0) > 0.4, what="high KV usage scraped")
            route = json.loads(gw.admin("POST", "/debug/route", json.dumps(
                {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}),
                {"routing-strategy": "load-balance"})[2])
            by_name = {p["name"]: p for p in route["pods"]}
            assert by_name["full"]["excluded"] is True and by_name["full"]["kv_cache_usage"] > 0.9
            assert by_name["roomy"]["excluded"] is False and route["pod"] != "full"
            seen = {"load-balance": Counter(), "least-kv-cache": Counter()}
            for strategy, counts in seen.items():
                for i in range(12):
                    status, headers, _ = gw.chat(f"question {i}", max_tokens=1,
                                                 headers={"routing-strategy": strategy})
                    assert status == 200
                    assert headers["routing-strategy"] == strategy
                    counts[headers["target-pod"]] += 1
            assert seen["load-balance"]["full"] == 0, seen
            assert seen["least-kv-cache"] == Counter({"roomy": 12}), seen
    finally:
        for s in (roomy, full, half):
            s.stop()


def test_capacity_is_measured_from_relayed_responses(sims, gateway_factory):
    """After traffic through the gateway, the pods it went to report a measured output rate above 0."""
    gw = gateway_factory(sims[:1], config=FAST_SCRAPE)
    assert engine_of(gw, "engine-0")["capacity_tokens_per_s"] == 0

    def measured():
        status, _, _ = gw.chat("count to twenty", max_tokens=20)
        assert status == 200
        return engine_of(gw, "engine-0")["capacity_tokens_per_s"] > 0

    wait_until(measured, timeout=15, interval=0.05, what="capacity_tokens_per_s > 0")


def test_load_balance_spreads_a_burst(sims, gateway_factory):
    """Concurrent requests under load-balance spread over every pod: in-flight requests count at the moment of
    choice, before any engine metric can move."""
    gw = gateway_factory(sims, config={"routing": {"strategy": "load-balance"}, **FAST_SCRAPE})
    pods, barrier = [], threading.Barrier(9)

    def one(i):
        barrier.wait()
        status, headers, _ = gw.chat(f"burst {i}", max_tokens=1000)
        assert status == 200
        pods.append(headers["target-pod"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = Counter(pods)
    assert len(pods) == 9 and set(counts) == {"engine-0", "engine-1", "engine-2"}, counts
    assert max(counts.values()) <= 4, counts  # 3 each unless a request ended before the last were routed


def test_a_pod_of_another_dialect_shows_an_error_within_one_scrape(tmp_path, gateway_factory):
    """A pod whose /metrics has none of its configured dialect's series (here a vLLM page on a pod declared
    sglang) is a failed scrape: /debug/pods says why and shows its load as unknown (null), never idle, and
    prefixgate_engine_scrape_errors_total{reason="unknown_series"} counts it; a pod declared right reads fine."""
    wrong, right = Sim(tmp_path, "wrong"), Sim(tmp_path, "right")
    try:
        pods = [{**wrong.pod_entry(), "engine": "sglang"}, {**right.pod_entry(), "engine": "vllm"}]
        gw = gateway_factory(pods, config=FAST_SCRAPE)
        failed = wait_until(lambda: (e := engine_of(gw, "wrong"))["scrape_errors"]["unknown_series"] > 0 and e,
                            what="the wrong pod's first failed scrape")
        pod = pod_of(gw, "wrong")
        assert pod["engine"] == "sglang" and pod["engine_source"] == "configured"
        assert "no sglang: series but vllm: ones" in failed["last_error"]
        assert "no sglang: series but vllm: ones" in pod["scrape_error"]
        assert failed["stale"] is True and failed["running"] is None and failed["waiting"] is None
        assert failed["known_series"] == 0
        ok = wait_until(lambda: (e := engine_of(gw, "right"))["scraped_ms_ago"] is not None and e, what="a scrape")
        assert pod_of(gw, "right")["engine"] == "vllm" and pod_of(gw, "right")["scrape_error"] is None
        assert ok["known_series"] > 0 and ok["running"] == 0
        assert sum(ok["scrape_errors"].values()) == 0
        assert gw.metric("prefixgate_engine_scrape_errors_total", pod="wrong", reason="unknown_series") >= 1
        assert gw.metric("prefixgate_engine_scrape_errors_total", pod="right") == 0
        # Logged once per failure streak, not per scrape.
        wait_until(lambda: engine_of(gw, "wrong")["scrape_errors"]["unknown_series"] >= 5, what="more failures")
        assert gw.read_log().count("engine metrics scrape failed") == 1
    finally:
        wrong.stop()
        right.stop()


class _NotAnEngine(threading.Thread):
    """An HTTP server that answers /health and a /metrics page of no known engine (a pod running something else)."""

    def __init__(self):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"process_cpu_seconds_total 1.5\n# TYPE up gauge\nup 1\n" if self.path == "/metrics" else b"{}"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(daemon=True)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def run(self):
        self.server.serve_forever()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_an_unrecognised_engine_is_an_error_not_an_idle_pod(tmp_path, gateway_factory):
    """With `engine: auto` (the default), a /metrics page naming no known engine leaves the dialect unknown and
    every scrape failed (unknown_series), while a vLLM pod beside it is recognised as vllm from its page."""
    other = _NotAnEngine()
    other.start()
    sim = Sim(tmp_path, "sim")
    try:
        pods = [{"name": "other", "address": f"127.0.0.1:{other.port}", "models": ["sim-model"]}, sim]
        gw = gateway_factory(pods, config=FAST_SCRAPE)
        failed = wait_until(lambda: (e := engine_of(gw, "other"))["scrape_errors"]["unknown_series"] > 0 and e,
                            what="a failed scrape of the unrecognised pod")
        assert pod_of(gw, "other")["engine"] == "auto" and pod_of(gw, "other")["engine_source"] == "unknown"
        assert "no series of a known engine" in failed["last_error"]
        assert failed["running"] is None and failed["stale"] is True
        recognised = wait_until(lambda: (p := pod_of(gw, "sim"))["engine"] == "vllm" and p, what="recognition")
        assert recognised["engine_source"] == "recognised"
        assert "engine recognised as vllm" in gw.read_log()
    finally:
        sim.stop()
        other.stop()


def test_sglang_and_llamacpp_pages_give_the_same_signals(tmp_path, gateway_factory):
    """Simulated pods speaking SGLang's and llama.cpp's formats (recognised from their pages, `engine: auto`) give
    the gateway their load as a vLLM pod's does: running rises under load on both; SGLang's KV usage and pool size
    (sglang:max_total_num_tokens) are read, llama.cpp's capacity comes from /props (slots x context)."""
    sglang = slow_sim(tmp_path, "sglang", "--engine-dialect", "sglang", "--kv-capacity-tokens", "64000")
    llama = slow_sim(tmp_path, "llama", "--engine-dialect", "llamacpp", "--kv-capacity-tokens", "64000",
                     "--max-num-seqs", "4")
    try:
        gw = gateway_factory([sglang, llama], config=FAST_SCRAPE)
        for name, dialect in (("sglang", "sglang"), ("llama", "llamacpp")):
            wait_until(lambda: pod_of(gw, name)["engine"] == dialect, what=f"{name} recognised as {dialect}")
        pods = {p["name"]: p for p in gw.debug_pods()}
        assert pods["sglang"]["kv_capacity_tokens"] == 64000
        assert pods["sglang"]["engine_metrics"]["kv_cache_usage"] == 0
        wait_until(lambda: engine_of(gw, "llama")["slots"] == 4, what="llama.cpp's slots from /props")
        assert {p["name"]: p for p in gw.debug_pods()}["llama"]["kv_capacity_tokens"] == 64000
        for sim in (sglang, llama):
            with held_streams(sim.port, 2):
                wait_until(lambda: engine_of(gw, sim.name)["running"] == 2, what=f"running == 2 on {sim.name}")
                if sim is sglang:
                    assert engine_of(gw, "sglang")["kv_cache_usage"] > 0
        assert gw.metric("prefixgate_engine_scrape_errors_total") == 0
    finally:
        sglang.stop()
        llama.stop()
