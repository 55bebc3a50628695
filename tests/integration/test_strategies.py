"""The strategies that register themselves through the strategy seam, through the real gateway: chosen by the
`routing-strategy` header, with their settings read from `routing.strategies.<name>`."""
import json
from collections import Counter

from harness import Sim, wait_until


def test_power_of_two_spreads_over_the_pods(tmp_path, sims, gateway_factory):
    gw = gateway_factory(sims)
    seen = Counter()
    for i in range(30):
        status, headers, body = gw.chat(f"question {i}", headers={"routing-strategy": "power-of-two"})
        assert status == 200, body
        assert headers["routing-strategy"] == "power-of-two"
        seen[headers["target-pod"]] += 1
    assert len(seen) == 3, seen  # sequential requests: both drawn pods idle, either wins; every pod gets some


def test_least_latency_avoids_the_slow_pod_after_measuring_it(tmp_path, gateway_factory):
    """A pod whose engine takes ~300 ms to its first byte is tried (never measured counts as fastest), then avoided
    while the fast pod answers in milliseconds; the half-life comes from routing.strategies.least-latency."""
    fast = Sim(tmp_path, "fast")
    slow = Sim(tmp_path, "slow", "--step-overhead-ms", "300", time_scale="1")
    try:
        gw = gateway_factory([fast, slow], config={
            "routing": {"strategy": "least-latency", "strategies": {"least-latency": {"decay_half_life_ms": 600000}}}})
        seen = Counter()
        for i in range(12):
            status, headers, body = gw.chat(f"question {i}", max_tokens=2)
            assert status == 200, body
            assert headers["routing-strategy"] == "least-latency"
            seen[headers["target-pod"]] += 1
        assert seen["slow"] == 1 and seen["fast"] == 11, seen
        # /debug/route shows each pod's estimate (seconds) as its load_score.
        status, _, raw = gw.admin("POST", "/debug/route", json.dumps(
            {"model": "sim-model", "messages": [{"role": "user", "content": "x"}]}))
        estimates = {p["name"]: p["load_score"] for p in json.loads(raw)["pods"]}
        assert estimates["slow"] > 0.25 > estimates["fast"], estimates
    finally:
        fast.stop()
        slow.stop()


def test_session_affinity_keeps_a_conversation_on_its_pod_until_the_pod_leaves(tmp_path, sims, gateway_factory):
    gw = gateway_factory(sims, config={"routing": {"strategy": "session-affinity"}})

    def pod_of(session, i):
        status, headers, body = gw.chat(f"turn {i}", headers={"x-session-id": session})
        assert status == 200, body
        return headers["target-pod"]

    first = {pod_of("conversation-a", i) for i in range(8)}
    assert len(first) == 1, first  # every turn on one pod (ties between idle pods would otherwise spread them)
    pinned = first.pop()
    others = {pod_of(f"other-{i}", 0) for i in range(12)}
    assert len(others) > 1, others  # new sessions are not all pinned to one pod
    # The pinned pod fails its health checks: the conversation moves, and stays where it moved.
    next(s for s in sims if s.name == pinned).fault(health_status=503)

    wait_until(lambda: not next(p for p in gw.debug_pods() if p["name"] == pinned)["ready"], timeout=5,
               what="the pinned pod not ready")
    moved = {pod_of("conversation-a", 10 + i) for i in range(5)}
    assert len(moved) == 1 and pinned not in moved, (pinned, moved)
