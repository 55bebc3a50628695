"""Fault injection with real processes under continuous load: every request either completes with the correct
content or gets a clean, documented error; nothing hangs; the gateway's file descriptors and memory come back."""
import http.client
import json
import os
import threading
import time

import pytest

from harness import Sim, read_chunks, request, sse_events, stream_content, wait_until, write_pods

CLIENT_TIMEOUT_S = 15
CLEAN_ERRORS = {429, 502, 503, 504}
PROMPTS = [f"fault prompt {i}: " + "lorem ipsum " * (10 + i) for i in range(4)]
FAST = {"upstream": {"response_header_timeout_ms": 1500, "idle_timeout_ms": 2000, "pool_idle_ms": 500,
                     "connect_timeout_ms": 500},
        "health_check": {"interval_ms": 200, "timeout_ms": 300, "eject_base_ms": 300, "eject_max_ms": 2000}}


def slow_sims(tmp_path, n, prefix="pod"):
    return [Sim(tmp_path, f"{prefix}-{i}", "--decode-ms-per-token", "8", time_scale="1") for i in range(n)]


def expected_contents(sim, max_tokens):
    """What a healthy engine answers for each prompt (the simulator is deterministic across pods)."""
    out = {}
    for p in PROMPTS:
        body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": p}], "max_tokens": max_tokens})
        status, _, raw = request("127.0.0.1", sim.port, "POST", "/v1/chat/completions", body)
        assert status == 200
        out[p] = json.loads(raw)["choices"][0]["message"]["content"]
    return out


class Load:
    """Worker threads sending streamed and non-streamed chats until stopped; every outcome is classified."""

    def __init__(self, gw, expected, max_tokens, workers=4):
        self.gw, self.expected, self.max_tokens = gw, expected, max_tokens
        self.outcomes, self.lock, self.stop_event = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(workers)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        for t in self.threads:
            t.join(CLIENT_TIMEOUT_S + 5)
        assert not any(t.is_alive() for t in self.threads), "a client thread hung"

    def run(self, worker):
        i = 0
        while not self.stop_event.is_set() and i < 2000:
            prompt = PROMPTS[(worker + i) % len(PROMPTS)]
            stream = (worker + i) % 2 == 0
            started = time.monotonic()
            pod = []
            try:
                kind, detail = self.one(prompt, stream, pod)
            except Exception as e:  # a client-side exception is a failure of the gateway to answer cleanly
                kind, detail = "bad", f"{type(e).__name__}: {e}"
            with self.lock:
                # (outcome, detail, seconds, streamed, the pod that served it (target-pod) or None, start time)
                self.outcomes.append((kind, detail, time.monotonic() - started, stream, pod[0] if pod else None,
                                      started))
            i += 1

    def one(self, prompt, stream, pod):
        body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": prompt}],
                           "max_tokens": self.max_tokens, "stream": stream})
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=CLIENT_TIMEOUT_S)
        try:
            conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            res = conn.getresponse()
            pod.append(res.getheader("target-pod"))
            if res.status != 200:
                raw = res.read()
                error = json.loads(raw).get("error", {})
                if res.status in CLEAN_ERRORS and error.get("message") and error.get("code") == res.status:
                    return "error", res.status
                return "bad", f"status {res.status}: {raw[:200]!r}"
            if not stream:
                content = json.loads(res.read())["choices"][0]["message"]["content"]
                return ("ok", 200) if content == self.expected[prompt] else ("bad", f"wrong content {content!r}")
            raw = b"".join(data for _, data in read_chunks(res))
            events = sse_events(raw)
            if events and events[-1] == "[DONE]":
                content = stream_content(raw)
                return ("ok", 200) if content == self.expected[prompt] else ("bad", f"wrong stream {content!r}")
            if events and "error" in json.loads(events[-1]):
                return "error", "sse-error-event"
            return "bad", f"stream ended without [DONE] or an error event: {raw[-200:]!r}"
        finally:
            conn.close()

    def summary(self):
        with self.lock:
            return list(self.outcomes)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def check(outcomes, min_ok):
    bad = [o for o in outcomes if o[0] == "bad"]
    assert not bad, bad[:5]
    assert sum(1 for o in outcomes if o[0] == "ok") >= min_ok, outcomes[-10:]
    assert max(o[2] for o in outcomes) < CLIENT_TIMEOUT_S


def settle(gw, baseline_fds):
    """After the load: pooled connections close (pool_idle_ms) and the fd count comes back to its baseline."""
    wait_until(lambda: all(p["in_flight"] == 0 for p in gw.debug_pods()), timeout=10, what="in-flight back to 0")
    wait_until(lambda: fds(gw.proc.pid) <= baseline_fds + 2, timeout=10,
               what=f"fds back to baseline {baseline_fds} (now {fds(gw.proc.pid)})")


@pytest.fixture
def rig(tmp_path, gateway_factory):
    """Three slow-ish engines (8 ms per token, real time) behind a gateway with short timeouts, warmed up."""
    sims = slow_sims(tmp_path, 3)
    gw = gateway_factory(sims, config=FAST)
    expected = {n: expected_contents(sims[0], n) for n in (20, 40)}
    with Load(gw, expected[40], 40) as warm:
        wait_until(lambda: len(warm.summary()) >= 40, timeout=30, what="warm-up traffic")
    settle(gw, fds(gw.proc.pid) + 100)
    yield sims, gw, expected, fds(gw.proc.pid), rss_kb(gw.proc.pid)
    for s in sims:
        s.stop()


def test_pod_killed_mid_stream(rig):
    """Killing a pod while streams run on it: those streams end with an SSE error event (not a hang), the rest
    complete correctly, and later requests avoid the dead pod."""
    sims, gw, expected, base_fds, base_rss = rig
    with Load(gw, expected[40], 40) as load:
        wait_until(lambda: len(load.summary()) >= 10, timeout=30, what="traffic")
        victim = busiest(sims, load.summary())
        victim.kill()
        wait_until(lambda: not pod_ready(gw, victim.name), timeout=10, what="the killed pod taken out")
        taken_out = time.monotonic()
        wait_until(lambda: sum(1 for o in load.summary() if o[5] > taken_out) >= 10, timeout=30,
                   what="traffic after the pod was taken out")
    check(load.summary(), 10)
    assert_avoided(load.summary(), victim.name, taken_out)
    settle(gw, base_fds)
    assert rss_kb(gw.proc.pid) < base_rss + 30_000


def test_pod_that_accepts_and_never_answers(rig):
    """A stalled pod: its requests get 504 within response_header_timeout_ms (or an SSE error when it stalls
    mid-stream), nothing hangs, the pod is ejected and the others carry the load."""
    sims, gw, expected, base_fds, _ = rig
    with Load(gw, expected[40], 40) as load:
        wait_until(lambda: len(load.summary()) >= 10, timeout=30, what="traffic")
        victim = busiest(sims, load.summary())
        victim.fault(stall=True)
        wait_until(lambda: not pod_ready(gw, victim.name), timeout=10, what="the stalled pod ejected")
        ejected = time.monotonic()
        wait_until(lambda: sum(1 for o in load.summary() if o[5] > ejected) >= 10, timeout=30,
                   what="traffic after the pod was ejected")
    outcomes = load.summary()
    check(outcomes, 10)
    # Its /health still passes, so only the passive ejection keeps requests away, with a back-off that grows: a
    # request now and then probes it when a back-off ends (a 504); every other one is served by the others.
    later = [o for o in outcomes if o[5] > ejected]
    probes = [o for o in later if o[0] != "ok"]
    assert all(o[1] == 504 for o in probes) and len(probes) <= max(2, len(later) // 5), probes
    assert_avoided([o for o in later if o[0] == "ok"], victim.name, ejected)
    victim.fault(stall=False)
    settle(gw, base_fds)


def busiest(sims, outcomes):
    """The pod that served the most requests so far: the one whose failure the load must feel."""
    return max(sims, key=lambda sim: sum(1 for o in outcomes if o[4] == sim.name))


def pod_ready(gw, name):
    return any(p["name"] == name and p["ready"] for p in gw.debug_pods())


def assert_avoided(outcomes, name, since):
    """Every request sent after `since` (the pod out of the candidates) was served by another pod, correctly."""
    later = [o for o in outcomes if o[5] > since]
    assert later and all(o[0] == "ok" and o[4] not in (None, name) for o in later), \
        [o for o in later if o[0] != "ok" or o[4] in (None, name)][:5]


def test_pod_returning_500s(rig):
    """A pod answering 500 to everything: requests are retried on another pod before any byte reached the client,
    so every request succeeds, and the failing pod is ejected with back-off."""
    sims, gw, expected, base_fds, _ = rig
    sims[0].fault(error_status=500)
    with Load(gw, expected[20], 20) as load:
        time.sleep(3)
    outcomes = load.summary()
    check(outcomes, 20)
    assert all(o[0] == "ok" for o in outcomes), [o for o in outcomes if o[0] != "ok"][:5]
    sims[0].fault(error_status=0)
    settle(gw, base_fds)


def test_pod_flapping_every_second(rig):
    """A pod that fails (500s and a failing /health) every other second: clients see only correct answers or
    clean errors, and nothing hangs."""
    sims, gw, expected, base_fds, _ = rig
    with Load(gw, expected[20], 20) as load:
        for i in range(6):
            down = i % 2 == 0
            sims[1].fault(error_status=500 if down else 0, health_status=503 if down else 200)
            time.sleep(1)
    sims[1].fault(error_status=0, health_status=200)
    check(load.summary(), 20)
    settle(gw, base_fds)


def test_pods_file_rewritten_every_two_seconds(rig):
    """The pods file alternating between two pod sets every 2 s under load: no request fails."""
    sims, gw, expected, base_fds, _ = rig
    with Load(gw, expected[20], 20) as load:
        for i in range(3):
            write_pods(gw.pods_file, [sims[0], sims[1]] if i % 2 == 0 else [sims[1], sims[2]])
            time.sleep(2)
    outcomes = load.summary()
    check(outcomes, 20)
    assert all(o[0] == "ok" for o in outcomes), [o for o in outcomes if o[0] != "ok"][:5]
    settle(gw, base_fds)


def test_admission_control_answers_429_with_retry_after(tmp_path, gateway_factory):
    """Beyond limits.max_in_flight_per_pod on every pod, the gateway answers 429 with retry-after instead of
    queueing without bound."""
    sims = slow_sims(tmp_path, 1)
    try:
        gw = gateway_factory(sims, config={"limits": {"max_in_flight_per_pod": 2}})
        results = []

        def one():
            results.append(gw.chat("hold the slot", max_tokens=150))

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = sorted(r[0] for r in results)
        assert statuses.count(200) >= 2 and 429 in statuses, statuses
        rejected = next(r for r in results if r[0] == 429)
        assert rejected[1]["retry-after"] == "1"
        assert "max_in_flight_per_pod" in json.loads(rejected[2])["error"]["message"]
    finally:
        for s in sims:
            s.stop()
