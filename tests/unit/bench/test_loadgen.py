"""loadgen and the oracle's router against fake pods (asyncio servers in a thread): the send lag is recorded and
includes the time spent before the send, several gateway replicas get the requests round-robin, and the oracle
routes by the pods' /sim/cache/match answers."""
import asyncio
import json
import threading

import pytest

from bench.loadgen import match_percent, replica_plan, run_workload
from bench.model import BenchRequest, Session, Workload
from bench.oracle import OracleRouter


class FakePod:
    """A tiny HTTP/1.1 keep-alive server: streams 3 SSE content events per completion, answers cache matches with
    a fixed cached_tokens; `match_header` is sent as x-prefix-match-percent on completions (None: no header), and
    `prefill_header` as prefill-pod (a disaggregated request's prefill pod; None: no header)."""

    def __init__(self, name, cached_tokens=0, match_header=None, prefill_header=None):
        self.name, self.cached_tokens, self.matches, self.completions = name, cached_tokens, 0, 0
        self.match_header, self.prefill_header = match_header, prefill_header
        self.port = None
        self.session_ids = []  # each completion's x-session-id header (None when absent)
        self.bodies = []       # each completion's body, as received

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                body = await reader.readexactly(length)
                if head.startswith(b"POST /sim/cache/match"):
                    self.matches += 1
                    body = json.dumps({"cached_tokens": self.cached_tokens, "prompt_tokens": 100,
                                       "num_requests_running": 0, "num_requests_waiting": 0,
                                       "kv_cache_usage_perc": 0.1}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-sim-pod: "
                                 + self.name.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
                                 + b"\r\n\r\n" + body)
                else:
                    self.completions += 1
                    self.bodies.append(body)
                    self.session_ids.append(next((line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                                                  if line.lower().startswith(b"x-session-id:")), None))
                    match = f"x-prefix-match-percent: {self.match_header}\r\n" if self.match_header else ""
                    match += f"prefill-pod: {self.prefill_header}\r\n" if self.prefill_header else ""
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
                                 b"\r\nx-sim-pod: " + self.name.encode() + b"\r\n" + match.encode() + b"\r\n")
                    events = [b'data: {"choices":[{"delta":{"content":" the"}}]}\n\n'] * 3 + [
                        b'data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":3,'
                        b'"prompt_tokens_details":{"cached_tokens":' + str(self.cached_tokens).encode() + b'}},'
                        b'"timings":{"cache_n":' + str(self.cached_tokens).encode() + b',"prompt_n":7}}\n\n',
                        b"data: [DONE]\n\n"]
                    for event in events:
                        writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                        await asyncio.sleep(0.001)
                    writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
def pods():
    """Two fake pods served from a background event loop."""
    loop = asyncio.new_event_loop()
    fakes = [FakePod("pod-a", cached_tokens=0),
             FakePod("pod-b", cached_tokens=64, match_header="75", prefill_header="prefill-0")]
    ready = threading.Event()

    async def start():
        for fake in fakes:
            server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
            fake.port = server.sockets[0].getsockname()[1]
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    ready.wait(5)
    yield fakes
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def workload(count, gap_s=0.01):
    sessions = [Session(i * gap_s, [BenchRequest(rid=i, path="/v1/chat/completions", body=b'{"messages":[]}',
                                                 prompt_tokens=100, max_tokens=3, block_keys=[])])
                for i in range(count)]
    return Workload(name="fake", title="", description="", sessions=sessions)


class SlowRouter:
    """Routes everything to one pod after a fixed delay (stands for the oracle's cache queries)."""

    def __init__(self, pool, delay_s):
        self.pool, self.delay_s, self.active = pool, delay_s, 0

    async def route(self, req):
        await asyncio.sleep(self.delay_s)
        self.active += 1
        return "slow", self.pool

    def done(self, name):
        self.active -= 1

    def pools(self):
        return [self.pool]


def test_every_send_records_its_lag_and_time_spent_routing_counts(pods):
    """Ensures each record carries its send lag, small when sent straight away, and at least the routing delay
    when something runs before the send."""
    records, _, _ = run_workload("127.0.0.1", pods[0].port, workload(10), 1.0, 30, progress=False)
    assert len(records) == 10 and all(r.ok for r in records)
    assert all(0 <= r.lag_ms < 1000 for r in records) and {r.pod for r in records} == {"pod-a"}
    from bench.loadgen import ConnectionPool
    router = SlowRouter(ConnectionPool("127.0.0.1", pods[0].port), 0.04)
    slow, _, _ = run_workload("127.0.0.1", 0, workload(5), 1.0, 30, progress=False, router=router)
    assert all(r.ok for r in slow) and all(r.lag_ms >= 40.0 for r in slow) and router.active == 0


def test_multi_turn_lag_is_measured_from_the_end_of_the_think_time(pods):
    """Ensures a session's later turns are due think_s after the previous turn ended (not at the session start)."""
    reqs = [BenchRequest(rid=i, path="/v1/chat/completions", body=b"{}", prompt_tokens=100, max_tokens=3,
                         block_keys=[]) for i in range(3)]
    w = Workload(name="fake", title="", description="", sessions=[Session(0.0, reqs, [0.05, 0.05])])
    records, _, _ = run_workload("127.0.0.1", pods[0].port, w, 1.0, 30, progress=False)
    assert len(records) == 3 and all(r.ok and r.lag_ms < 40 for r in records)


def test_the_oracle_routes_to_the_pod_with_the_cached_prefix(pods):
    """Ensures the oracle asks every pod per request, sends to the one holding the prefix (64 of 100 tokens beats
    the load term until it has 2 more in flight), counts in-flight requests and records the pod."""
    router = OracleRouter([(p.name, "127.0.0.1", p.port) for p in pods], seed=1)
    records, _, notes = run_workload("127.0.0.1", 0, workload(6, gap_s=0.05), 1.0, 30, progress=False,
                                     router=router)
    assert all(r.ok for r in records)
    assert {r.pod for r in records} == {"pod-b"} and all(r.cached_tokens == 64 for r in records)
    assert router.queries == 12 and pods[0].matches == pods[1].matches == 6
    assert router.in_flight == {"pod-a": 0, "pod-b": 0}
    assert notes["connections"] >= 3


def chat(sessions_turns, gap_s=0.01):
    """Sessions of the given numbers of turns, rids in order, the i-th starting at i x gap_s."""
    sessions, rid = [], 0
    for i, turns in enumerate(sessions_turns):
        reqs = [BenchRequest(rid=rid + t, path="/v1/chat/completions", body=b"{}", prompt_tokens=100, max_tokens=3,
                             block_keys=[]) for t in range(turns)]
        rid += turns
        sessions.append(Session(i * gap_s, reqs, [0.0] * (turns - 1)))
    return sessions


def test_replica_plan_is_round_robin_and_moves_each_turn_to_the_next_replica():
    """Ensures single requests go round-robin in start order (not list order), a conversation's next turn always
    goes to the next replica, the load is even, and one replica gets everything."""
    singles = chat([1] * 7)
    singles.reverse()   # list order is not start order
    plan = replica_plan(singles, 3)
    assert [plan[rid] for rid in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    turns = chat([3, 3, 3, 3])
    plan = replica_plan(turns, 3)
    assert [[plan[r.rid] for r in s.requests] for s in turns] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    two = replica_plan(turns, 2)
    for s in turns:
        assert all(two[a.rid] != two[b.rid] for a, b in zip(s.requests, s.requests[1:]))
    assert sorted(two.values()).count(0) == 6
    assert set(replica_plan(turns, 1).values()) == {0}


def test_requests_reach_the_replicas_the_plan_names(pods):
    """Ensures that with two replicas each request is sent to the gateway the plan names (the fake pod that
    answered it), records which, and both connection pools are used and closed."""
    w = Workload(name="fake", title="", description="", sessions=chat([3, 2, 1]))
    plan = replica_plan(w.sessions, 2)
    replicas = [("127.0.0.1", p.port) for p in pods]
    records, _, notes = run_workload("127.0.0.1", 0, w, 1.0, 30, progress=False, replicas=replicas)
    assert len(records) == 6 and all(r.ok for r in records)
    assert {r.rid: r.pod for r in records} == {rid: pods[i].name for rid, i in plan.items()}
    assert {r.rid: r.replica for r in records} == plan
    assert [p.completions for p in pods] == [4, 2] and notes["connections"] >= 2   # 0 1 0, 1 0, 0


def test_every_request_names_its_session(pods):
    """Ensures each request carries x-session-id naming its session (session-affinity pins conversations by it):
    the turns of one session share an id, different sessions do not."""
    w = Workload(name="fake", title="", description="", sessions=chat([3, 2]))
    records, _, _ = run_workload("127.0.0.1", pods[0].port, w, 1.0, 30, progress=False)
    assert len(records) == 5 and all(r.ok for r in records)
    assert sorted(pods[0].session_ids) == ["s0", "s0", "s0", "s1", "s1"]


def test_each_record_carries_the_gateways_prefix_match_header(pods):
    """Ensures x-prefix-match-percent is recorded per request (pod-b sends 75), -1 without it (pod-a) or when it is
    not a number."""
    w = Workload(name="fake", title="", description="", sessions=chat([1, 1, 1, 1]))
    replicas = [("127.0.0.1", p.port) for p in pods]
    records, _, _ = run_workload("127.0.0.1", 0, w, 1.0, 30, progress=False, replicas=replicas)
    assert len(records) == 4 and all(r.ok for r in records)
    assert sorted((r.pod, r.match_percent) for r in records) == [("pod-a", -1)] * 2 + [("pod-b", 75)] * 2
    assert match_percent({"x-prefix-match-percent": "100"}) == 100
    assert match_percent({"x-prefix-match-percent": "-"}) == match_percent({}) == -1
    assert match_percent({"x-prefix-match-percent": "\xb2"}) == -1   # a latin-1 superscript two: isdigit(), no int


def test_each_record_carries_the_gateways_prefill_pod_header(pods):
    """Ensures a disaggregated request's prefill-pod header is recorded next to its target pod (pod-b sends
    prefill-0), and "" without it (pod-a: an aggregated request)."""
    w = Workload(name="fake", title="", description="", sessions=chat([1, 1]))
    replicas = [("127.0.0.1", p.port) for p in pods]
    records, _, _ = run_workload("127.0.0.1", 0, w, 1.0, 30, progress=False, replicas=replicas)
    assert sorted((r.pod, r.prefill_pod) for r in records) == [("pod-a", ""), ("pod-b", "prefill-0")]


def test_a_conversation_carries_the_replies_the_engine_streamed(pods):
    """Ensures a carry_replies session builds each turn's body at send time: the history so far, with the reply
    text actually streamed for every earlier turn as the assistant message, then the turn's own messages; and that
    capture keeps each record's body, reply and the engine's timings."""
    fields = {"model": "m", "max_tokens": 3, "stream": True}
    turns = [BenchRequest(rid=t, path="/v1/chat/completions", body=b"", prompt_tokens=0, max_tokens=3, block_keys=[],
                          new_messages=[{"role": "user", "content": f"q{t}"}], body_fields=fields) for t in range(3)]
    w = Workload(name="fake", title="", description="", sessions=[Session(0.0, turns, carry_replies=True)],
                 mode="closed", concurrency=1)
    records, _, _ = run_workload("127.0.0.1", pods[0].port, w, 1.0, 30, progress=False)
    assert len(records) == 3 and all(r.ok for r in records)
    sent = [json.loads(b) for b in pods[0].bodies]
    assert sent[0] == {**fields, "messages": [{"role": "user", "content": "q0"}]}
    assert sent[2]["messages"] == [{"role": "user", "content": "q0"}, {"role": "assistant", "content": " the the the"},
                                   {"role": "user", "content": "q1"}, {"role": "assistant", "content": " the the the"},
                                   {"role": "user", "content": "q2"}]
    by_rid = {r.rid: r for r in records}
    assert [json.loads(by_rid[t].body) for t in range(3)] == sent
    assert all(r.reply == " the the the" and r.timings == {"cache_n": 0, "prompt_n": 7} for r in records)
    assert all(r.completion_tokens == 3 and r.ttft_s > 0 and len(r.itl_s) == 2 for r in records)


def test_without_capture_nothing_is_kept_but_the_figures(pods):
    """Ensures the default (no capture, prepared bodies) keeps neither bodies nor replies, and measures the same."""
    records, _, _ = run_workload("127.0.0.1", pods[0].port, workload(2), 1.0, 30, progress=False)
    assert all(r.ok and r.body == b"" and r.reply == "" and r.timings is None for r in records)
    assert all(r.completion_tokens == 3 and len(r.itl_s) == 2 for r in records)
