"""The engine simulator's KV cache events, read by a real ZMQ subscriber and decoded with msgpack: vLLM's framing
([topic, 8-byte big-endian sequence, payload]), both encodings, BlockStored for prompt and output blocks with the
token ids the engine hashed, BlockRemoved on eviction, AllBlocksCleared on reset, and replay through the ROUTER
socket."""
import json
import subprocess
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from harness import SIM_BIN, check_sanitizer_reports, request

BLOCK = 16


class EventSim:
    """A simulator publishing KV events on free loopback ports; reads its "kv events on" lines."""

    def __init__(self, tmp_path, *extra):
        self.log_path = Path(tmp_path) / "sim.log"
        self.log = open(self.log_path, "wb")
        args = [SIM_BIN, "--port", "0", "--time-scale", "0", "--log-level", "warn",
                "--kv-events", "tcp://127.0.0.1:0", "--kv-replay", "tcp://127.0.0.1:0", *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        self.endpoints = {}
        while True:
            line = self.proc.stdout.readline().decode()
            assert line, "the simulator exited before listening"
            if line.startswith("kv "):
                kind, _, endpoint = line.strip().rpartition(" ")
                self.endpoints[kind] = endpoint
            if line.startswith("listening on"):
                self.port = int(line.strip().rsplit(":", 1)[1])
                break
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def post(self, path, body):
        status, _, data = request("127.0.0.1", self.port, "POST", path, json.dumps(body))
        return status, json.loads(data) if data else None

    def complete(self, prompt_tokens, max_tokens):
        """A completion with the given token ids as its prompt."""
        status, body = self.post("/v1/completions", {"model": "sim-model", "prompt": prompt_tokens,
                                                     "max_tokens": max_tokens})
        assert status == 200, body
        return body

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
        check_sanitizer_reports(self.log_path.read_text(errors="replace"), self.log_path)


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def subscribe(ctx, endpoint):
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    time.sleep(0.3)   # a SUB socket only receives what is published after it has joined
    return sub


def receive(sub, until, timeout_s=10):
    """(sequence, decoded batch) messages until `until(messages)` holds."""
    messages, deadline = [], time.monotonic() + timeout_s
    while not until(messages):
        assert time.monotonic() < deadline, f"timed out; got {messages}"
        if sub.poll(100):
            topic, seq, payload = sub.recv_multipart()
            assert topic == b"" and len(seq) == 8
            messages.append((int.from_bytes(seq, "big"), msgpack.unpackb(payload)))
    return messages


def events_of(messages):
    return [event for _, batch in messages for event in (batch[1] if isinstance(batch, list) else batch["events"])]


def test_prompt_and_output_blocks_are_stored_with_their_tokens_in_sequence(tmp_path, zctx):
    """Ensures every message is framed as vLLM's, sequences count from 0 by one, and BlockStored carries block
    hashes chained by parent with exactly the token ids of the stored blocks, output blocks included."""
    sim = EventSim(tmp_path)
    try:
        sub = subscribe(zctx, sim.endpoints["kv events on"])
        prompt = list(range(1000, 1040))          # 40 tokens: two full prompt blocks
        sim.complete(prompt, 30)                   # 70 tokens, 69 computed: four full blocks in all
        messages = receive(sub, lambda m: sum(len(e[1]) for e in events_of(m)) >= 4)
        assert [seq for seq, _ in messages] == list(range(len(messages)))
        ts, _, rank = messages[0][1]
        assert isinstance(ts, float) and rank == 0
        stored = events_of(messages)
        assert all(e[0] == "BlockStored" and e[4] == BLOCK and e[6] == "GPU" for e in stored)
        hashes = [h for e in stored for h in e[1]]
        tokens = [t for e in stored for t in e[3]]
        assert len(hashes) == 4 and tokens[:40] == prompt and len(tokens) == 64
        assert stored[0][2] is None                             # the first block has no parent
        for before, after in zip(stored, stored[1:]):
            assert after[2] == before[1][-1]                     # each event chains to the previous block
        # The simulator's own view agrees: the next turn finds all four blocks.
        status, match = sim.post("/sim/cache/match", {"token_ids": tokens + [7]})
        assert match["cached_tokens"] == 64
    finally:
        sim.stop()


def test_eviction_sends_block_removed_and_reset_sends_all_blocks_cleared(tmp_path, zctx):
    """Ensures a prompt that pushes older blocks out of a small cache produces BlockRemoved for exactly the evicted
    hashes, and a cache reset produces AllBlocksCleared."""
    sim = EventSim(tmp_path, "--kv-capacity-tokens", "128")   # 8 blocks
    try:
        sub = subscribe(zctx, sim.endpoints["kv events on"])
        sim.complete(list(range(0, 64)), 1)         # 4 blocks cached
        sim.complete(list(range(5000, 5096)), 1)    # 6 blocks: 2 of the first prompt's must go
        messages = receive(sub, lambda m: any(e[0] == "BlockRemoved" for e in events_of(m)))
        events = events_of(messages)
        first = [h for e in events[:1] for h in e[1]]
        removed = [h for e in events if e[0] == "BlockRemoved" for h in e[1]]
        assert len(removed) == 2 and set(removed) <= set(first)
        status, _ = sim.post("/reset_prefix_cache", {})
        assert status == 200
        cleared = receive(sub, lambda m: any(e[0] == "AllBlocksCleared" for e in events_of(m)))
        assert events_of(cleared)[-1] == ["AllBlocksCleared"]
    finally:
        sim.stop()


def test_map_encoding_and_replay_from_a_sequence(tmp_path, zctx):
    """Ensures the map encoding (newer vLLM) names every field, and a DEALER asking the replay socket for a start
    sequence gets every buffered message from there, then sequence -1 with an empty payload."""
    sim = EventSim(tmp_path, "--kv-events-encoding", "map")
    try:
        sub = subscribe(zctx, sim.endpoints["kv events on"])
        sim.complete(list(range(0, 48)), 1)
        sim.complete(list(range(100, 148)), 1)
        live = receive(sub, lambda m: len(events_of(m)) >= 2)
        batch = live[0][1]
        assert set(batch) == {"ts", "events", "data_parallel_rank"}
        event = batch["events"][0]
        assert event["type"] == "BlockStored"
        assert {"block_hashes", "parent_block_hash", "token_ids", "block_size", "medium"} <= set(event)
        dealer = zctx.socket(zmq.DEALER)
        dealer.connect(sim.endpoints["kv replay on"])
        dealer.send_multipart([b"", (1).to_bytes(8, "big")])
        replayed = []
        while True:
            assert dealer.poll(5000), "no replay answer"
            empty, seq, payload = dealer.recv_multipart()
            number = int.from_bytes(seq, "big", signed=True)
            if number == -1:
                assert payload == b""
                break
            replayed.append((number, msgpack.unpackb(payload)))
        assert [n for n, _ in replayed] == [n for n, _ in live if n >= 1]
        assert replayed[0][1] == dict(live)[1]
    finally:
        sim.stop()
