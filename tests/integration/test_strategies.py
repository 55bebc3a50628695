"""The strategies that register themselves through the strategy seam, through the real gateway: chosen by the
`routing-strategy` header, with their settings read from `routing.strategies.<name>`."""
import json
import threading
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


def debug_route(gw, content, strategy=None):
    headers = {"routing-strategy": strategy} if strategy else None
    status, _, raw = gw.admin("POST", "/debug/route", json.dumps(
        {"model": "sim-model", "messages": [{"role": "user", "content": content}]}), headers)
    assert status == 200, raw
    return json.loads(raw)


def test_prefill_cost_follows_the_cache_and_counts_the_context_in_flight(tmp_path, gateway_factory):
    """prefill-cost: the pod holding the prompt costs least (nothing to compute), every other pod the whole prompt's
    blocks; while a request is in flight its prompt's engine tokens count against its pod (in_flight_tokens, and its
    cost rises by those tokens in blocks) until the response ends."""
    pods = [Sim(tmp_path, f"engine-{i}", time_scale="1") for i in range(3)]
    try:
        gw = gateway_factory(pods, config={"routing": {"strategy": "prefill-cost"}})
        prompt = " ".join(f"clause {i} of the shared contract text." for i in range(60))
        status, headers, body = gw.chat(prompt)
        assert status == 200, body
        assert headers["routing-strategy"] == "prefill-cost"
        holder = headers["target-pod"]
        # The response's context is released just after its last byte (the client may read it first).
        wait_until(lambda: all(p["in_flight"] == 0 for p in gw.debug_pods()), what="the first request's end counted")
        route = debug_route(gw, prompt + " What does clause 7 say?")
        assert route["pod"] == holder, route
        costs = {p["name"]: p["load_score"] for p in route["pods"]}
        assert costs[holder] < 1, costs  # at most the last partial block to compute
        for name, cost in costs.items():
            if name != holder:
                assert cost == 16 * route["blocks"], costs  # every block to compute (weight 16), nothing in flight
        prompt_tokens = debug_route(gw, prompt)["engine_tokens"]  # the context counts engine tokens

        done = threading.Event()
        threading.Thread(target=lambda: (gw.chat(prompt, max_tokens=400), done.set()), daemon=True).start()
        wait_until(lambda: next(p for p in gw.debug_pods() if p["name"] == holder)["in_flight"] == 1 or done.is_set(),
                   timeout=5, what="the long request in flight on the holder")
        assert not done.is_set(), "the request ended before it could be observed"
        busy = {p["name"]: p for p in debug_route(gw, prompt + " What does clause 7 say?")["pods"]}
        assert busy[holder]["in_flight_tokens"] == prompt_tokens, busy[holder]
        assert busy[holder]["load_score"] > costs[holder] + 0.9 * route["blocks"], busy[holder]
        assert done.wait(30)
        wait_until(lambda: debug_route(gw, prompt)["pods"] and all(
            p["in_flight_tokens"] == 0 for p in debug_route(gw, prompt)["pods"]), timeout=5,
            what="the context released at the end of the response")
    finally:
        for p in pods:
            p.stop()


def test_prefix_cache_preble_spreads_new_prompts_and_exploits_cached_ones(tmp_path, sims, gateway_factory):
    """prefix-cache-preble: new prompts go where the window load is lowest (three prompts, three pods: each pod's
    load then equal), and a prompt mostly cached on one pod goes there (exploit), through the real relay."""
    gw = gateway_factory(sims, config={"routing": {
        "strategy": "prefix-cache-preble", "strategies": {"prefix-cache-preble": {"decode_token_cost": 0}}}})
    prompts = [" ".join(f"{topic} fact number {i}." for i in range(40)) for topic in ("tides", "comets", "ferns")]
    holders = {}
    for prompt in prompts:
        status, headers, body = gw.chat(prompt)
        assert status == 200, body
        assert headers["routing-strategy"] == "prefix-cache-preble"
        holders[prompt] = headers["target-pod"]
    assert len(set(holders.values())) == 3, holders
    for prompt in prompts:
        route = debug_route(gw, prompt + " One more?")
        assert route["selection"] == "exploit" and route["pod"] == holders[prompt], route
        status, headers, body = gw.chat(prompt + " One more?")
        assert status == 200 and headers["target-pod"] == holders[prompt], (headers, body)


def test_prefix_cache_wait_learns_each_pods_prefill_rate_and_routes_by_estimated_wait(tmp_path, gateway_factory):
    """The wait scorer's rates are learned from the relayed streams (time to the first token against the tokens each
    pod had to compute): a pod whose engine prefills 10x slower is measured slower, /debug/route shows each
    candidate's estimated wait in parts that add up, and a new long prompt goes to the pod with the shorter wait.
    Every request is routed at random while learning: rates are learned whatever the strategy."""
    fast = Sim(tmp_path, "fast", "--prefill-tokens-per-s", "25000", time_scale="1")
    slow = Sim(tmp_path, "slow", "--prefill-tokens-per-s", "2500", time_scale="1")
    try:
        gw = gateway_factory([fast, slow], config={"routing": {"strategy": "random"}})
        seen = Counter()
        for i in range(40):  # prompts of 100 to 1,100 tokens (4 bytes each), one at a time
            prompt = f"sample {i} " + "word " * (80 + (i * 197) % 1000)
            status, headers, body = gw.chat(prompt, max_tokens=2, stream=True)
            assert status == 200, body
            seen[headers["target-pod"]] += 1
        assert min(seen.values()) >= 8, seen  # both pods have enough samples (min_samples 8)
        rates = {p["name"]: p["rates"] for p in gw.debug_pods()}
        assert rates["fast"]["samples"] == seen["fast"] and rates["slow"]["samples"] == seen["slow"], rates
        # The true ratio is 10; the fit must see most of it.
        assert rates["slow"]["prefill_tokens_per_s"] * 4 < rates["fast"]["prefill_tokens_per_s"], rates
        assert rates["fast"]["prefill_requests"] == 0 == rates["slow"]["prefill_requests"], rates

        long_prompt = "an entirely new question " + "token " * 1500
        status, _, raw = gw.admin("POST", "/debug/route", json.dumps(
            {"model": "sim-model", "messages": [{"role": "user", "content": long_prompt}]}),
            headers={"routing-strategy": "prefix-cache-wait"})
        assert status == 200, raw
        route = json.loads(raw)
        assert route["strategy"] == "prefix-cache-wait" and route["pod"] == "fast", route
        waits = {p["name"]: p["wait"] for p in route["pods"]}
        for name, w in waits.items():
            parts = w["base_ms"] + w["prefill_ms"] + w["queue_ms"] + w["decode_ms"]
            assert abs(parts - w["total_ms"]) < 1e-6 * max(1, w["total_ms"]), w
        assert waits["slow"]["prefill_ms"] > 4 * waits["fast"]["prefill_ms"], waits
        # The strategy routes a real request the same way.
        status, headers, body = gw.chat(long_prompt, max_tokens=2, headers={"routing-strategy": "prefix-cache-wait"})
        assert status == 200 and headers["target-pod"] == "fast", (headers, body)
    finally:
        fast.stop()
        slow.stop()


def test_prefix_cache_wait_stays_on_the_warm_pod_until_its_queue_outweighs_the_saving(tmp_path, gateway_factory):
    """prefix-cache-wait: a follow-up of a long prompt goes back to the pod holding it (its wait has only the new
    tokens' prefill); while that pod has a long prompt of another client still prefilling (its queue), the follow-up
    goes to an idle pod instead, and the queue is released at the engine's first byte."""
    pods = [Sim(tmp_path, f"engine-{i}", "--prefill-tokens-per-s", "2500", time_scale="1") for i in range(2)]
    try:
        # New work's balance off: the long prompt below is mostly new, and must follow its prefix to the holder.
        gw = gateway_factory(pods, config={"routing": {
            "strategy": "prefix-cache-wait", "strategies": {"prefix-cache-wait": {"rebalance_ratio": 0}}}})
        prompt = " ".join(f"clause {i} of the shared contract text." for i in range(40))
        status, headers, body = gw.chat(prompt, max_tokens=2)
        assert status == 200 and headers["routing-strategy"] == "prefix-cache-wait", (headers, body)
        holder = headers["target-pod"]
        other = next(p.name for p in pods if p.name != holder)
        route = debug_route(gw, prompt + " What does clause 7 say?")
        assert route["pod"] == holder, route
        waits = {p["name"]: p["wait"] for p in route["pods"]}
        assert waits[holder]["prefill_ms"] < waits[other]["prefill_ms"] / 4, waits

        # A long prompt extending the same prefix (about 4 s of prefill at 2,500 tokens/s) follows it to the holder,
        # where it stays queued until its first byte.
        done = threading.Event()
        big = prompt + " " + "unrelated material " * 2000
        threading.Thread(target=lambda: (gw.chat(big, max_tokens=2), done.set()), daemon=True).start()
        wait_until(lambda: next(p for p in gw.debug_pods() if p["name"] == holder)["rates"]["prefill_requests"] == 1
                   or done.is_set(), timeout=5, what="the long prompt queued on the holder")
        assert not done.is_set(), "the long prompt ended before it could be observed"
        route = debug_route(gw, prompt + " What does clause 7 say?")
        waits = {p["name"]: p["wait"] for p in route["pods"]}
        assert waits[holder]["queue_ms"] > 0 == waits[other]["queue_ms"], waits
        assert route["pod"] == other, route  # the queue costs more than prefilling the follow-up on the idle pod
        assert done.wait(30)
        wait_until(lambda: all(p["rates"]["prefill_requests"] == 0 for p in gw.debug_pods()), timeout=5,
                   what="the queue released at the first byte")
        assert debug_route(gw, prompt + " What does clause 7 say?")["pod"] == holder
    finally:
        for p in pods:
            p.stop()
