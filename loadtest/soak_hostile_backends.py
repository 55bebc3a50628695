"""The soak's hostile back-ends (loadtest/soak.py, docs/testing.md "Soak"): what reaches the gateway from beside the
HTTP clients. Each runs on a thread of its own at a bounded rate, on a fixed cycle (so that a 2-minute run sends
every kind), and counts what it sent per kind.

HostileKvPublisher: a KV event publisher in vLLM's wire format (an XPUB sending [topic, 8-byte big-endian sequence,
msgpack batch], a ROUTER answering replay requests [empty, start] with [empty, sequence, payload]... and the end
mark [empty, -1, b""]) that abuses it: BlockStored floods under random hashes, BlockRemoved of hashes it never
stored, undeclared data-parallel ranks, a new LoRA adapter name every time and names over the length bound,
AllBlocksCleared by the thousand, large (2 MiB) and over-limit (9 MiB, which makes the gateway's socket drop it)
messages, sequence gaps (so the gateway asks for a replay, which is answered in full, with garbage, with only the
end mark or not at all), a sequence that goes back (a publisher restart), odd block sizes, malformed msgpack and
frames of the wrong shape.

HostileRedisWriter: writes, into the state-sync keys another replica would write (docs/state-sync.md), what no
replica writes: load lines with counts of 2^31 - 1, 2^63 - 1, -5, 1e30, beyond 64 bits and garbage, for the real
pods and for thousands of made-up addresses, lines of 200 KB; hundreds of made-up replicas in the replicas set
(some with names of 4 KB); stream entries whose record and session-pin fields are garbage, truncated, of an unknown
version, or valid pins for pods that do not exist or with over-long session ids; snapshot members that are garbage
with scores of -5 and 1e30; and, every few seconds, the replicas set and the records stream turned into plain
strings for half a second (the gateway's commands on them then fail).

gateway_counters() reads what the gateway counted of them (its /metrics, and its own load heartbeat in Redis), and
rules() turns that into the soak's two rules for them (soak.py's docstring).
"""
import random
import socket
import threading
import time

import msgpack
import zmq

import harness

KV_PAUSE_S = 0.05              # between two of the publisher's steps (about 20 messages a second)
KV_FLOOD_BLOCKS = 1000         # BlockStored events in one flood message (an engine step's worth)
KV_CLEARS = 1000               # AllBlocksCleared events in one message
KV_NEW_ADAPTERS = 100          # adapters never seen before in one message (past kv_event_max_pod_adapters, 64)
KV_LARGE_TOKENS = 500_000      # token ids in a large message (~2 MiB of msgpack)
KV_OVERSIZED_BYTES = 9 << 20   # over the gateway's 8 MiB ZMQ_MAXMSGSIZE: its socket drops the connection
KV_LONG_NAME_BYTES = (300, 64 << 10)   # adapter names past kv_event_max_adapter_name_bytes (256)
KV_KEPT_FOR_REPLAY = 200       # the last messages the replay socket can resend
# One cycle of the publisher's steps (KV_PAUSE_S each); every SLOW_EVERY-th cycle also sends the slow kinds.
KV_CYCLE = (["flood"] * 12 + ["removed"] * 3 + ["undeclared_rank"] * 4 + ["new_adapter"] * 4 +
            ["long_adapter_name"] * 2 + ["clears"] * 2 + ["gap"] * 2 + ["bad_msgpack"] * 2 + ["too_deep"] +
            ["bad_frames"] + ["rank_not_uint32"])
KV_SLOW_KINDS = ["large", "oversized", "restart", "odd_block_size"]
KV_SLOW_EVERY = 5              # cycles (of about 2 s)
REPLAY_ANSWERS = ["full", "garbage", "end_only", "silent"]

REDIS_PAUSE_S = 0.05           # between two of the writer's steps (each one to three commands)
REDIS_FAKE_REPLICAS = 300      # distinct made-up replica names (the set is refilled, the gateway removes the dead)
REDIS_MADE_UP_ADDRESSES = 2000
REDIS_LONG_LINE_BYTES = 200_000
REDIS_STREAM_MAXLEN = 2000
REDIS_CYCLE = (["load_lines"] * 6 + ["many_replicas"] * 2 + ["stream_garbage"] * 6 + ["stream_pins"] * 3 +
               ["snapshot_garbage"] * 2 + ["long_load_line"])
REDIS_WRONG_TYPE_EVERY_S = 10
REDIS_WRONG_TYPE_FOR_S = 0.5
HOSTILE_COUNTS = ["2147483647", "9223372036854775807", "-5", "1e30", "99999999999999999999999", "0x10", "garbage",
                  "", "7 ", " 3", "4\x00"]


class Counts:
    """What a back-end sent, per kind (thread-safe), and its first unexpected errors."""

    ERRORS_KEPT = 5

    def __init__(self):
        self.lock = threading.Lock()
        self.sent, self.errors = {}, []

    def add(self, kind, n=1):
        with self.lock:
            self.sent[kind] = self.sent.get(kind, 0) + n

    def error(self, what):
        with self.lock:
            if len(self.errors) < self.ERRORS_KEPT:
                self.errors.append(what)

    def snapshot(self):
        with self.lock:
            return dict(sorted(self.sent.items())), list(self.errors)


# ---- the KV event publisher ----

def block_stored(hashes, parent, tokens, block_size=16, lora_name=None, as_map=False):
    """vLLM's BlockStored, as its array encoding or (as_map) its map encoding."""
    if as_map:
        return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
                "block_size": block_size, "lora_id": None if lora_name is None else 7, "medium": "GPU",
                "lora_name": lora_name}
    return ["BlockStored", hashes, parent, tokens, block_size, None, "GPU", lora_name]


class HostileKvPublisher:
    """The pod entry's kv_events / kv_replay endpoints are pub_endpoint / replay_endpoint; run(stop) on a thread."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.SNDHWM, 10_000)   # a subscriber that falls behind loses messages: gaps, as intended
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub_endpoint = f"tcp://127.0.0.1:{self.pub.bind_to_random_port('tcp://127.0.0.1')}"
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.replay_endpoint = f"tcp://127.0.0.1:{self.router.bind_to_random_port('tcp://127.0.0.1')}"
        self.seq, self.kept, self.serial = 0, {}, 0
        self.counts = Counts()

    def pod_entry(self, sim):
        """`sim`'s pod entry with this publisher as its KV event endpoints."""
        return sim.pod_entry() | {"kv_events": self.pub_endpoint, "kv_replay": self.replay_endpoint}

    def send(self, payload, kind, frames=None):
        well_formed = frames is None
        frames = frames or [b"", self.seq.to_bytes(8, "big"), payload]
        self.pub.send_multipart(frames, copy=False)
        if well_formed and len(payload) < (1 << 20):
            self.kept[self.seq] = payload
            self.kept.pop(self.seq - KV_KEPT_FOR_REPLAY, None)
        self.seq += 1
        self.counts.add(kind)

    def batch(self, events, rank=0, as_map=False):
        if as_map:
            return msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": rank})
        return msgpack.packb([time.time(), events, rank])

    def step(self, kind):
        rng, self.serial = self.rng, self.serial + 1
        tokens = lambda base, size=16: [(base + i) % 100_000 for i in range(size)]  # noqa: E731
        if kind == "flood":    # random hashes, each block its own tokens (so each is a distinct block)
            base = rng.getrandbits(20)
            events = [block_stored([rng.getrandbits(63)], None, [(base + i) % 100_000] * 16, as_map=i % 2 == 0)
                      for i in range(KV_FLOOD_BLOCKS)]
            self.send(self.batch(events, as_map=self.serial % 2 == 0), kind)
        elif kind == "removed":
            self.send(self.batch([["BlockRemoved", [rng.getrandbits(63) for _ in range(500)], "GPU"]]), kind)
        elif kind == "undeclared_rank":   # the pod declares no data_parallel_size: only rank 0 is its own
            rank = rng.choice([1, 2, 63, 1000, 2**31])
            self.send(self.batch([block_stored([rng.getrandbits(63)], None, tokens(self.serial))], rank=rank), kind)
        elif kind == "new_adapter":       # names never used before, every time
            self.send(self.batch([block_stored([rng.getrandbits(63)], None, tokens(self.serial + i),
                                               lora_name=f"soak-lora-{self.serial}-{i}-{rng.getrandbits(32):08x}",
                                               as_map=True) for i in range(KV_NEW_ADAPTERS)], as_map=True), kind)
        elif kind == "long_adapter_name":
            name = chr(65 + self.serial % 26) * rng.randint(*KV_LONG_NAME_BYTES)
            self.send(self.batch([block_stored([rng.getrandbits(63)], None, tokens(self.serial), lora_name=name)]),
                      kind)
        elif kind == "clears":
            self.send(self.batch([["AllBlocksCleared"]] * KV_CLEARS), kind)
        elif kind == "gap":               # messages that never come: the gateway asks the replay socket
            self.seq += rng.choice([1, 2, 50, 5000])
            self.send(self.batch([block_stored([rng.getrandbits(63)], None, tokens(self.serial))]), kind)
        elif kind == "bad_msgpack":
            junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 512)))
            good = self.batch([block_stored([1], None, tokens(1))])
            self.send(rng.choice([junk, b"\xc1" + junk, good[:len(good) // 2], good + b"\x00"]), kind)
        elif kind == "too_deep":
            self.send(b"\x91" * 100 + b"\xc0", kind)
        elif kind == "bad_frames":
            self.send(b"", kind, frames=rng.choice([[b""], [b"", b"\x01\x02\x03", b"\x90"],
                                                    [b"", self.seq.to_bytes(8, "big"), b"\x90", b"extra"]]))
        elif kind == "rank_not_uint32":
            self.send(msgpack.packb([time.time(), [], -1]), kind)
        elif kind == "large":
            self.send(self.batch([block_stored(list(range(1, KV_LARGE_TOKENS // 16 + 1)), None,
                                               [i % 30_000 for i in range(KV_LARGE_TOKENS)])]), kind)
        elif kind == "oversized":
            self.send(b"\x00" * KV_OVERSIZED_BYTES, kind)
        elif kind == "restart":           # numbers going back: a publisher that restarted
            self.seq, self.kept = 0, {}
            self.send(self.batch([block_stored([rng.getrandbits(63)], None, tokens(self.serial))]), kind)
        elif kind == "odd_block_size":
            size = rng.choice([1, 7, 4096])
            self.send(self.batch([block_stored([rng.getrandbits(63)], None, tokens(self.serial, size), size)]), kind)

    def answer_replays(self):
        """Answers the replay requests waiting, each in the next of REPLAY_ANSWERS' ways."""
        while self.router.poll(0):
            frames = self.router.recv_multipart()
            self.counts.add("replay_requests")
            if len(frames) != 3:
                continue
            client, start = frames[0], int.from_bytes(frames[2][:8], "big")
            answer = REPLAY_ANSWERS[self.counts.sent["replay_requests"] % len(REPLAY_ANSWERS)]
            self.counts.add(f"replay_{answer}")
            if answer == "full":
                for seq in sorted(s for s in self.kept if s >= start):
                    self.router.send_multipart([client, b"", seq.to_bytes(8, "big"), self.kept[seq]])
            elif answer == "garbage":
                self.router.send_multipart([client, b"", b"\xff" * 3, b"junk"])
                self.router.send_multipart([client, b"", (start + 10**9).to_bytes(8, "big"), b"\xc1\xc1"])
            if answer != "silent":
                self.router.send_multipart([client, b"", (-1).to_bytes(8, "big", signed=True), b""])

    def run(self, stop):
        cycle = 0
        while not stop.is_set():
            kinds = KV_CYCLE + (KV_SLOW_KINDS if cycle % KV_SLOW_EVERY == 0 else [])
            cycle += 1
            for kind in kinds:
                if stop.is_set():
                    break
                try:
                    self.step(kind)
                    self.answer_replays()
                except zmq.ZMQError as error:
                    self.counts.error(f"{kind}: {error!r}")
                stop.wait(KV_PAUSE_S)

    def close(self):
        self.ctx.destroy(linger=0)


# ---- the Redis writer ----

def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def lp(data):
    """A length-prefixed string of the state-sync batches (record_batch.h)."""
    data = data if isinstance(data, bytes) else data.encode()
    return varint(len(data)) + data


class RedisConnection:
    """One RESP connection, reconnected after an error; pipelined commands, replies read in order."""

    def __init__(self, port):
        self.port, self.sock, self.file = port, None, None

    def run(self, *commands):
        """The replies (a RedisError instance for an error reply)."""
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            self.file = self.sock.makefile("rb")
        try:
            self.sock.sendall(b"".join(harness._resp_command(c) for c in commands))
            replies = []
            for _ in commands:
                try:
                    replies.append(harness._resp_reply(self.file))
                except harness.RedisError as error:
                    replies.append(error)
            return replies
        except OSError:
            self.close()
            raise

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = self.file = None


class HostileRedisWriter:
    """Writes hostile values under `prefix` (state_sync.key_prefix) of the Redis at `port`; `pod_addresses` are
    the real pods' host:port (a load line for them is what makes a pod look busy)."""

    def __init__(self, port, prefix, pod_addresses, seed):
        self.conn = RedisConnection(port)
        self.prefix, self.pods, self.rng = prefix, list(pod_addresses), random.Random(seed)
        self.made_up = [f"10.{i // 250}.{i % 250}.9:{8000 + i}" for i in range(REDIS_MADE_UP_ADDRESSES)]
        self.counts = Counts()
        self.serial = 0

    def key(self, name):
        return f"{self.prefix}:{name}"

    def fake_replica(self):
        n = self.rng.randrange(REDIS_FAKE_REPLICAS)
        return f"soak-hostile-{n}" if n % 50 else f"soak-hostile-{n}-" + "x" * 4096

    def load_text(self):
        rng, lines = self.rng, []
        for address in self.pods:
            lines.append(f"{address} {rng.choice(HOSTILE_COUNTS)}")
        lines += [f"{a} {rng.choice(HOSTILE_COUNTS)}" for a in rng.sample(self.made_up, 200)]
        lines += ["no-count-here", "", " ", f"{rng.choice(self.pods)}"]
        rng.shuffle(lines)
        return "\n".join(lines)

    def session_batch(self):
        """A session-pin batch that is malformed, of an unknown version, or valid for pods that do not exist."""
        rng, now = self.rng, int(time.time() * 1000)
        choice = self.serial % 6
        if choice == 0:
            return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300)))
        if choice == 1:
            return b"PS\x09" + varint(1)
        if choice == 2:      # declares a million pins, holds one
            return b"PS\x01" + varint(10**6) + varint(now) + varint(0) + lp("s1") + lp(self.made_up[0])
        if choice == 3:      # a length past the end
            return b"PS\x01" + varint(1) + varint(now) + varint(0) + varint(10**9) + b"abc"
        if choice == 4:      # an id over SessionTable::kMaxIdBytes
            return b"PS\x01" + varint(1) + varint(now) + varint(0) + lp("i" * 5000) + lp(self.pods[0])
        pins = [varint(now) + varint(5) + lp(f"soak-session-{self.serial}-{i}") + lp(rng.choice(self.made_up))
                for i in range(50)]
        return b"PS\x01" + varint(len(pins)) + b"".join(pins)

    def step(self, kind):
        rng, self.serial = self.rng, self.serial + 1
        if kind == "load_lines":
            replica = self.fake_replica()
            self.conn.run(("SET", self.key("load:" + replica), self.load_text(), "PX", "1500"),
                          ("SADD", self.key("replicas"), replica))
        elif kind == "long_load_line":
            replica = self.fake_replica()
            line = f"{self.pods[0]}{'9' * REDIS_LONG_LINE_BYTES}\n{'a' * REDIS_LONG_LINE_BYTES} 5\n"
            self.conn.run(("SET", self.key("load:" + replica), line, "PX", "1500"),
                          ("SADD", self.key("replicas"), replica))
        elif kind == "many_replicas":   # most without a load key: the gateway drops them, they come back
            self.conn.run(("SADD", self.key("replicas"), *{self.fake_replica() for _ in range(100)},
                           bytes(rng.getrandbits(8) for _ in range(40))))
        elif kind == "stream_garbage":
            fields = [("r", self.fake_replica()), ("d", bytes(rng.getrandbits(8) for _ in range(200))),
                      ("s", bytes(rng.getrandbits(8) for _ in range(200)))]
            if self.serial % 7 == 0:
                fields.append(("s", b"PS\x01" + b"\xff" * (1 << 20)))   # a 1 MiB field
            if self.serial % 5 == 0:
                fields = [("x", "no replica field")]
            self.conn.run(("XADD", self.key("records"), "MAXLEN", "~", str(REDIS_STREAM_MAXLEN), "*",
                           *[v for f in fields for v in f]))
        elif kind == "stream_pins":
            self.conn.run(("XADD", self.key("records"), "MAXLEN", "~", str(REDIS_STREAM_MAXLEN), "*",
                           "r", self.fake_replica(), "d", b"PR\x01" + varint(3) + b"\x01", "s", self.session_batch()))
        elif kind == "snapshot_garbage":
            members = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 100))) for _ in range(20)]
            scores = ["-5", "1e30", str(int(time.time() * 1000)), "0"]
            args = [v for m in members for v in (rng.choice(scores), m)]
            self.conn.run(("ZADD", self.key("sessions"), *args), ("ZADD", self.key("snapshot"), *args),
                          ("ZREMRANGEBYRANK", self.key("sessions"), "0", "-1001"),
                          ("ZREMRANGEBYRANK", self.key("snapshot"), "0", "-1001"))
        self.counts.add(kind)

    def wrong_types(self, stop):
        """The replicas set and the records stream as plain strings for REDIS_WRONG_TYPE_FOR_S."""
        keys = [self.key("replicas"), self.key("records")]
        self.conn.run(*[c for k in keys for c in (("DEL", k), ("SET", k, "not a set or a stream"))])
        stop.wait(REDIS_WRONG_TYPE_FOR_S)
        self.conn.run(*[("DEL", k) for k in keys])
        self.counts.add("wrong_types")

    def run(self, stop):
        next_wrong_types = time.monotonic() + REDIS_WRONG_TYPE_EVERY_S
        while not stop.is_set():
            for kind in REDIS_CYCLE:
                if stop.is_set():
                    break
                try:
                    self.step(kind)
                    if time.monotonic() >= next_wrong_types:
                        next_wrong_types = time.monotonic() + REDIS_WRONG_TYPE_EVERY_S
                        self.wrong_types(stop)
                except OSError as error:
                    self.counts.error(f"{kind}: {error!r}")
                stop.wait(REDIS_PAUSE_S)
        self.conn.close()


# ---- what the gateway counted, and the rules ----

def gateway_counters(gateway, redis, pod, prefix, replica_id):
    """What the gateway counted of the hostile back-ends (its /metrics; `pod` is the publisher's), and whether its
    own load heartbeat (`replica_id`, under `prefix`) is still in Redis: its load exchange survived."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(gateway.metrics_text()):
        for s in family.samples:
            if s.name.startswith(("prefixgate_kv_events_", "prefixgate_state_sync_")) and not s.name.endswith(
                    ("_bucket", "_count", "_sum", "_created")):
                found.setdefault(s.name, []).append((s.labels, s.value))

    def by(name, label, **where):
        out = {}
        for labels, value in found.get(name, []):
            if all(labels.get(k) == v for k, v in where.items()):
                out[labels.get(label, "")] = out.get(labels.get(label, ""), 0) + value
        return {k: out[k] for k in sorted(out)}

    def total(name, **where):
        return sum(v for labels, v in found.get(name, []) if all(labels.get(k) == w for k, w in where.items()))

    kv = {name: total(f"prefixgate_kv_events_{name}_total", pod=pod)
          for name in ("messages", "blocks_stored", "cleared", "gaps", "replays", "replay_failures", "resets",
                       "publisher_restarts", "skipped")}
    sync = {name: total(f"prefixgate_state_sync_{name}") for name in ("redis_errors_total", "reconnects_total",
                                                                      "snapshot_loads_total", "connected")}
    return {"kv_hostile_pod": {"refused": by("prefixgate_kv_events_refused_total", "reason", pod=pod),
                               "decode_errors": by("prefixgate_kv_events_decode_errors_total", "reason",
                                                   pod=pod), **kv},
            "kv_other_pods_index_share": total("prefixgate_kv_events_refused_total", reason="index_share")
            - total("prefixgate_kv_events_refused_total", reason="index_share", pod=pod),
            "state_sync": {**sync,
                           "sessions_dropped": by("prefixgate_state_sync_sessions_dropped_total", "reason"),
                           "records_dropped": by("prefixgate_state_sync_records_dropped_total", "reason"),
                           "own_heartbeat": redis.command("EXISTS", f"{prefix}:load:{replica_id}") == 1}}


def rules(kv_sent, redis_sent, errors, counted, samples):
    """[(rule, passed, what was measured)]: each hostile back-end sent every one of its kinds, the gateway counted
    what it had to refuse and kept reading the publisher to the end (soak.py's docstring). `counted` is
    gateway_counters'; `samples` the soak's, with the publisher's messages applied so far."""
    kv_kinds = set(KV_CYCLE) | set(KV_SLOW_KINDS) | {"replay_requests"}
    missing = sorted(k for k in kv_kinds if not kv_sent.get(k))
    pod = counted["kv_hostile_pod"]
    refused, decode_errors = pod["refused"], pod["decode_errors"]
    wanted = {"refused rank": refused.get("rank", 0), "refused adapters": refused.get("adapters", 0),
              "refused adapter_name": refused.get("adapter_name", 0), "decode errors": sum(decode_errors.values()),
              "gaps": pod["gaps"], "replays": pod["replays"], "cleared": pod["cleared"]}
    uncounted = sorted(k for k, v in wanted.items() if not v > 0)
    kv_errors = [e for e in errors if e.startswith("kv")]
    # Messages applied from the publisher in the last half of the samples: it is still read (not silenced).
    late = [s["kv_hostile_messages"] for s in samples[len(samples) // 2:]]
    late_applied = late[-1] - late[0] if len(late) >= 2 else 0
    kv_ok = (not missing and not uncounted and not kv_errors and counted["kv_other_pods_index_share"] == 0
             and late_applied > 0)
    kv_measured = (f"{sum(v for k, v in kv_sent.items() if k in kv_kinds and k != 'replay_requests')} messages, "
                   f"{kv_sent.get('replay_requests', 0)} replay requests; refused {refused}; decode errors "
                   f"{decode_errors}; gaps {pod['gaps']:g}, replays {pod['replays']:g}, resets {pod['resets']:g}; "
                   f"normal pods' blocks lost to its events (index_share) {counted['kv_other_pods_index_share']:g}; "
                   f"{pod['messages']:g} applied, {late_applied:g} in the last half of the samples"
                   + (f"; kinds not sent: {missing}" if missing else "")
                   + (f"; not counted: {uncounted}" if uncounted else "") + "".join(f"; {e}" for e in kv_errors))
    sync = counted["state_sync"]
    dropped = sync["sessions_dropped"]
    missing = sorted(k for k in set(REDIS_CYCLE) | {"wrong_types"} if not redis_sent.get(k))
    wanted = {"sessions malformed": dropped.get("malformed", 0), "sessions unknown_pod": dropped.get("unknown_pod", 0),
              "redis errors": sync["redis_errors_total"]}
    uncounted = sorted(k for k, v in wanted.items() if not v > 0)
    redis_errors = [e for e in errors if e.startswith("redis")]
    alive = sync["connected"] == 1 and sync["own_heartbeat"]
    redis_ok = not missing and not uncounted and not redis_errors and alive
    redis_measured = (f"{sum(redis_sent.values())} writes; sessions dropped {dropped}; Redis errors "
                      f"{sync['redis_errors_total']:g}, snapshot loads {sync['snapshot_loads_total']:g}; connected "
                      f"and heartbeating at the end: {alive}" + (f"; kinds not sent: {missing}" if missing else "")
                      + (f"; not counted: {uncounted}" if uncounted else "") + "".join(f"; {e}" for e in redis_errors))
    return [("hostile KV publisher", kv_ok, kv_measured), ("hostile Redis writer", redis_ok, redis_measured)]


def start(target, stop, errors, name):
    """A daemon thread running target(stop); an exception ends it and is kept in `errors`."""
    def body():
        try:
            target(stop)
        except Exception as error:  # noqa: BLE001 - reported as the back-end's failure in the summary
            errors.append(f"{name}: {error!r}")
    thread = threading.Thread(target=body, daemon=True, name=name)
    thread.start()
    return thread
