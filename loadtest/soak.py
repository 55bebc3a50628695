#!/usr/bin/python3
"""A soak run: the real gateway (threads: 2) in front of four simulated engines, for a set time, under mixed normal
traffic, pod churn, hostile clients, a hostile KV event publisher and a hostile Redis writer at once, recording what
it costs and failing on what must not happen.

Normal clients (NORMAL_CLIENTS threads) send chat and text completions, streamed and not, whose prompts share a few
long prefixes (so the prefix-cache strategy matches and records). Each request must succeed: status 200 and, for a
stream, its `[DONE]`. Pod churn: three pods start in the pods file and a fourth is added later (a new pod); then,
every churn period, one pod is removed from the file, killed (SIGKILL) once the gateway dropped it and its engine
has nothing in flight, restarted on its port and added back. Hostile clients (one thread per kind, HOSTILE_KINDS)
run alongside: slowloris heads, a head that never ends, bodies over limits.max_body_bytes, 100,000-deep nested
JSON, made-up model names (all distinct), invalid UTF-8 in the model, the path and the routing-strategy header,
garbage bytes, clients that hang up in the middle of a stream, and a chunked body with a huge chunk extension.

The gateway routes by the engines' KV events (routing.prefix_cache.kv_event_sync: the engines publish theirs, and
churn restarts them publishing on new ports) and shares its state through a real Redis (state_sync, key prefix
STATE_SYNC_PREFIX). Hostile back-ends (soak_hostile_backends.py, one thread each, bounded in rate) run alongside: a KV
event publisher that is the kv_events / kv_replay endpoint of a fifth engine's pod entry (KV_HOSTILE_POD, which
serves normal requests too and claims a small KV cache, HOSTILE_POD_KV_TOKENS) and abuses vLLM's wire format
(floods, undeclared ranks, adapter names new and over-long, clears, large and over-limit messages, gaps answered
badly by its replay socket, restarts, odd block sizes, malformed msgpack and frames), and a Redis writer that puts
what no replica writes into the keys the replicas share (load lines with absurd counts and addresses, made-up
replicas, garbage and malformed stream entries and snapshot members, keys of the wrong type for half a second).
A hostile load line for a real pod makes it look busy (no limits.max_in_flight_per_pod is set: it is still served).
What fills with distinct prompts (the engines' KV caches, SIM_ARGS, and the remote tokenizer's cache,
TOKENIZER_CACHE_ENTRIES) is small enough to be full, and evicting, by the end of the warm-up.

Every SAMPLE_INTERVAL_S seconds a line goes to soak-samples.jsonl: the gateway's RSS and open file descriptors
(/proc/PID/status, /proc/PID/fd), the number of series in its /metrics, the KV event messages it applied from the
hostile publisher so far, requests ok / failed per client kind so far, and the normal clients' latency p50 / p99
over the interval. At the end soak-summary.json and soak-summary.md (with what each hostile back-end sent, by kind,
and what the gateway counted of it).

The rules; the run exits 1 when any is broken:
  no lost request      every normal request succeeded (and at least MIN_NORMAL_PER_S per second were sent)
  hostile refused      every hostile request got what its kind expects (HOSTILE_KINDS: a 4xx answer with an
                       OpenAI-shaped error body, or a close where stated) within its time bound, never a 2xx/5xx
  gateway alive        the gateway ran to the end and stopped on SIGTERM without a sanitizer report
  pod churn            at least one remove-kill-restart cycle ran, and every step of it happened in time
  hostile KV publisher it sent every kind and was asked for replays; the gateway counted refusals (reason rank,
                       adapters, adapter_name), decode errors, gaps, replays and clears for its pod, took no block
                       of another pod for them (index_share), and still applied its messages in the last half of
                       the samples (a message over 8 MiB once ended the subscription for good)
  hostile Redis writer it wrote every kind without an error of its own; the gateway counted malformed and
                       unknown-pod session pins and Redis errors (the keys of the wrong type), and at the end is
                       connected to Redis with its own load heartbeat there
  no RSS growth        after the warm-up (WARMUP_SHARE of the run, at least MIN_WARMUP_S), the median RSS of the
                       last half of the samples <= the median of the first half * (1 + RSS_GROWTH_SHARE)
                       + RSS_GROWTH_SLACK_MIB (medians, so one burst does not decide)
  no fd growth         the same for open file descriptors, slack FD_GROWTH_SLACK; and once the traffic stopped and
                       idle connections closed, the count returns to at most the count before traffic + FD_GROWTH_SLACK
  bounded series       the /metrics series count of every sample after the first half <= the highest before it
                       (after the warm-up) * (1 + SERIES_GROWTH_SHARE) + SERIES_GROWTH_SLACK: a series per
                       client-chosen string grows by thousands a minute, a new pod or status by tens

The processes' logs go to a temporary folder, removed when the run passed (its path is in the summary otherwise).

Usage: loadtest/soak.py [--duration S] [--out DIR]   (scripts/soak.sh builds first; docs/testing.md, "Soak")
"""
import argparse
import http.client
import json
import os
import random
import select
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import provenance  # noqa: E402
import soak_hostile_backends as backends  # noqa: E402

SAMPLE_INTERVAL_S = 10
NORMAL_CLIENTS = 4
NORMAL_PAUSE_S = 0.02          # between two requests of one normal client (leaves the CPU to the gateway)
MIN_NORMAL_PER_S = 1.0
WARMUP_SHARE, MIN_WARMUP_S = 0.1, 30
RSS_GROWTH_SHARE, RSS_GROWTH_SLACK_MIB = 0.10, 8
FD_GROWTH_SLACK = 16
SERIES_GROWTH_SHARE, SERIES_GROWTH_SLACK = 0.10, 100
MAX_BODY_BYTES = 1 << 20       # limits.max_body_bytes of the soak's gateway (small, so over-limit bodies are cheap)
HEADER_TIMEOUT_MS = 2000       # limits.header_timeout_ms: slowloris connections end within this
CLOSE_MARGIN_S = 5             # how much later than its limit a refusal may come
DEEP_JSON_DEPTH = 100_000
HUGE_CAP_BYTES = 4 << 20       # a never-ending head or chunk extension is cut off by us after this much
MODEL = "sim-model"
KV_HOSTILE_POD = "pod-kv-hostile"   # a simulated engine whose KV events come from backends.HostileKvPublisher
STATE_SYNC_PREFIX, REPLICA_ID = "soak", "soak-gateway"   # state_sync.key_prefix and .replica_id
HOSTILE_POD_KV_TOKENS = 32_000      # the hostile pod's kv_capacity_tokens: 2,000 blocks of 16 tokens
# What fills with distinct prompts is made small enough to fill within the warm-up, so that the growth rules see
# it full, evicting, rather than filling: the engines' KV caches (which the gateway's index follows through their
# events) and the remote tokenizer's cache of /tokenize answers.
SIM_ARGS = ("--kv-capacity-tokens", "40000")
TOKENIZER_CACHE_ENTRIES = 1000
SHARED_PREFIXES = [f"You are assistant {n}. " + " ".join(f"rule {n}.{i}: answer briefly and politely;"
                                                            for i in range(40)) for n in range(4)]


class Tally:
    """Requests ok / failed per client kind (thread-safe), the first failures of each kind, and normal latencies."""

    FIRST_FAILURES_KEPT = 5

    def __init__(self):
        self.lock = threading.Lock()
        self.ok, self.failed, self.first_failures = {}, {}, {}
        self.interval_latencies, self.all_latencies = [], []

    def add(self, kind, ok, reason="", latency_s=None):
        with self.lock:
            (self.ok if ok else self.failed)[kind] = (self.ok if ok else self.failed).get(kind, 0) + 1
            if not ok and len(self.first_failures.setdefault(kind, [])) < self.FIRST_FAILURES_KEPT:
                self.first_failures[kind].append(reason)
            if latency_s is not None:
                self.interval_latencies.append(latency_s)
                self.all_latencies.append(latency_s)

    def snapshot(self):
        """(counts per kind, latencies since the last snapshot)."""
        with self.lock:
            counts = {k: {"ok": self.ok.get(k, 0), "failed": self.failed.get(k, 0)}
                      for k in sorted(set(self.ok) | set(self.failed))}
            latencies, self.interval_latencies = self.interval_latencies, []
        return counts, latencies


def percentile(values, share):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def openai_error(body):
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and isinstance(error.get("message"), str) and isinstance(error.get("type"), str)


# ---- normal clients ----

def normal_request(port, rng, serial):
    """One normal request; returns (ok, reason)."""
    prompt = rng.choice(SHARED_PREFIXES) + f" Question {serial}: what is {rng.randrange(1000)} squared?"
    stream, chat = rng.random() < 0.5, rng.random() < 0.5
    body = {"model": MODEL, "max_tokens": rng.randrange(4, 24), "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if chat else "/v1/completions"
    try:
        status, _, data = harness.request("127.0.0.1", port, "POST", path, json.dumps(body), timeout=30)
        if status != 200:
            return False, f"{path} stream={stream}: status {status} {data[:200]!r}"
        if stream and harness.sse_events(data)[-1:] != ["[DONE]"]:
            return False, f"{path} stream: no [DONE] in {data[-200:]!r}"
        if not stream and not json.loads(data).get("choices"):
            return False, f"{path}: no choices in {data[:200]!r}"
    except (OSError, ValueError, http.client.HTTPException) as error:
        return False, f"{path} stream={stream}: {error!r}"
    return True, ""


def normal_client(port, seed, stop, tally):
    rng = random.Random(seed)
    serial = 0
    while not stop.is_set():
        serial += 1
        start = time.monotonic()
        ok, reason = normal_request(port, rng, f"{seed}-{serial}")
        tally.add("normal", ok, reason, time.monotonic() - start)
        stop.wait(NORMAL_PAUSE_S)


# ---- hostile clients: each returns (ok, reason) ----

def connect(port, timeout_s):
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_answer(sock, method="POST"):
    """(status, body) of the answer on `sock`, or (None, reason) when it closed or timed out without one."""
    response = http.client.HTTPResponse(sock, method=method)
    try:
        response.begin()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as error:
        return None, repr(error)
    finally:
        response.close()


def send_until_answered(sock, pieces):
    """Sends `pieces` (an iterable of bytes) until the gateway answers or closes; True when all of them went."""
    for piece in pieces:
        if select.select([sock], [], [], 0)[0]:
            return False
        try:
            sock.sendall(piece)
        except OSError:
            return False
    return True


def refused(status, body, expected):
    """The verdict on a hostile request's answer: one of the expected 4xx statuses with an OpenAI-shaped body."""
    if status is None:
        return False, f"no answer: {body}"
    if status not in expected:
        return False, f"status {status} (expected one of {expected}): {body[:200]!r}"
    if not openai_error(body):
        return False, f"status {status} without an OpenAI-shaped error body: {body[:200]!r}"
    return True, ""


def exchange(port, data, expected):
    with connect(port, 10) as sock:
        send_until_answered(sock, [data])
        return refused(*read_answer(sock), expected)


def chat_head(extra=b"", path=b"/v1/chat/completions", length=None):
    head = b"POST " + path + b" HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n" + extra
    if length is not None:
        head += b"Content-Length: %d\r\n" % length
    return head + b"\r\n"


def chat_body(model=MODEL, **extra):
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                       **extra}).encode()


def closed_within(sock, bound_s):
    """True when the gateway closes `sock` (answering or not) within bound_s seconds."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            if select.select([sock], [], [], 0.2)[0] and not sock.recv(65536):
                return True
        except OSError:
            return True
    return False


def slowloris(port, rng, serial):
    """A head sent one byte every 200 ms, never finished: closed by limits.header_timeout_ms."""
    bound = HEADER_TIMEOUT_MS / 1000 + CLOSE_MARGIN_S
    with connect(port, bound + 5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\nX-Slow: ")
        start = time.monotonic()
        while time.monotonic() - start < bound:
            try:
                sock.sendall(b"a")
            except OSError:
                return True, ""
            if closed_within(sock, 0.2):
                return True, ""
        return False, f"still open after {bound:.0f} s"


def endless_head(port, rng, serial):
    """A head whose header lines never end: 431 (or a close) long before HUGE_CAP_BYTES."""
    line = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    pieces = (line * 64 for _ in range(HUGE_CAP_BYTES // (len(line) * 64)))
    with connect(port, 10) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: soak\r\n")
        if send_until_answered(sock, pieces):
            return False, f"took a {HUGE_CAP_BYTES} byte head without answering"
        status, body = read_answer(sock)
        return (True, "") if status is None else refused(status, body, (431, 400))


def over_limit_body(port, rng, serial):
    """A body one byte over limits.max_body_bytes: 413."""
    size = MAX_BODY_BYTES + 1
    with connect(port, 10) as sock:
        sock.sendall(chat_head(length=size))
        send_until_answered(sock, (b" " * 65536 for _ in range(size // 65536 + 1)))
        return refused(*read_answer(sock), (413,))


def deep_json(port, rng, serial):
    """A chat body with DEEP_JSON_DEPTH nested arrays: 400, never forwarded (an engine drops it)."""
    body = chat_body()[:-1] + b', "soak": ' + b"[" * DEEP_JSON_DEPTH + b"]" * DEEP_JSON_DEPTH + b"}"
    return exchange(port, chat_head(length=len(body)) + body, (400, 413))


def made_up_model(port, rng, serial):
    """A model no pod serves, a new name every time: 404."""
    body = chat_body(model=f"soak-made-up-{serial}-{rng.getrandbits(32):08x}")
    return exchange(port, chat_head(length=len(body)) + body, (404, 400))


def utf8_model(port, rng, serial):
    body = chat_body(model="sim-\udcff\udcfe").replace(b"\\udcff\\udcfe", b"\xff\xfe")
    return exchange(port, chat_head(length=len(body)) + body, (400, 404))


def utf8_path(port, rng, serial):
    body = chat_body()
    return exchange(port, chat_head(path=b"/v1/\xff\xfe/completions", length=len(body)) + body, (404, 400))


def utf8_strategy(port, rng, serial):
    body = chat_body()
    return exchange(port, chat_head(b"routing-strategy: least-\xff\xfe\r\n", length=len(body)) + body, (400,))


def garbage(port, rng, serial):
    """Random bytes: a 400 or a close, within the head timeout."""
    with connect(port, HEADER_TIMEOUT_MS / 1000 + CLOSE_MARGIN_S) as sock:
        send_until_answered(sock, [bytes(rng.getrandbits(8) for _ in range(2048)) + b"\r\n\r\n"])
        status, body = read_answer(sock)
        if status is None:
            return ("timed out" not in body), body
        return refused(status, body, (400, 413, 431))


def hang_up_mid_stream(port, rng, serial):
    """A streamed chat the client closes after its first chunk; the gateway must cancel it quietly."""
    body = chat_body(stream=True, max_tokens=400)
    with connect(port, 30) as sock:
        sock.sendall(chat_head(length=len(body)) + body)
        received = b""
        while b"data:" not in received:
            chunk = sock.recv(4096)
            if not chunk:
                return False, f"closed before the first chunk: {received[:200]!r}"
            received += chunk
        if not received.startswith(b"HTTP/1.1 200"):
            return False, f"not a 200 stream: {received[:200]!r}"
        return True, ""


def chunk_extension(port, rng, serial):
    """A chunked body whose first chunk line carries a huge extension: refused (4xx or close) before HUGE_CAP_BYTES."""
    pieces = (b"a" * 65536 for _ in range(HUGE_CAP_BYTES // 65536))
    with connect(port, 10) as sock:
        sock.sendall(chat_head(b"Transfer-Encoding: chunked\r\n") + b"10;soak=")
        if send_until_answered(sock, pieces):
            return False, f"took a {HUGE_CAP_BYTES} byte chunk extension without answering"
        status, body = read_answer(sock)
        return (True, "") if status is None else refused(status, body, (400, 413, 431))


# kind: (function, pause between two of its requests in seconds)
HOSTILE_KINDS = {
    "slowloris": (slowloris, 0.0),
    "endless_head": (endless_head, 1.0),
    "over_limit_body": (over_limit_body, 1.0),
    "deep_json": (deep_json, 1.0),
    "made_up_model": (made_up_model, 0.2),
    "utf8_model": (utf8_model, 0.5),
    "utf8_path": (utf8_path, 0.5),
    "utf8_strategy": (utf8_strategy, 0.5),
    "garbage": (garbage, 0.5),
    "hang_up_mid_stream": (hang_up_mid_stream, 0.5),
    "chunk_extension": (chunk_extension, 1.0),
}


def hostile_client(kind, port, seed, stop, tally):
    function, pause_s = HOSTILE_KINDS[kind]
    rng = random.Random(seed)
    serial = 0
    while not stop.is_set():
        serial += 1
        try:
            ok, reason = function(port, rng, serial)
        except (OSError, ValueError) as error:
            ok, reason = False, repr(error)
        tally.add(kind, ok, reason)
        stop.wait(pause_s)


# ---- pod churn ----

def engine_in_flight(sim):
    status, _, body = harness.request("127.0.0.1", sim.port, "GET", "/metrics", timeout=5)
    values = [float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
              if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))]
    return sum(values) if status == 200 and values else None


def churn(gateway, sims, fixed, workdir, time_scale, duration_s, stop, events, cycles):
    """Adds pod-d at a fifth of the run, then every churn period removes pod-b or pod-c, kills its engine once it
    left the gateway and drained, restarts it on its port (with new KV event ports) and adds it back (cycles[0]
    counts the cycles done). The pod entries in `fixed` stay in the file throughout."""
    def log(what):
        events.append({"t": round(time.monotonic() - t0, 1), "event": what})

    def in_file():
        return [s for s in sims if s.name in members] + fixed

    t0 = time.monotonic()
    members = {"pod-a", "pod-b", "pod-c"}
    period = max(20.0, duration_s / 12)
    if stop.wait(duration_s / 5):
        return
    members.add("pod-d")
    harness.write_pods(gateway.pods_file, in_file())
    log("added pod-d (new)")
    for cycle in range(1_000_000):
        if stop.wait(period / 2):
            return
        victim = sims[1 + cycle % 2]
        members.discard(victim.name)
        harness.write_pods(gateway.pods_file, in_file())
        harness.wait_until(lambda: victim.name not in {p["name"] for p in gateway.debug_pods()}, timeout=10,
                           what=f"{victim.name} to leave the gateway")
        harness.wait_until(lambda: engine_in_flight(victim) == 0, timeout=60, interval=0.2,
                           what=f"{victim.name} to drain")
        victim.kill()
        log(f"removed and killed {victim.name}")
        if stop.wait(period / 4):
            return
        sims[sims.index(victim)] = harness.Sim(workdir, victim.name, *SIM_ARGS, model=MODEL, time_scale=time_scale,
                                               port=victim.port, kv_events=True)
        members.add(victim.name)
        harness.write_pods(gateway.pods_file, in_file())
        log(f"restarted and re-added {victim.name}")
        cycles[0] += 1


# ---- sampling and rules ----

def gateway_resources(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def metrics_sample(gateway):
    """(the number of /metrics series, the KV event messages the gateway applied from the hostile publisher)."""
    series, kv_messages = 0, 0.0
    hostile = f'prefixgate_kv_events_messages_total{{pod="{KV_HOSTILE_POD}"}} '
    for line in gateway.metrics_text().splitlines():
        if line and not line.startswith("#"):
            series += 1
            if line.startswith(hostile):
                kv_messages = float(line[len(hostile):])
    return series, kv_messages


def sample(gateway, t0, tally, events, out):
    counts, latencies = tally.snapshot()
    rss_mib, fds = gateway_resources(gateway.proc.pid)
    series, kv_messages = metrics_sample(gateway)
    row = {"t": round(time.monotonic() - t0, 1), "rss_mib": round(rss_mib, 1), "fds": fds, "series": series,
           "kv_hostile_messages": kv_messages, "latency_p50_s": percentile(latencies, 0.5),
           "latency_p99_s": percentile(latencies, 0.99), "requests": counts, "events": events[:]}
    events.clear()
    out.write(json.dumps(row) + "\n")
    out.flush()
    return row


def growth_rules(samples, warmup_s, fds_before, fds_drained):
    """[(rule, passed, what was measured)] for RSS, descriptors and series (see the module docstring)."""
    steady = [s for s in samples if s["t"] >= warmup_s]
    if len(steady) < 4:
        return [("enough samples", False, f"{len(steady)} samples after the warm-up, need 4")]
    first, last = steady[:len(steady) // 2], steady[len(steady) // 2:]
    rules = []
    for key, share, slack in (("rss_mib", RSS_GROWTH_SHARE, RSS_GROWTH_SLACK_MIB), ("fds", 0, FD_GROWTH_SLACK)):
        before, after = statistics.median(s[key] for s in first), statistics.median(s[key] for s in last)
        bound = before * (1 + share) + slack
        rules.append((f"no {key} growth", after <= bound,
                      f"median {before:g} in the first half, {after:g} in the last (at most {bound:g})"))
    rules.append(("fds drained", fds_drained <= fds_before + FD_GROWTH_SLACK,
                  f"{fds_drained} after the traffic, {fds_before} before it (at most {fds_before + FD_GROWTH_SLACK})"))
    highest = max(s["series"] for s in first)
    bound = highest * (1 + SERIES_GROWTH_SHARE) + SERIES_GROWTH_SLACK
    worst = max(s["series"] for s in last)
    rules.append(("bounded series", worst <= bound,
                  f"at most {highest} in the first half, up to {worst} in the last (at most {bound:g})"))
    return rules


def subscribed_and_synced(gateway):
    """Every pod's KV event subscription and the state sync's Redis connection are up."""
    pods = gateway.debug_pods()
    return all(p.get("kv_sync", {}).get("subscribed") for p in pods) and gateway.metric(
        "prefixgate_state_sync_connected") == 1


def wait_for_drain(gateway, fds_before):
    """Fds once idle upstream and client connections closed (the pool's idle time), or after 15 s."""
    deadline = time.monotonic() + 15
    while True:
        fds = gateway_resources(gateway.proc.pid)[1]
        if fds <= fds_before or time.monotonic() > deadline:
            return fds
        time.sleep(0.5)


def compact(value):
    """A dict as `key value` pairs, nested ones in braces, for a table cell."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {'{' + compact(v) + '}' if isinstance(v, dict) else compact(v)}"
                         for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)


def markdown(summary):
    lines = [f"# Soak: {summary['duration_s']:g} s", "", *provenance.markdown(summary["provenance"]),
             f"**Verdict**: {'passed' if summary['passed'] else 'FAILED'}", "", "| rule | result | measured |",
             "| --- | --- | --- |"]
    lines += [f"| {r['rule']} | {'ok' if r['passed'] else 'FAILED'} | {r['measured']} |" for r in summary["rules"]]
    lines += ["", "| client kind | ok | failed | first failure |", "| --- | ---: | ---: | --- |"]
    for kind, c in summary["requests"].items():
        first = (summary["first_failures"].get(kind) or [""])[0].replace("|", "\\|")[:160]
        lines.append(f"| {kind} | {c['ok']} | {c['failed']} | {first} |")
    backends_seen = summary["hostile_backends"]
    counted = backends_seen["gateway_counted"] or {}
    lines += ["", "| hostile back-end | sent, by kind | the gateway counted |", "| --- | --- | --- |",
              f"| KV publisher ({KV_HOSTILE_POD}) | {compact(backends_seen['kv_publisher_sent'])} | "
              f"{compact(counted.get('kv_hostile_pod', {}))} |",
              f"| Redis writer | {compact(backends_seen['redis_writer_sent'])} | "
              f"{compact(counted.get('state_sync', {}))} |"]
    lines += ["", "| t (s) | RSS (MiB) | fds | /metrics series | hostile KV messages applied | normal p50 (ms) | "
              "normal p99 (ms) | events |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    ms = lambda v: "-" if v is None else f"{v * 1000:.0f}"  # noqa: E731
    for s in summary["samples"]:
        events = "; ".join(e["event"] for e in s["events"])
        lines.append(f"| {s['t']:g} | {s['rss_mib']:g} | {s['fds']} | {s['series']} | "
                     f"{s.get('kv_hostile_messages', 0):g} | {ms(s['latency_p50_s'])} | "
                     f"{ms(s['latency_p99_s'])} | {events} |")
    return "\n".join(lines) + "\n"


def start_backends(workdir, time_scale):
    """Redis, the normal engines (publishing their KV events), the hostile KV publisher and the engine whose pod
    entry names it: (redis, sims, publisher, hostile_sim)."""
    redis = harness.RedisServer(workdir)
    sims, publisher, hostile_sim = [], None, None
    try:
        sims = [harness.Sim(workdir, f"pod-{c}", *SIM_ARGS, model=MODEL, time_scale=time_scale, kv_events=True)
                for c in "abcd"]
        publisher = backends.HostileKvPublisher(seed=7)
        hostile_sim = harness.Sim(workdir, KV_HOSTILE_POD, *SIM_ARGS, model=MODEL, time_scale=time_scale)
    except BaseException:
        for process in [*sims, hostile_sim, redis]:
            if process is not None:
                process.kill()
        if publisher is not None:
            publisher.close()
        raise
    return redis, sims, publisher, hostile_sim


def run(duration_s, out_dir, workdir, time_scale):
    out_dir.mkdir(parents=True, exist_ok=True)
    git = provenance.git_info()
    tally, stop, events = Tally(), threading.Event(), []
    redis, sims, publisher, hostile_sim = start_backends(workdir, time_scale)
    # The hostile publisher's pod claims a small KV cache, so that its floods also meet the pod's capacity.
    hostile_entry = publisher.pod_entry(hostile_sim) | {"kv_capacity_tokens": HOSTILE_POD_KV_TOKENS}
    config = {"log_level": "warn",
              "routing": {"strategy": "prefix-cache",
                          "prefix_cache": {"kv_event_sync": True,
                                           "remote_tokenizer_cache_entries": TOKENIZER_CACHE_ENTRIES}},
              "limits": {"max_body_bytes": MAX_BODY_BYTES, "header_timeout_ms": HEADER_TIMEOUT_MS,
                         "client_idle_timeout_ms": 5000},
              "upstream": {"pool_idle_ms": 2000},
              "state_sync": {"enabled": True, "redis": redis.url, "key_prefix": STATE_SYNC_PREFIX,
                             "replica_id": REPLICA_ID}}
    gateway = None
    warmup_s = max(MIN_WARMUP_S, WARMUP_SHARE * duration_s)
    samples, threads, alive, backend_errors, counted = [], [], True, [], None
    try:
        gateway = harness.Gateway(workdir, [*sims[:3], hostile_entry], config)
        # Descriptors once the KV event subscriptions and the Redis connections are open: they open on their own
        # threads, after /readyz; counted before them, the drained count would be compared with too few.
        harness.wait_until(lambda: subscribed_and_synced(gateway), timeout=30, what="KV subscriptions and state sync")
        fds_before = harness.settled(lambda: gateway_resources(gateway.proc.pid)[1], timeout_s=5, interval_s=0.5)
        threads = [threading.Thread(target=normal_client, args=(gateway.port, n, stop, tally), daemon=True)
                   for n in range(NORMAL_CLIENTS)]
        threads += [threading.Thread(target=hostile_client, args=(kind, gateway.port, 100 + n, stop, tally),
                                     daemon=True) for n, kind in enumerate(HOSTILE_KINDS)]
        churn_errors, churn_cycles = [], [0]

        def churn_thread():
            try:
                churn(gateway, sims, [hostile_entry], workdir, time_scale, duration_s, stop, events, churn_cycles)
            except (AssertionError, OSError, RuntimeError) as error:
                churn_errors.append(repr(error))
        threads.append(threading.Thread(target=churn_thread, daemon=True))
        writer = backends.HostileRedisWriter(redis.port, STATE_SYNC_PREFIX,
                                             [f"127.0.0.1:{s.port}" for s in [*sims, hostile_sim]], seed=9)
        t0 = time.monotonic()
        for thread in threads:
            thread.start()
        threads.append(backends.start(publisher.run, stop, backend_errors, "kv publisher"))
        threads.append(backends.start(writer.run, stop, backend_errors, "redis writer"))
        with open(out_dir / "soak-samples.jsonl", "w") as out, provenance.LoadSampler() as load:
            while time.monotonic() - t0 < duration_s and alive:
                time.sleep(max(0.0, SAMPLE_INTERVAL_S - (time.monotonic() - t0) % SAMPLE_INTERVAL_S))
                try:
                    samples.append(sample(gateway, t0, tally, events, out))
                except (OSError, AssertionError):  # a sample missed; the run ends if the gateway is gone
                    alive = gateway.proc.poll() is None
            stop.set()
            for thread in threads:
                thread.join(60)
            fds_drained = wait_for_drain(gateway, fds_before) if alive else None
            if alive:
                try:
                    counted = backends.gateway_counters(gateway, redis, KV_HOSTILE_POD, STATE_SYNC_PREFIX, REPLICA_ID)
                except (OSError, AssertionError, harness.RedisError) as error:
                    backend_errors.append(f"reading the gateway's counters: {error!r}")
    finally:
        stop.set()
        for sim in [*sims, hostile_sim]:
            sim.kill()
        clean_stop = "never started"
        if gateway is not None:
            try:
                gateway.stop()
                clean_stop = ""
            except AssertionError as error:
                clean_stop = str(error)[:2000]
        redis.stop()
        publisher.close()
    counts, _ = tally.snapshot()
    normal = counts.get("normal", {"ok": 0, "failed": 0})
    hostile_failed = {k: c["failed"] for k, c in counts.items() if k != "normal" and c["failed"]}
    rules = [("no lost request", normal["failed"] == 0 and normal["ok"] >= MIN_NORMAL_PER_S * duration_s,
              f"{normal['failed']} of {normal['ok'] + normal['failed']} normal requests failed "
              f"(at least {MIN_NORMAL_PER_S * duration_s:g} must succeed)"),
             ("hostile refused", not hostile_failed and all(counts.get(k, {}).get("ok", 0) + counts.get(k, {}).get(
                 "failed", 0) > 0 for k in HOSTILE_KINDS),
              f"wrongly answered: {hostile_failed or 'none'}"),
             ("gateway alive", alive and not clean_stop,
              "ran to the end and stopped cleanly" if alive and not clean_stop else
              f"alive to the end: {alive}; {clean_stop}".strip()),
             ("pod churn", churn_cycles[0] > 0 and not churn_errors,
              f"{churn_cycles[0]} remove-kill-restart cycles" + "".join(f"; {e}" for e in churn_errors))]
    kv_sent, kv_errors = publisher.counts.snapshot()
    redis_sent, redis_errors = writer.counts.snapshot()
    errors = backend_errors + [f"kv publisher: {e}" for e in kv_errors] + [f"redis writer: {e}" for e in redis_errors]
    if counted is not None:
        rules += backends.rules(kv_sent, redis_sent, errors, counted, samples)
    if alive:
        rules += growth_rules(samples, warmup_s, fds_before, fds_drained)
    all_latencies = tally.all_latencies
    passed = all(r[1] for r in rules)
    if passed:  # the processes' logs are kept only to explain a failure
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {"duration_s": duration_s, "warmup_s": warmup_s, "passed": passed,
               "rules": [{"rule": r, "passed": p, "measured": m} for r, p, m in rules],
               "requests": counts, "first_failures": tally.first_failures,
               "normal_latency_s": {"p50": percentile(all_latencies, 0.5), "p99": percentile(all_latencies, 0.99)},
               "hostile_backends": {"kv_publisher_sent": kv_sent, "redis_writer_sent": redis_sent, "errors": errors,
                                    "gateway_counted": counted},
               "logs": None if passed else str(workdir), "samples": samples,
               "provenance": provenance.collect(" ".join(sys.argv), {"prefixgate": harness.GATEWAY_BIN,
                                                                    "engine-sim": harness.SIM_BIN}, load, git)}
    (out_dir / "soak-summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "soak-summary.md").write_text(markdown(summary))
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800, help="seconds of traffic (default 1800)")
    parser.add_argument("--out", type=Path, default=Path("soak-out"), help="folder for the samples and summary")
    parser.add_argument("--time-scale", default="0.05", help="the simulated engines' --time-scale")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="prefixgate-soak-"))
    summary = run(args.duration, args.out, workdir, args.time_scale)
    for r in summary["rules"]:
        print(f"{'ok    ' if r['passed'] else 'FAILED'} {r['rule']}: {r['measured']}")
    for kind, c in summary["requests"].items():
        print(f"  {kind:<20} ok {c['ok']:>6}  failed {c['failed']:>5}  {(summary['first_failures'].get(kind) or [''])[0][:150]}")
    print(f"summary: {args.out}/soak-summary.md; logs: {summary['logs'] or 'removed (the run passed)'}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
