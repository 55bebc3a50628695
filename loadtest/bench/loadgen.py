"""The load generator: streaming chat/completion requests over raw HTTP/1.1 keep-alive connections (asyncio).

Two modes:
- open loop: each session starts at its own time (Poisson arrivals or a trace's timestamps) whatever the server
  is doing, so an overloaded server builds a queue, as in production;
- closed loop: `concurrency` users, each sending its next session as soon as the previous one ends.

Per request it records TTFT (send -> first chunk with content), the gaps between content chunks (ITL), the
end-to-end time, the usage chunk's prompt/cached/completion tokens, the `target-pod` header (or the simulator's
`x-sim-pod` when sent to a pod directly), a disaggregated request's `prefill-pod` header and
`x-prefix-match-percent`, errors, and the send lag: wall milliseconds between the moment the request was due (its
session's arrival time, or the end of the previous turn + the think time) and the moment its bytes were written.
Several gateway replicas (`replicas=`) get the requests round-robin (replica_plan). Everything the client does
before writing (waiting for the event loop, opening a connection, the oracle's cache queries) counts in the lag, so
a client too busy to keep the schedule shows in it. Content chunks are recognised by a byte search, not a JSON
parse; only the usage chunk is parsed, which keeps one Python process at thousands of events per second. For real
engines (`capture=True`, and whenever a session carries the engine's replies: Session.carry_replies) every event is
parsed: the record keeps the body sent, the streamed reply text and llama.cpp's `timings`, and a conversation's next
turn carries the reply the engine actually generated.
Every loop is bounded: by the requests given, by a per-request
timeout and by a deadline for the whole run.
"""
import asyncio
import json
import sys
import time

from bench.stats import LAG_LIMIT_MS, percentile

from bench.model import Record

_HEAD_LIMIT = 1 << 16
# A second "0\r\n\r\n" after a complete chunked response is a server bug (HTTP/1.1 allows none): a strict
# client would take it for the next response. It is skipped here, counted, and shown in the report, so the
# latency figures stay usable while the bug is visible.
_LAST_CHUNK = b"0\r\n\r\n"


class ConnectionPool:
    """Idle keep-alive connections to one host:port, opened on demand."""

    def __init__(self, host, port):
        self.host, self.port, self.idle, self.opened = host, port, [], 0
        self.host_header = f"{host}:{port}"

    async def acquire(self, fresh=False):
        """(reader, writer), and whether it was used before (a server may have closed it since)."""
        if self.idle and not fresh:
            return self.idle.pop(), True
        self.opened += 1
        return await asyncio.open_connection(self.host, self.port, limit=_HEAD_LIMIT), False

    def release(self, conn, reusable):
        if reusable:
            self.idle.append(conn)
        else:
            conn[1].close()

    def close(self):
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


def parse_head(raw):
    """(status, lower-cased header dict) of a response head."""
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers


def match_percent(headers):
    """The gateway's x-prefix-match-percent (0-100), or -1 when absent or not a number (no prefix strategy ran)."""
    value = headers.get("x-prefix-match-percent", "")
    return int(value) if value.isascii() and value.isdigit() else -1


def flow_header_lines(req):
    """The flow-control headers of a request (x-tenant-id, x-request-priority, x-slo-ttft-ms), as header lines;
    "" for a request that sets none (every workload but the flow ones)."""
    lines = ""
    if req.tenant:
        lines += f"X-Tenant-Id: {req.tenant}\r\n"
    if req.priority:
        lines += f"X-Request-Priority: {req.priority}\r\n"
    if req.slo_ttft_ms and req.send_slo_header:
        lines += f"X-Slo-Ttft-Ms: {int(req.slo_ttft_ms)}\r\n"
    return lines


def error_fields(body):
    """(error.code, error.type, error.message[:200]) of an OpenAI-shaped error body ({"error": {"code", "type",
    "message"}}), each as text ("" when absent); ("", "", "") when the body is not one."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return "", "", ""
    if not isinstance(error, dict):
        return "", "", ""

    def text(value):
        return "" if value is None or isinstance(value, (dict, list)) else str(value)
    return text(error.get("code")), text(error.get("type")), text(error.get("message"))[:200]


class _Stream:
    """Splits a chunked SSE body into events and notes content arrivals (one content event = one token). With
    `capture` every event is parsed instead: the reply's text and llama.cpp's `timings` are kept on the record."""

    def __init__(self, record, sent_at, scale, capture=False):
        self.record, self.sent_at, self.scale, self.capture = record, sent_at, scale, capture
        self.pending = b""
        self.last_token_at = None
        self.done = False
        self.parts = []

    def feed(self, data, now):
        if self.pending:
            data = self.pending + data
        events = data.split(b"\n\n")
        self.pending = events.pop()
        for event in events:
            self._event(event, now)

    def _token(self, now):
        rec = self.record
        if self.last_token_at is None:
            rec.ttft_s = (now - self.sent_at) * self.scale
        else:
            rec.itl_s.append((now - self.last_token_at) * self.scale)
        self.last_token_at = now

    def _usage(self, usage):
        self.record.prompt_tokens = usage.get("prompt_tokens", 0)
        self.record.completion_tokens = usage.get("completion_tokens", 0)
        self.record.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0

    def _event(self, event, now):
        if not event.startswith(b"data: "):
            return
        if event.startswith(b"data: [DONE]"):
            self.done = True
        elif self.capture:
            self._parsed(json.loads(event[6:]), now)
        elif b'"content":"' in event or (b'"text":"' in event and b'"text":""' not in event):
            self._token(now)
        elif b'"usage":{' in event:
            self._usage(json.loads(event[6:]).get("usage") or {})

    def _parsed(self, chunk, now):
        text = ""
        for choice in chunk.get("choices") or []:
            text += (choice.get("delta") or {}).get("content") or choice.get("text") or ""
        if text:
            self._token(now)
            self.parts.append(text)
            self.record.reply = "".join(self.parts)
        if chunk.get("usage"):
            self._usage(chunk["usage"])
        if isinstance(chunk.get("timings"), dict):
            self.record.timings = chunk["timings"]


async def read_chunked(reader, on_data):
    """Reads a chunked body to its end, calling on_data(bytes, arrival time) per chunk."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, normally none
                pass
            return
        data = await reader.readexactly(size + 2)
        on_data(data[:-2], time.perf_counter())


def conversation_body(req, history):
    """The JSON body of a carry_replies turn: its body_fields with the conversation so far as `messages`."""
    return json.dumps({**(req.body_fields or {}), "messages": list(history)}).encode()


def replica_plan(sessions, replicas):
    """{request rid: replica index}: a workload spread round-robin over `replicas` gateways. The i-th session to
    start goes to replica i mod N and each next turn of it to the next replica, so the load is even and consecutive
    turns of one conversation never reach the same replica (the case state sync between replicas is for); fixed by
    the workload, not by the timing of a run, so every strategy and seed spreads the same requests the same way."""
    plan = {}
    for i, session in enumerate(sorted(sessions, key=lambda s: s.start_s)):
        for turn, req in enumerate(session.requests):
            plan[req.rid] = (i + turn) % replicas
    return plan


class LoadGenerator:
    """Sends a workload's sessions to host:port, or round-robin to several gateway `replicas` ([(host, port)]; see
    replica_plan), or through `router` (an object with `async route(req) -> (pod name, ConnectionPool)` and
    `done(pod name)`: the oracle), and returns one Record per request sent."""

    def __init__(self, host, port, time_scale, request_timeout_s=600.0, max_in_flight=2048, progress=None,
                 label="", router=None, replicas=None, capture=False):
        self.pools = [ConnectionPool(h, p) for h, p in replicas or [(host, port)]] if router is None else []
        self.plan = {}
        self.session_of = {}  # request rid -> its session's index: sent as x-session-id (session-affinity)
        self.router = router
        self.scale = 1.0 / time_scale        # wall seconds -> simulated seconds
        self.time_scale = time_scale
        self.request_timeout_s = request_timeout_s
        self.max_in_flight = max_in_flight
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.label = label
        # capture=True (real engines): each record keeps its body, reply text and timings (every event parsed).
        self.capture = capture
        self.records, self.in_flight, self.total = [], 0, 0
        self.stray_last_chunks = 0
        self.t0 = 0.0

    # --- one request -------------------------------------------------------------------------------------------
    async def _send(self, req, due, body=None):
        """Sends one request that was due at perf_counter() time `due` (its body: `body`, else req.body)."""
        rec = Record(rid=req.rid, group=req.group, stage=req.stage, send_s=(time.perf_counter() - self.t0) * self.scale,
                     expected_prompt_tokens=req.prompt_tokens)
        body = req.body if body is None else body
        if self.capture:
            rec.body = body
        self.in_flight += 1
        rec.replica = self.plan.get(req.rid, 0)
        conn, reusable, pool, routed = None, False, self.pools[rec.replica] if self.pools else None, None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                if self.router is not None:
                    routed, pool = await self.router.route(req)
                    rec.pod = routed
                conn, reused = await pool.acquire()
                sent_at = time.perf_counter()   # connect time is not the server's latency, but it is lag
                rec.lag_ms = (sent_at - due) * 1000.0
                rec.send_s = (sent_at - self.t0) * self.scale
                try:
                    reusable = await self._exchange(conn, pool, req, body, rec, sent_at)
                except (OSError, asyncio.IncompleteReadError):
                    if not reused or rec.status:
                        raise
                    # An idle keep-alive connection the server had closed: once more on a new one.
                    pool.release(conn, False)
                    conn = None
                    conn, _ = await pool.acquire(fresh=True)
                    sent_at = time.perf_counter()
                    rec.send_s = (sent_at - self.t0) * self.scale
                    reusable = await self._exchange(conn, pool, req, body, rec, sent_at)
        except asyncio.CancelledError:
            rec.error = rec.error or "cancelled at the run deadline"
            raise
        except TimeoutError:
            rec.error = f"timeout after {self.request_timeout_s:.0f} s"
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            rec.error = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            self.in_flight -= 1
            self.records.append(rec)
            if routed is not None:
                self.router.done(routed)
            if conn is not None:
                pool.release(conn, reusable and not rec.error)
        return rec

    async def _exchange(self, conn, pool, req, body, rec, sent_at):
        reader, writer = conn
        session = self.session_of.get(req.rid)
        session_line = f"X-Session-Id: s{session}\r\n" if session is not None else ""
        head = (f"POST {req.path} HTTP/1.1\r\nHost: {pool.host_header}\r\nContent-Type: application/json\r\n"
                f"{session_line}{flow_header_lines(req)}Content-Length: {len(body)}\r\n\r\n").encode()
        writer.write(head + body)
        await writer.drain()
        raw_head = await reader.readuntil(b"\r\n\r\n")
        while raw_head == _LAST_CHUNK:   # a stray end of the previous response's chunked body: see _LAST_CHUNK
            self.stray_last_chunks += 1
            raw_head = await reader.readuntil(b"\r\n\r\n")
        status, headers = parse_head(raw_head)
        rec.status = status
        rec.pod = headers.get("target-pod") or headers.get("x-sim-pod") or rec.pod
        rec.prefill_pod = headers.get("prefill-pod", "")
        rec.match_percent = match_percent(headers)
        chunked = "chunked" in headers.get("transfer-encoding", "")
        if status != 200 or not chunked:
            body = []
            if chunked:
                await read_chunked(reader, lambda data, now: body.append(data))
            else:
                body.append(await reader.readexactly(int(headers.get("content-length", "0"))))
            rec.error = f"HTTP {status}: " + b"".join(body)[:160].decode(errors="replace")
            rec.error_code, rec.error_type, rec.error_message = error_fields(b"".join(body))
            rec.retry_after = headers.get("retry-after", "")
            if status == 200:
                rec.error = "expected a chunked SSE stream"
        else:
            stream = _Stream(rec, sent_at, self.scale, self.capture)
            await read_chunked(reader, stream.feed)
            if not stream.done:
                rec.error = "stream ended without data: [DONE]"
        rec.e2e_s = (time.perf_counter() - sent_at) * self.scale
        return headers.get("connection", "").lower() != "close"

    # --- sessions ----------------------------------------------------------------------------------------------
    async def _session(self, session, limit, due):
        """The session's requests in turn; the first was due at `due`, each next one think_s after the previous
        one ended. A carry_replies session builds each turn's body from the history with the replies streamed."""
        history = []
        for i, req in enumerate(session.requests):
            if i:
                think = session.think_s[i - 1] if i - 1 < len(session.think_s) else 0.0
                due = time.perf_counter() + max(0.0, think) * self.time_scale
                if think > 0:
                    await asyncio.sleep(think * self.time_scale)
            body = None
            if session.carry_replies:
                history += req.new_messages
                body = conversation_body(req, history)
            async with limit:
                rec = await self._send(req, due, body)
            if session.carry_replies:
                history.append({"role": "assistant", "content": rec.reply})

    async def _open_loop(self, sessions, limit, tasks):
        for session in sorted(sessions, key=lambda s: s.start_s):
            due = self.t0 + session.start_s * self.time_scale
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self._session(session, limit, due)))
        await asyncio.gather(*tasks)

    async def _closed_loop(self, sessions, limit, concurrency):
        queue = list(reversed(sessions))

        async def user():
            while queue:
                await self._session(queue.pop(), limit, time.perf_counter())

        await asyncio.gather(*(user() for _ in range(max(1, concurrency))))

    def _draw_progress(self):
        done, width = len(self.records), 30
        filled = int(width * done / max(1, self.total))
        errors = sum(1 for r in self.records if not r.ok)
        lag = percentile([r.lag_ms for r in self.records[-500:]], 99) if self.records else 0.0
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                         f"in flight {self.in_flight:<4} errors {errors:<4} lag p99 {lag:5.1f} ms"
                         f"{'!' if lag > LAG_LIMIT_MS else ' '} {time.perf_counter() - self.t0:6.1f} s ")
        sys.stderr.flush()

    async def _show_progress(self):
        while True:
            self._draw_progress()
            await asyncio.sleep(0.5)

    async def run(self, workload, deadline_s):
        """Sends every session of `workload`; stops at `deadline_s` wall seconds (in-flight requests are then
        recorded as errors, unsent ones are not recorded). Returns the records, in completion order."""
        self.total = sum(len(s.requests) for s in workload.sessions)
        self.capture = self.capture or any(s.carry_replies for s in workload.sessions)   # replies are needed
        self.session_of = {req.rid: i for i, s in enumerate(workload.sessions) for req in s.requests}
        if len(self.pools) > 1:
            self.plan = replica_plan(workload.sessions, len(self.pools))
        self.t0 = time.perf_counter()
        limit = asyncio.Semaphore(self.max_in_flight)
        tasks = []
        if workload.mode == "closed":
            main = asyncio.create_task(self._closed_loop(workload.sessions, limit, workload.concurrency))
        else:
            main = asyncio.create_task(self._open_loop(workload.sessions, limit, tasks))
        bar = asyncio.create_task(self._show_progress()) if self.progress else None
        try:
            await asyncio.wait_for(main, timeout=deadline_s)
        except TimeoutError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            if bar:
                bar.cancel()
                self._draw_progress()
                sys.stderr.write("\n")
            for pool in self.pools or self.router.pools():
                pool.close()
        return self.records


def run_workload(host, port, workload, time_scale, deadline_s, **options):
    """Runs one workload against host:port (or options["replicas"], or through options["router"]) on a fresh event
    loop; returns (records,
    wall seconds, notes), notes = {"connections": connections opened, "stray_last_chunks": responses followed by a
    second last chunk}."""
    gen = LoadGenerator(host, port, time_scale, **options)
    started = time.perf_counter()
    records = asyncio.run(gen.run(workload, deadline_s))
    pools = gen.pools or gen.router.pools()
    notes = {"connections": sum(p.opened for p in pools), "stray_last_chunks": gen.stray_last_chunks}
    return records, time.perf_counter() - started, notes
