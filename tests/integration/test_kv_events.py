"""KV event sync end to end: simulated engines publishing their real cache changes over ZMQ, the gateway subscribing,
re-hashing and routing by them; and a Python publisher speaking vLLM's wire format without any simulator."""
import json
import socket
import threading
import time

import msgpack
import pytest
import zmq

from harness import Sim, request, wait_until
from prefix_helpers import KV_MODE, chat, route, send, words

STANDARD = {"routing": {"strategy": "prefix-cache"}}


def metric(gw, name, pod):
    for line in gw.metrics_text().splitlines():
        if line.startswith(f'{name}{{pod="{pod}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def kv_sims(tmp_path):
    made = []

    def make(count, *extra, time_scale="0.01"):
        for i in range(count):
            made.append(Sim(tmp_path, f"kv-engine-{len(made)}", "--kv-capacity-tokens", "2048", *extra,
                            kv_events=True, time_scale=time_scale))
        return made[-count:]

    yield make
    for s in made:
        s.stop()


def test_the_index_follows_engine_evictions_that_standard_mode_cannot_see(tmp_path, kv_sims, gateway_factory):
    """Ensures that once a pod's engine evicts a prefix (pushed out by prompts the gateway never routed), KV event
    mode stops predicting it there, while a standard-mode gateway over the same pods still predicts a full hit."""
    sims = kv_sims(2)
    kv = gateway_factory(sims, config=KV_MODE)
    standard = gateway_factory(sims, config=STANDARD)
    prompt = chat(words("pfx", 200))                      # ~250 tokens: 15 blocks of 16
    pod = send(kv, prompt)
    send(standard, prompt)                                # the standard gateway records it too (same pod or not)
    holder = next(s for s in sims if s.name == pod)
    wait_until(lambda: route(kv, prompt)[pod] >= 90, what="the engine's BlockStored events in the index")
    standard_pod = max(route(standard, prompt).items(), key=lambda kv_: kv_[1])[0]
    assert route(standard, prompt)[standard_pod] >= 90
    # Push the prefix out of `holder`'s 128-block cache with prompts sent to it directly.
    for i in range(10):
        status, _, _ = request("127.0.0.1", holder.port, "POST", "/v1/chat/completions",
                               json.dumps(chat(words(f"x{i}", 160))))
        assert status == 200
    wait_until(lambda: route(kv, prompt)[pod] == 0, what="BlockRemoved events taking the prefix out")
    assert metric(kv, "prefixgate_kv_events_blocks_removed_total", pod) > 0
    if standard_pod == pod:
        assert route(standard, prompt)[pod] >= 90         # standard mode still promises the evicted prefix


def test_a_restarted_gateway_converges_through_replay(tmp_path, kv_sims, gateway_factory):
    """Ensures a gateway started after the engines served traffic fetches their history through the replay sockets
    and routes by it at once, without any new request."""
    sims = kv_sims(3)
    first = gateway_factory(sims, config=KV_MODE)
    prompts = [chat(words(f"g{i}", 120)) for i in range(4)]
    served = [send(first, p) for p in prompts]
    wait_until(lambda: all(route(first, p)[pod] >= 90 for p, pod in zip(prompts, served)), what="events applied")
    first.stop()
    second = gateway_factory(sims, config=KV_MODE)
    wait_until(lambda: all(route(second, p)[pod] >= 90 for p, pod in zip(prompts, served)),
               what="the second gateway's view rebuilt through replay")
    assert sum(metric(second, "prefixgate_kv_events_replays_total", s.name) for s in sims) >= 1


def test_a_publisher_restart_forgets_the_pods_blocks(tmp_path, gateway_factory):
    """Ensures that when an engine restarts (empty cache, sequence numbers from 0 again) the gateway forgets what the
    old one held as soon as the new one publishes, and keeps routing without a failed request."""
    http_port, events_port, replay_port = free_ports(3)
    args = dict(kv_events=True, time_scale="0.01", port=http_port, kv_ports=(events_port, replay_port))
    sim = Sim(tmp_path, "restarting", **args)
    gw = gateway_factory([sim], config=KV_MODE)
    try:
        prompt = chat(words("r", 160))
        send(gw, prompt)
        for i in range(20):   # the old engine's history: its sequence numbers reach 20 and more
            send(gw, chat(words(f"h{i}", 40)))
        wait_until(lambda: route(gw, prompt)["restarting"] >= 90, what="events applied")
        sim.stop()
        sim = Sim(tmp_path, "restarting", **args)
        # The new engine publishes from sequence 0 as it caches what it serves; the first of its messages the
        # gateway's reconnected SUB socket receives is numbered below the old engine's last one: a restart.
        served = []

        def forgotten():
            status, _, _ = request("127.0.0.1", http_port, "POST", "/v1/chat/completions",
                                   json.dumps(chat(words(f"other{len(served)}", 40))))
            served.append(status)
            # The gateway may not have seen the restarted pod ready again yet (its health checks run on their own
            # timer, slower under a sanitizer): no decision then, which is not yet an answer.
            status, _, raw = gw.admin("POST", "/debug/route", json.dumps(prompt))
            if status == 503 and b"no ready pod" in raw:
                return False
            assert status == 200, raw
            return {p["name"]: p["match_percent"] for p in json.loads(raw)["pods"]}["restarting"] == 0

        wait_until(forgotten, interval=0.2, what="the old engine's blocks forgotten")
        assert set(served) == {200}
        assert metric(gw, "prefixgate_kv_events_publisher_restarts_total", "restarting") >= 1
        assert send(gw, prompt) == "restarting"
    finally:
        sim.stop()


def wait_subscribed(xpub, timeout_ms=5000):
    """Waits until a subscriber's subscription reached the XPUB socket: a message published before that is dropped
    (ZMQ's slow joiner), so tests wait for it instead of sleeping."""
    deadline = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < deadline:
        if xpub.poll(100) and xpub.recv()[:1] == b"\x01":
            return
    raise AssertionError(f"no subscriber joined within {timeout_ms} ms")


class VllmPublisher:
    """A stand-in for vLLM's ZmqEventPublisher written from its wire format: PUB [topic, seq, msgpack batch] and a
    ROUTER replay socket answering [empty, start] with [empty, seq, payload]... then [empty, -1, b""]."""

    def __init__(self, ctx):
        self.pub = ctx.socket(zmq.XPUB)   # a PUB that tells when a subscriber joins (wait_subscribed)
        self.pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.router = ctx.socket(zmq.ROUTER)
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.sent = {}
        self.replay_requests = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def wait_subscribed(self):
        wait_subscribed(self.pub)

    def publish(self, seq, events, send=True):
        payload = msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": 0})
        self.sent[seq] = payload
        if send:
            self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])

    def serve(self):
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            client, empty, start = self.router.recv_multipart()
            first = int.from_bytes(start, "big")
            self.replay_requests.append(first)
            for seq in sorted(self.sent):
                if seq >= first:
                    self.router.send_multipart([client, b"", seq.to_bytes(8, "big"), self.sent[seq]])
            self.router.send_multipart([client, b"", (-1).to_bytes(8, "big", signed=True), b""])

    def close(self):
        self.stop.set()
        self.thread.join(5)


def stored(hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None, "some_future_field": [1, 2]}


def test_a_vllm_publisher_is_followed_through_gaps_and_replay(tmp_path, gateway_factory):
    """Ensures vLLM-shaped map events from a publisher that is not the simulator (signed and binary hashes, an
    unknown field) drive the index: stored blocks match a request tokenized by the engine, a BlockRemoved given as a
    binary digest ends the match, and a lost message is fetched through the replay socket."""
    ctx = zmq.Context()
    publisher = VllmPublisher(ctx)
    sim = Sim(tmp_path, "http-only", time_scale="0.01")   # serves HTTP and /tokenize; its own events are not used
    try:
        entry = sim.pod_entry() | {"kv_events": f"tcp://127.0.0.1:{publisher.pub_port}",
                                   "kv_replay": f"tcp://127.0.0.1:{publisher.replay_port}"}
        gw = gateway_factory([entry], config=KV_MODE)
        prompt = chat(words("vllm", 100))
        status, _, raw = request("127.0.0.1", sim.port, "POST", "/tokenize", json.dumps(prompt))
        ids = json.loads(raw)["tokens"]
        blocks = [ids[i * 16:(i + 1) * 16] for i in range(len(ids) // 16)]
        publisher.wait_subscribed()   # the gateway's SUB socket joined
        # Signed engine hashes (two's complement), one event for all blocks but the last three.
        engine = [-(i + 1) for i in range(len(blocks))]
        publisher.publish(0, [stored(engine[:-3], None, sum(blocks[:-3], []))])
        wait_until(lambda: route(gw, prompt)["http-only"] > 0, what="BlockStored applied")
        partial = route(gw, prompt)["http-only"]
        # Message 1 (the last three blocks) is "lost": only the replay socket has it. Message 2 arrives live.
        publisher.publish(1, [stored(engine[-3:], engine[-4], sum(blocks[-3:], []))], send=False)
        digest = (2**64 - 2).to_bytes(8, "big").rjust(32, b"\x00")   # the binary form of engine hash -2
        publisher.publish(2, [{"type": "BlockRemoved", "block_hashes": [digest], "medium": "GPU"}])
        # The first request fetched the history when the gateway subscribed; the next one fills the gap.
        wait_until(lambda: 1 in publisher.replay_requests, what="a replay request from the lost message on")
        assert publisher.replay_requests[0] == 0
        # Replayed 1 adds the last blocks, then 2 removes block 1: the match ends after block 0.
        wait_until(lambda: 0 < route(gw, prompt)["http-only"] < partial, what="replay then removal applied")
        assert metric(gw, "prefixgate_kv_events_gaps_total", "http-only") == 1
        assert metric(gw, "prefixgate_kv_events_messages_total", "http-only") == 3
    finally:
        sim.stop()
        publisher.close()
        ctx.destroy(linger=0)


def test_a_silent_publisher_falls_back_to_the_gateways_own_records(tmp_path, gateway_factory):
    """Ensures a pod whose publisher never speaks while the pod completes requests is flagged silent and is matched on
    the gateway's own records (standard mode) rather than its empty event view."""
    ctx = zmq.Context()
    mute = ctx.socket(zmq.PUB)   # a publisher that is up but never publishes anything
    mute_port = mute.bind_to_random_port("tcp://127.0.0.1")
    sim = Sim(tmp_path, "mute", time_scale="0.01")
    try:
        entry = sim.pod_entry() | {"kv_events": f"tcp://127.0.0.1:{mute_port}"}
        # Silent after 1.5 s without events: room for a slow machine before the first check below.
        config = {"routing": {"strategy": "prefix-cache",
                              "prefix_cache": {"kv_event_sync": True, "speculative_ttl_ms": 0,
                                               "silent_publisher_ms": 1500}}}
        gw = gateway_factory([entry], config=config)
        prompt = chat(words("quiet", 100))
        send(gw, prompt)
        assert route(gw, prompt)["mute"] == 0          # no event: the event view is empty, nothing is promised
        pod = gw.debug_pods()[0]
        assert pod["kv_sync"]["subscribed"] and not pod["kv_sync"]["silent"]

        def silent():
            send(gw, prompt)                            # the pod keeps completing requests
            return gw.debug_pods()[0]["kv_sync"]["silent"]

        wait_until(silent, interval=0.1, what="the pod flagged silent")
        assert route(gw, prompt)["mute"] >= 90          # judged by what the gateway sent it
    finally:
        sim.stop()
        ctx.destroy(linger=0)


def test_a_burst_of_a_new_prompt_lands_together_before_any_event(tmp_path, kv_sims, gateway_factory):
    """Ensures a burst of one new long prompt, sent before the engines could publish its blocks, lands on one pod
    thanks to the speculative records of the first choice; without them (speculative_ttl_ms 0) the same burst is
    spread over the pods by load."""
    sims = kv_sims(4, time_scale="1")   # real time: a prompt's events come tens of ms after its routing

    def burst(gw, tag):
        body = json.dumps(chat(words(tag, 300), max_tokens=20))
        pods = []

        def one():
            status, headers, _ = gw.call("POST", "/v1/chat/completions", body)
            assert status == 200
            pods.append(headers["target-pod"])

        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return pods

    # One event loop: with two, the burst's first two decisions can fall in the same instant on both threads (their
    # /tokenize answers arrive together), each before the other's record, and the burst then shares two pods. That
    # race between event loops is a known limit (see the issue notes), not what this test is about.
    speculative = gateway_factory(sims, config={"threads": 1, "routing": {"strategy": "prefix-cache",
                                                                          "prefix_cache": {"kv_event_sync": True}}})
    assert len(set(burst(speculative, "burst-a"))) == 1
    events_only = gateway_factory(sims, config={**KV_MODE, "threads": 1})
    assert len(set(burst(events_only, "burst-b"))) >= 3


def consecutive_free_ports(count, pairs):
    """`pairs` runs of `count` consecutive free loopback ports (data-parallel ranks use port + rank)."""
    found = []
    for base in range(41000, 60000, 7):
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            found.append(base)
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
        if len(found) == pairs:
            return found
    raise RuntimeError("no free port runs")


def test_each_data_parallel_rank_is_subscribed_on_its_own_port(tmp_path, gateway_factory):
    """Ensures a pod with data_parallel_size 2 is subscribed on its kv_events port and the next one (vLLM's rank rule),
    and blocks published by rank 1 alone make the pod match."""
    events_base, replay_base = consecutive_free_ports(2, 2)
    ctx = zmq.Context()
    rank1 = ctx.socket(zmq.XPUB)
    rank1.bind(f"tcp://127.0.0.1:{events_base + 1}")
    router = ctx.socket(zmq.ROUTER)   # rank 1's replay socket: answers the history request with nothing
    router.bind(f"tcp://127.0.0.1:{replay_base + 1}")
    sim = Sim(tmp_path, "dp", time_scale="0.01")
    try:
        entry = sim.pod_entry() | {"kv_events": f"tcp://127.0.0.1:{events_base}",
                                   "kv_replay": f"tcp://127.0.0.1:{replay_base}", "data_parallel_size": 2}
        gw = gateway_factory([entry], config=KV_MODE)
        assert router.poll(5000), "rank 1's replay socket was not asked for its history"
        client, empty, start = router.recv_multipart()
        router.send_multipart([client, b"", (-1).to_bytes(8, "big", signed=True), b""])
        prompt = chat(words("rank", 100))
        status, _, raw = request("127.0.0.1", sim.port, "POST", "/tokenize", json.dumps(prompt))
        ids = json.loads(raw)["tokens"]
        blocks = len(ids) // 16
        wait_subscribed(rank1)
        payload = msgpack.packb([time.time(), [["BlockStored", list(range(1, blocks + 1)), None, ids[:blocks * 16],
                                                16, None, "GPU", None]], 1])
        rank1.send_multipart([b"", (0).to_bytes(8, "big"), payload])
        wait_until(lambda: route(gw, prompt)["dp"] >= 90, what="rank 1's blocks matched")
    finally:
        sim.stop()
        ctx.destroy(linger=0)
