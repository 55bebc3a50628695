"""Replica state sync through a real Redis server: two or three gateway replicas in front of the same simulated pods
share their prefix records and in-flight counts (docs/state-sync.md). Each check fails if sharing broke: without
it, a prefix routed by one replica is unknown to the other (0 % match, a pod picked by load alone), and the
others' in-flight counts are 0."""
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import Gateway, RedisServer, Sim, wait_until, write_pods

PODS = 4


def sync_config(redis, **extra):
    return {"routing": {"strategy": "prefix-cache"},
            "state_sync": {"enabled": True, "redis": redis.url, **extra}}


def prompt(topic):
    """A prompt of many blocks whose head differs per topic (so topics land on different pods)."""
    return f"{topic}: " + " ".join(f"{topic}-{i} policy clause" for i in range(120))


def chat_body(content, max_tokens=4):
    return json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens})


def route(gw, content):
    status, _, raw = gw.admin("POST", "/debug/route", chat_body(content))
    assert status == 200, raw
    return json.loads(raw)


def send(gw, content, max_tokens=4):
    status, headers, raw = gw.call("POST", "/v1/chat/completions", chat_body(content, max_tokens))
    assert status == 200, raw
    return headers["target-pod"]


def replica(tmp_path, sims, redis, name, **extra):
    return Gateway(tmp_path, sims, config=sync_config(redis, **extra), name=name)


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def pods(tmp_path):
    started = [Sim(tmp_path, f"engine-{i}") for i in range(PODS)]
    yield started
    for s in started:
        s.stop()


@pytest.fixture
def replicas(tmp_path):
    made = []
    yield made
    for g in made:
        g.stop()


def follows_within(gw, content, pod, seconds):
    """Polls replica `gw`'s dry-run decision for `content` until it picks `pod` on a full match; returns the time that
    took, or None when it did not within `seconds`."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        d = route(gw, content)
        if d["pod"] == pod and (d["match_percent"] or 0) >= 90:
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def test_a_prefix_routed_by_one_replica_is_followed_by_another_within_half_a_second(tmp_path, redis, pods, replicas):
    a = replica(tmp_path, pods, redis, "replica-a")
    b = replica(tmp_path, pods, redis, "replica-b")
    replicas += [a, b]
    for topic in ["tax law", "sea shanties", "orbital mechanics", "sourdough"]:
        content = prompt(topic)
        before = route(b, content)
        assert (before["match_percent"] or 0) == 0, before  # B has not seen it: nothing to follow yet
        pod = send(a, content)
        took = follows_within(b, content, pod, 0.5)
        assert took is not None, f"replica B did not follow {topic!r} to {pod} within 500 ms"
    # The same records, counted on both sides; B's lag histogram saw them.
    wait_until(lambda: b.metric("prefixgate_state_sync_records_total", direction="received") >= 4, timeout=2,
               what="B counted the records it applied")
    # A counts a batch sent once Redis's reply reaches it, which on a loaded machine can come after B read the entry.
    wait_until(lambda: a.metric("prefixgate_state_sync_records_total", direction="sent") >= 4, timeout=2,
               what="A counted the records it sent")
    assert b.metric("prefixgate_state_sync_lag_seconds_count") >= 4
    assert b.metric("prefixgate_state_sync_connected") == 1
    # B's own requests are not sent back to A as new records of A's: A's received count stays what B sent.
    assert a.metric("prefixgate_state_sync_records_total", direction="received") == \
        b.metric("prefixgate_state_sync_records_total", direction="sent")


def test_in_flight_counts_add_up_across_replicas_and_a_dead_replica_stops_counting(tmp_path, redis, replicas):
    sims = [Sim(tmp_path, f"slow-{i}", "--decode-ms-per-token", "10", time_scale="1") for i in range(2)]
    try:
        # A routes to the first pod only; B to both, so B's choice shows whether it counts A's requests.
        a = replica(tmp_path, sims[:1], redis, "replica-a", load_interval_ms=50)
        b = replica(tmp_path, sims, redis, "replica-b", load_interval_ms=50)
        replicas += [a, b]
        a_id = json.loads(a.admin("GET", "/debug/pods")[2])["state_sync"]["replica_id"]
        def hold(i):
            try:
                a.chat(f"hold {i}", max_tokens=400)
            except OSError:
                pass  # A is killed below with these in flight

        threads = [threading.Thread(target=hold, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()

        # B's view: A's six requests on slow-0 (B has none in flight itself), learnt only through Redis.
        def b_sees_a():
            b_pods = {p["name"]: p for p in b.debug_pods()}
            return (b_pods["slow-0"]["in_flight"] == 0 and b_pods["slow-0"]["in_flight_all_replicas"] == 6 and
                    b_pods["slow-0"]["in_flight_by_replica"].get(a_id) == 6 and
                    b_pods["slow-1"]["in_flight_all_replicas"] == 0)
        wait_until(b_sees_a, timeout=3, what="B counts A's in-flight requests")
        # B routes by the sum: least-request sends B's own requests to the other pod, every time.
        for i in range(3):
            status, headers, _ = b.chat(f"fresh {i}", headers={"routing-strategy": "least-request"})
            assert status == 200 and headers["target-pod"] == "slow-1"
        # A dies with its requests in flight: its heartbeat expires (replica_ttl_ms 1500) and B stops counting them.
        a.kill()
        killed = time.monotonic()
        wait_until(lambda: all(p["in_flight_all_replicas"] == 0 for p in b.debug_pods()), timeout=2.5,
                   what="B drops the dead replica's counts")
        assert time.monotonic() - killed < 2.5
        for t in threads:
            t.join(timeout=15)
    finally:
        for s in sims:
            s.stop()


def test_redis_killed_and_restarted_under_load_fails_no_request_and_sync_resumes(tmp_path, redis, pods, replicas):
    a = replica(tmp_path, pods, redis, "replica-a", reconnect_max_ms=200)
    b = replica(tmp_path, pods, redis, "replica-b", reconnect_max_ms=200)
    replicas += [a, b]
    statuses = []
    stop = threading.Event()

    def load(gw, tag):
        for i in range(400):  # bounded; stopped by the test long before
            if stop.is_set():
                return
            status, _, _ = gw.chat(prompt(f"{tag} {i % 7}")[:600], max_tokens=2)
            statuses.append(status)

    workers = [threading.Thread(target=load, args=(g, t)) for g, t in ((a, "alpha"), (b, "beta"))]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: len(statuses) >= 20, timeout=20, what="load running")
        redis.kill()
        wait_until(lambda: a.metric("prefixgate_state_sync_connected") == 0, timeout=5, what="A sees redis gone")
        during = len(statuses)
        wait_until(lambda: len(statuses) >= during + 20, timeout=20, what="requests go on without redis")
        # Records routed meanwhile wait in A's outbox and reach B after the restart.
        missed = prompt("routed while redis was down")
        missed_pod = send(a, missed)
        redis.restart()
        wait_until(lambda: a.metric("prefixgate_state_sync_connected") == 1, timeout=10, what="A reconnects")
        assert follows_within(b, missed, missed_pod, 3) is not None, "the record made during the outage never arrived"
        fresh = prompt("after the restart")
        fresh_pod = send(a, fresh)
        assert follows_within(b, fresh, fresh_pod, 1) is not None
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=30)
    assert statuses and all(s == 200 for s in statuses), [s for s in statuses if s != 200][:5]
    assert a.metric("prefixgate_state_sync_reconnects_total") >= 1
    assert a.metric("prefixgate_state_sync_redis_errors_total") >= 1


def test_a_replica_started_late_catches_up_from_the_snapshot(tmp_path, redis, pods, replicas):
    a = replica(tmp_path, pods, redis, "replica-a", snapshot_interval_ms=100)
    replicas.append(a)
    topics = [f"topic {i}" for i in range(6)]
    routed = {t: send(a, prompt(t)) for t in topics}
    # Past the stream window the late replica reads (2 x snapshot interval + 1 s): only the snapshot has them now.
    time.sleep(1.5)
    late = replica(tmp_path, pods, redis, "replica-late", snapshot_interval_ms=100)
    replicas.append(late)
    ready = time.monotonic()
    for t in topics:
        remaining = max(0.0, 1.0 - (time.monotonic() - ready))
        assert follows_within(late, prompt(t), routed[t], remaining + 0.05) is not None, \
            f"the late replica did not know {t!r} within a second of starting"
    assert late.metric("prefixgate_state_sync_snapshot_loads_total") >= 1
    assert late.metric("prefixgate_state_sync_records_total", direction="received") >= len(topics)


def test_a_slow_redis_does_not_slow_requests(tmp_path, redis, pods, replicas):
    a = replica(tmp_path, pods, redis, "replica-a", timeout_ms=5000)
    replicas.append(a)
    send(a, "warm up")
    redis.sleep(3)  # DEBUG SLEEP 3: Redis answers nothing for three seconds
    started = time.monotonic()
    slowest = 0.0
    for i in range(10):
        t0 = time.monotonic()
        send(a, prompt(f"during the sleep {i}"))
        slowest = max(slowest, time.monotonic() - t0)
    # Requests routed during the sleep took well under the sleep (they would take ~3 s each if sync blocked them).
    assert time.monotonic() - started < 2.5, f"10 requests took {time.monotonic() - started:.2f} s during the sleep"
    assert slowest < 1.0
    wait_until(lambda: a.metric("prefixgate_state_sync_records_total", direction="sent") >= 10, timeout=10,
               what="the records sent once Redis answers again")


def test_with_kv_event_sync_only_in_flight_counts_go_through_redis(tmp_path, redis, replicas):
    sims = [Sim(tmp_path, f"kv-{i}", kv_events=True) for i in range(2)]
    try:
        config = sync_config(redis)
        config["routing"] = {"strategy": "prefix-cache", "prefix_cache": {"kv_event_sync": True}}
        a = Gateway(tmp_path, sims, config=config, name="kv-a")
        replicas.append(a)
        for i in range(5):
            send(a, prompt(f"kv {i}"))
        wait_until(lambda: redis.command("EXISTS", "prefixgate:replicas") == 1, timeout=3, what="heartbeat")
        status = json.loads(a.admin("GET", "/debug/pods")[2])["state_sync"]
        assert status["enabled"] and not status["shares_records"]
        assert a.metric("prefixgate_state_sync_records_total", direction="sent") == 0
        assert redis.command("EXISTS", "prefixgate:records") == 0
    finally:
        for s in sims:
            s.stop()


def session_config(redis, **extra):
    return {"routing": {"strategy": "session-affinity"},
            "state_sync": {"enabled": True, "redis": redis.url, "load_interval_ms": 50, **extra}}


def session_chat(gw, session, max_tokens=4):
    status, headers, raw = gw.chat(f"a turn of {session}", max_tokens=max_tokens, headers={"x-session-id": session})
    assert status == 200, raw
    return headers["target-pod"]


def session_route(gw, session):
    """The replica's dry-run decision for the session: (pod, selection), selection being session-affinity's
    outcome: pinned (it knows the session and its pod is a candidate), new or moved."""
    status, _, raw = gw.admin("POST", "/debug/route", chat_body(f"a turn of {session}"), {"x-session-id": session})
    assert status == 200, raw
    decision = json.loads(raw)
    return decision["pod"], decision.get("selection")


def hold(gw, session, count, max_tokens):
    """Starts `count` long requests of `session` through `gw` (on its pinned pod); returns their threads."""
    def run():
        try:
            session_chat(gw, session, max_tokens=max_tokens)
        except (OSError, AssertionError):
            pass  # the test may end first
    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    return threads


def slow_pods(tmp_path, n=4):
    return [Sim(tmp_path, f"slow-{i}", "--decode-ms-per-token", "10", time_scale="1") for i in range(n)]


def busiest_for(gw, pod, at_least):
    wait_until(lambda: next(p for p in gw.debug_pods() if p["name"] == pod)["in_flight_all_replicas"] >= at_least,
               timeout=3, what=f"{pod} counted busy through state sync")


def test_a_session_pinned_or_moved_by_one_replica_is_followed_by_another(tmp_path, redis, replicas):
    """Ensures a session pinned through replica A goes through replica B to the same pod though B sees that pod as the
    busiest of four (a session B did not know would go to an idle one: checked with a fresh session), and that B
    follows A's move of the session to another pod."""
    sims = slow_pods(tmp_path)
    threads = []
    try:
        a = Gateway(tmp_path, sims, config=session_config(redis), name="replica-a")
        b = Gateway(tmp_path, sims, config=session_config(redis), name="replica-b")
        replicas += [a, b]
        pinned = session_chat(a, "conversation-1")
        threads = hold(a, "conversation-1", 3, max_tokens=300)  # ~3 s each on the pinned pod, counted by B too
        busiest_for(b, pinned, 3)
        assert session_chat(b, "someone-else") != pinned  # B's own choice for a session it does not know
        assert session_chat(b, "conversation-1") == pinned
        assert a.metric("prefixgate_state_sync_sessions_total", direction="sent") >= 1
        assert b.metric("prefixgate_state_sync_sessions_total", direction="received") >= 1
        # Reusing the pin sent nothing more (A's three held requests and B's request were not changes).
        assert a.metric("prefixgate_state_sync_sessions_total", direction="sent") == 1
        # The pinned pod leaves A's pod set: A moves the session; B, which still routes to that pod, follows the move.
        write_pods(a.pods_file, [s for s in sims if s.name != pinned])
        wait_until(lambda: pinned not in {p["name"] for p in a.debug_pods()}, timeout=3, what="A drops the pod")
        moved = session_chat(a, "conversation-1")
        assert moved != pinned
        wait_until(lambda: session_route(b, "conversation-1") == (moved, "pinned"), timeout=2,
                   what=f"B follows the move to {moved}")
    finally:
        for t in threads:
            t.join(timeout=15)
        for s in sims:
            s.stop()


def test_a_replica_started_late_follows_an_earlier_session_from_the_snapshot(tmp_path, redis, replicas):
    """Ensures a replica started after a session was pinned (past the stream window it reads at start) learns the pin
    from the sessions snapshot and routes the session there, though it sees that pod as the busiest."""
    sims = slow_pods(tmp_path)
    threads = []
    try:
        a = Gateway(tmp_path, sims, config=session_config(redis, snapshot_interval_ms=100), name="replica-a")
        replicas.append(a)
        pinned = session_chat(a, "early-conversation")
        threads = hold(a, "early-conversation", 3, max_tokens=800)  # ~8 s: still running when the late one starts
        time.sleep(1.5)  # past the stream window a new replica reads (2 x snapshot interval + 1 s)
        assert redis.command("ZCARD", "prefixgate:sessions") == 1
        late = Gateway(tmp_path, sims, config=session_config(redis, snapshot_interval_ms=100), name="replica-late")
        replicas.append(late)
        busiest_for(late, pinned, 3)
        assert session_chat(late, "someone-else") != pinned
        assert session_chat(late, "early-conversation") == pinned
        assert late.metric("prefixgate_state_sync_snapshot_loads_total") >= 1
        assert late.metric("prefixgate_state_sync_sessions_total", direction="received") >= 1
    finally:
        for t in threads:
            t.join(timeout=15)
        for s in sims:
            s.stop()


def test_with_kv_event_sync_sessions_are_still_shared(tmp_path, redis, replicas):
    """Ensures session pins go through Redis in KV event mode too (where prefix records do not), so the stream reader
    runs there."""
    sims = [Sim(tmp_path, f"kv-{i}", kv_events=True) for i in range(2)]
    try:
        config = session_config(redis)
        config["routing"] = {"strategy": "session-affinity", "prefix_cache": {"kv_event_sync": True}}
        a = Gateway(tmp_path, sims, config=config, name="kv-a")
        b = Gateway(tmp_path, sims, config=config, name="kv-b")
        replicas += [a, b]
        assert session_route(b, "kv-conversation")[1] == "new"
        pinned = session_chat(a, "kv-conversation")
        wait_until(lambda: session_route(b, "kv-conversation") == (pinned, "pinned"), timeout=2,
                   what="B follows A's session")
        assert a.metric("prefixgate_state_sync_records_total", direction="sent") == 0
    finally:
        for s in sims:
            s.stop()


def test_a_hostile_load_entry_cannot_wrap_a_pods_count_past_max_in_flight_per_pod(tmp_path, redis, replicas):
    """A load entry that no replica wrote (anything can write Redis) is clamped: 2147483647 + 2 for one pod (issue 24:
    summed in 32 bits to -2147483647, it let 16 requests past max_in_flight_per_pod 4) leaves the pod's count
    non-negative and the bound holds; once the entry is gone the bound admits 4 requests again and refuses 12 more."""
    sim = Sim(tmp_path, "slow-0", "--decode-ms-per-token", "10", time_scale="1")
    try:
        config = sync_config(redis, load_interval_ms=50)
        config["limits"] = {"max_in_flight_per_pod": 4}
        gw = Gateway(tmp_path, [sim], config=config, name="replica-a")
        replicas.append(gw)
        address = sim.pod_entry()["address"]
        redis.command("SET", "prefixgate:load:hostile", f"{address} 2147483647\n{address} 2\n")
        redis.command("SADD", "prefixgate:replicas", "hostile")
        [pod] = wait_until(lambda: (lambda ps: ps if "hostile" in ps[0]["in_flight_by_replica"] else None)(gw.debug_pods()),
                           timeout=3, what="the hostile entry read")
        assert 0 <= pod["in_flight_all_replicas"] <= 1 << 20, pod
        assert pod["in_flight_by_replica"]["hostile"] == 1 << 20

        def burst(n):
            statuses = [None] * n

            def one(i):
                # 400 tokens at 10 ms: each admitted request holds its slot ~4 s, so all 16 arrive while the
                # first 4 run even on a loaded machine (with 1 s requests a slow thread start let a 5th in).
                statuses[i] = gw.chat(f"burst {i}", max_tokens=400)[0]

            threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            return statuses

        statuses = burst(16)
        assert statuses.count(200) == 0 and statuses.count(429) == 16, statuses
        redis.command("DEL", "prefixgate:load:hostile")
        wait_until(lambda: gw.debug_pods()[0]["in_flight_all_replicas"] == 0, timeout=3, what="the entry dropped")
        # The bound admits 4 again, then refuses the next 12. The 4 go one at a time, each counted before the next:
        # this test is about the hostile entry, not about concurrent decisions (the router takes a slot atomically,
        # routing::PodSignals::tryAddInFlight, tested in ticket_test.cpp).
        admitted = [None] * 4
        holders = []
        for i in range(4):
            def hold(i=i):
                admitted[i] = gw.chat(f"admitted {i}", max_tokens=400)[0]

            holders.append(threading.Thread(target=hold))
            holders[-1].start()
            wait_until(lambda: gw.debug_pods()[0]["in_flight"] == i + 1, timeout=5, what=f"request {i} in flight")
        statuses = burst(12)
        for t in holders:
            t.join(timeout=30)
        assert statuses.count(429) == 12, statuses
        assert admitted == [200] * 4, admitted
    finally:
        sim.stop()


def test_a_record_whose_request_failed_before_the_engine_computed_it_is_withdrawn_on_every_replica(
        tmp_path, redis, replicas):
    """Replica A routes a prompt to a pod that answers 500 (its engine never computed the prompt): A takes the record
    back from its own index and shares the withdrawal, so replica B, which had learnt the record, forgets it too.
    Without the shared withdrawal B keeps promising a full match on a pod that holds nothing."""
    sim = Sim(tmp_path, "failing")
    try:
        a = replica(tmp_path, [sim], redis, "replica-a")
        b = replica(tmp_path, [sim], redis, "replica-b")
        replicas += [a, b]
        content = prompt("withdrawn")
        # First a prompt that succeeds, so B's index holds records of this pod (the check below is not vacuous).
        send(a, prompt("kept"))
        assert follows_within(b, prompt("kept"), "failing", 2) is not None
        sim.fault(error_status=500)
        status, _, raw = a.call("POST", "/v1/chat/completions", chat_body(content))
        assert status == 500, raw
        wait_until(lambda: b.metric("prefixgate_state_sync_withdrawals_total", direction="received") >= 1,
                   timeout=3, what="B applied A's withdrawal")
        assert a.metric("prefixgate_state_sync_withdrawals_total", direction="sent") >= 1
        assert b.metric("prefixgate_state_sync_records_total", direction="received") >= 2  # the record came first
        assert (route(a, content)["match_percent"] or 0) == 0
        assert (route(b, content)["match_percent"] or 0) == 0
        # The withdrawal took only the failed record: the kept prompt still matches fully on both replicas.
        assert route(b, prompt("kept"))["match_percent"] >= 90
    finally:
        sim.stop()


def flow_replica(tmp_path, sim, redis, name):
    """A replica with flow control on: its one pod has room for one request at a time (all replicas' together)."""
    config = {"state_sync": {"enabled": True, "redis": redis.url},
              "flow_control": {"enabled": True, "max_in_flight_per_pod": 1}}
    return Gateway(tmp_path, [sim], config=config, name=name)


def flow_post(gw, request_id, tenant, max_tokens=2, content=None):
    body = json.dumps({"model": "sim-model", "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": content or f"question {request_id}"}]})
    return gw.call("POST", "/v1/chat/completions", body, {"x-request-id": request_id, "x-tenant-id": tenant})


def flow_tenants(gw):
    """Per tenant of the model's one class: (queued, counter)."""
    status, _, raw = gw.admin("GET", "/debug/queues")
    assert status == 200, raw
    model = json.loads(raw)["models"].get("sim-model", {"queued": 0, "classes": [{"tenants": []}]})
    return {t["tenant"]: (t["queued"], t["counter"]) for t in model["classes"][0]["tenants"]}, model["queued"]


def test_a_tenant_served_on_one_replica_waits_behind_another_on_the_next(tmp_path, redis, replicas):
    """Fair sharing across replicas (docs/flow-control.md, "Replicas"): while tenants a and b both wait on replica 2,
    a is served a lot on replica 1; replica 2 learns it through Redis and dispatches b's requests before a's. Without
    the sharing a's head, queued first, goes first (a0 b0 a1 b1). A text no replica wrote is dropped and counted."""
    # Each pod belongs to one replica, so that their rooms are apart. 10 ms a token: replica 2's hold takes ~9 s, and
    # what must happen meanwhile took 1.6 s in a release build (sanitizer builds are slower).
    sims = [Sim(tmp_path, f"slow-{i}", "--decode-ms-per-token", "10", time_scale="1") for i in range(2)]
    try:
        one = flow_replica(tmp_path, sims[0], redis, "replica-1")
        two = flow_replica(tmp_path, sims[1], redis, "replica-2")
        replicas += [one, two]

        def queue_up(pool, gw, request_id, tenant, content=None):
            before = flow_tenants(gw)[1]
            future = pool.submit(flow_post, gw, request_id, tenant, 2, content)
            wait_until(lambda: flow_tenants(gw)[1] == before + 1, timeout=10, what=f"{request_id} queued")
            return future

        def hold(pool, gw, max_tokens):
            future = pool.submit(flow_post, gw, "hold", "z", max_tokens)
            wait_until(lambda: gw.debug_pods()[0]["in_flight"] == 1, timeout=10, what="the pod busy")
            return future

        with ThreadPoolExecutor(12) as pool:
            futures = [hold(pool, two, 900)]
            futures += [queue_up(pool, two, request_id, request_id[0]) for request_id in ("a0", "a1", "b0", "b1")]
            # Replica 1: a's long prompts queue behind a short hold, then are served (and charged) one by one.
            futures.append(hold(pool, one, 100))
            long_prompt = " ".join(f"clause {i} of the agreement" for i in range(300))
            futures += [queue_up(pool, one, f"a-flood-{i}", "a", long_prompt) for i in range(4)]
            wait_until(lambda: flow_tenants(one)[1] == 0, timeout=10, what="replica 1 served a's flood")
            served = flow_tenants(one)[0]["a"][1]
            assert served > 1000, served

            # Replica 2 charges a what replica 1 served it (within a load interval or two), while both still wait.
            def a_charged():
                tenants, queued = flow_tenants(two)
                return queued == 4 and tenants["a"][1] >= tenants["b"][1] + served * 0.9
            wait_until(a_charged, timeout=5, what="replica 2 charged a's service on replica 1, with a and b queued")
            assert all(f.result(timeout=30)[0] == 200 for f in futures)
        order = [r["headers"].get("x-request-id") for r in sims[1].completions_seen()]
        assert order == ["hold", "b0", "b1", "a0", "a1"], order
        assert two.metric("prefixgate_state_sync_flow_service_charges_total") >= 1

        # A text that no replica wrote is dropped and counted; the replica goes on.
        redis.command("SET", "prefixgate:load:hostile", "")
        redis.command("SET", "prefixgate:flow:hostile", "PF1\nm\t0\tsim-model\nf\t0\tnan\tdefault\ta\n")
        redis.command("SADD", "prefixgate:replicas", "hostile")
        wait_until(lambda: two.metric("prefixgate_state_sync_flow_service_dropped_total", reason="malformed") >= 1,
                   timeout=3, what="the hostile text dropped")
        assert flow_post(two, "after", "a")[0] == 200
    finally:
        for s in sims:
            s.stop()


# ---- Responses API chain affinity through state sync (docs/state-sync.md, "Response ids") ----
# Self-contained: these helpers are used by the tests below only.

def responses_config(redis=None, **extra):
    """Random routing over four pods, so that a replica that did not learn an id picks its pod by chance only (the
    affinity counter tells the two apart); state sync on when `redis` is given."""
    config = {"routing": {"strategy": "random"}}
    if redis is not None:
        config["state_sync"] = {"enabled": True, "redis": redis.url, "load_interval_ms": 50, **extra}
    return config


def responses_body(text, **extra):
    return json.dumps({"model": "sim-model", "input": text, "max_output_tokens": 3, **extra})


def create_response(gw, text, **extra):
    status, headers, raw = gw.call("POST", "/v1/responses", responses_body(text, **extra))
    assert status == 200, raw
    return json.loads(raw)["id"], headers["target-pod"]


def response_affinity(gw, outcome):
    return gw.metric("prefixgate_response_affinity_total", outcome=outcome)


def responses_synced(gw, direction):
    return gw.metric("prefixgate_state_sync_responses_total", direction=direction)


def test_a_response_created_through_one_replica_is_continued_read_and_deleted_through_another(
        tmp_path, redis, pods, replicas):
    """Ensures a response id produced through replica A reaches replica B through Redis: B sends a continuation
    (previous_response_id) and a GET of the id to A's pod (counted as hits; a wrong pod would answer 404), A learns
    the id B's continuation produced, and a DELETE through B makes A forget the id (A then answers 404 itself,
    counted unknown)."""
    a = Gateway(tmp_path, pods, config=responses_config(redis), name="replica-a")
    b = Gateway(tmp_path, pods, config=responses_config(redis), name="replica-b")
    replicas += [a, b]
    rid, home = create_response(a, "the first turn")
    wait_until(lambda: responses_synced(b, "received") >= 1, timeout=3, what="B applied A's response id")
    status, headers, raw = b.call("POST", "/v1/responses", responses_body("the second turn", previous_response_id=rid))
    assert status == 200, raw
    assert headers["target-pod"] == home
    assert response_affinity(b, "hit") == 1 and response_affinity(b, "unknown") == 0
    next_id = json.loads(raw)["id"]
    status, headers, raw = b.call("GET", f"/v1/responses/{rid}")
    assert status == 200 and headers["target-pod"] == home and json.loads(raw)["id"] == rid, raw
    assert response_affinity(b, "hit") == 2
    # The id B's continuation produced comes back to A.
    wait_until(lambda: responses_synced(a, "received") >= 1, timeout=3, what="A applied B's response id")
    status, headers, _ = a.call("GET", f"/v1/responses/{next_id}")
    assert status == 200 and headers["target-pod"] == home
    # DELETE through B: the pod drops the response, and A forgets the id (not the pod's 404: the gateway's).
    status, headers, raw = b.call("DELETE", f"/v1/responses/{rid}")
    assert status == 200 and headers["target-pod"] == home, raw
    before = response_affinity(a, "unknown")
    wait_until(lambda: a.call("GET", f"/v1/responses/{rid}")[0] == 404 and response_affinity(a, "unknown") > before,
               timeout=3, what="A forgot the id B deleted")
    # Nothing echoed: each replica sent what it remembered or forgot itself, once.
    wait_until(lambda: responses_synced(a, "sent") == 1 and responses_synced(b, "sent") == 2, timeout=2,
               what="A counted rid sent, B next_id and the delete")
    assert responses_synced(a, "sent") == 1 and responses_synced(b, "received") == 1
    assert b.metric("prefixgate_state_sync_responses_dropped_total", reason="unknown_pod") == 0


def test_without_state_sync_another_replica_does_not_know_a_response_id(tmp_path, pods, replicas):
    """The control of the test above: without state sync replica B has never seen the id, so its continuation is
    routed by the strategy alone (counted unknown) and a GET of the id is answered 404 by B."""
    a = Gateway(tmp_path, pods, config=responses_config(), name="replica-a")
    b = Gateway(tmp_path, pods, config=responses_config(), name="replica-b")
    replicas += [a, b]
    rid, _ = create_response(a, "the first turn")
    b.call("POST", "/v1/responses", responses_body("the second turn", previous_response_id=rid))
    assert response_affinity(b, "unknown") == 1 and response_affinity(b, "hit") == 0
    status, _, raw = b.call("GET", f"/v1/responses/{rid}")
    assert status == 404 and "not found" in json.loads(raw)["error"]["message"]


def test_a_replica_started_late_learns_response_ids_from_the_snapshot(tmp_path, redis, pods, replicas):
    """Ensures a replica started after a response was produced (past the stream window it reads at start) loads the
    id from the responses snapshot and sends a GET of it to the pod that stores it."""
    a = Gateway(tmp_path, pods, config=responses_config(redis, snapshot_interval_ms=100), name="replica-a")
    replicas.append(a)
    rid, home = create_response(a, "an early response")
    wait_until(lambda: redis.command("ZCARD", "prefixgate:responses") == 1, timeout=3, what="the id in the snapshot")
    time.sleep(1.3)  # past the stream window a new replica reads (2 x snapshot interval + 1 s)
    late = Gateway(tmp_path, pods, config=responses_config(redis, snapshot_interval_ms=100), name="replica-late")
    replicas.append(late)
    wait_until(lambda: late.metric("prefixgate_state_sync_snapshot_loads_total") >= 1, timeout=3,
               what="the late replica loaded the snapshot")
    status, headers, raw = late.call("GET", f"/v1/responses/{rid}")
    assert status == 200 and headers["target-pod"] == home, raw
    assert response_affinity(late, "hit") == 1
    assert responses_synced(late, "received") >= 1


def test_hostile_response_entries_are_counted_and_change_nothing(tmp_path, redis, pods, replicas):
    """Ensures a response batch that no replica wrote (anything can write Redis) is counted malformed, and an id on
    a pod this replica does not route to is counted unknown_pod and not remembered; the replica goes on."""
    gw = Gateway(tmp_path, pods, config=responses_config(redis), name="replica-a")
    replicas.append(gw)

    def entry(op, rid, pod):
        def s(b):
            return bytes([len(b)]) + b
        return bytes([1, op]) + s(rid) + s(pod)  # wall_ms 1 (a varint), op, id, pod

    unknown_pod = b"PR\x01\x01" + entry(1, b"resp_elsewhere", b"10.9.9.9:1")
    bad_id = b"PR\x01\x01" + entry(1, b"resp/../x", pods[0].pod_entry()["address"].encode())
    redis.command("XADD", "prefixgate:records", "*", "r", "hostile", "a", unknown_pod)
    redis.command("XADD", "prefixgate:records", "*", "r", "hostile", "a", bad_id)
    redis.command("XADD", "prefixgate:records", "*", "r", "hostile", "a", b"PR\x01\x05")
    dropped = "prefixgate_state_sync_responses_dropped_total"
    wait_until(lambda: gw.metric(dropped, reason="malformed") == 2 and gw.metric(dropped, reason="unknown_pod") == 1,
               timeout=3, what="the hostile entries counted")
    assert responses_synced(gw, "received") == 0
    status, _, _ = gw.call("GET", "/v1/responses/resp_elsewhere")
    assert status == 404
    assert create_response(gw, "still serving")[0]
