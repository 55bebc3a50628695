#!/usr/bin/python3
"""Per-event delay of a streaming proxy, measured with timestamps the events carry.

`sse_probe.py serve` is an SSE upstream: every POST gets `max_tokens` events (default 500), one every --gap-ms,
each `data: {"i": N, "t": <CLOCK_MONOTONIC ns at the moment it is written>}`, then `data: [DONE]`; it also answers
GET /health and /metrics (for prefixgate's health checks). `probe()` streams through a target and, for every
event, takes arrival time - t (both CLOCK_MONOTONIC on the same machine): the delay the path added to that event.
Against direct, that is the proxy's per-event delay, whether it forwards events at once or holds them.
(prefixgate-engine-sim at --time-scale 0 sends events back to back, which measures the simulator's own write rate,
not the proxy: every proxy came out "faster than direct" that way.)
"""
import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.loadgen import parse_head, read_chunked  # noqa: E402

EVENTS = 500


def _chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _serve_one(reader, writer, gap_s):
    head = await reader.readuntil(b"\r\n\r\n")
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    _, headers = parse_head(b"HTTP/1.1 000 x\r\n" + head.split(b"\r\n", 1)[1])
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    if request_line[0] == "GET":
        text = b"ok" if request_line[1] == "/health" else b""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text))
        return
    events = int(json.loads(body or b"{}").get("max_tokens", EVENTS))
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    await writer.drain()
    start = time.monotonic()
    for i in range(events):
        delay = start + (i + 1) * gap_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        writer.write(_chunk(b'data: {"i":%d,"t":%d}\n\n' % (i, time.monotonic_ns())))
        await writer.drain()
    writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


async def serve(port, gap_s):
    async def connection(reader, writer):
        try:
            while True:
                await _serve_one(reader, writer, gap_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", port, backlog=1024)
    print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


async def _stream(host, port, body, delays):
    """Streams one connection's responses; appends each event's delay (us); returns stray last chunks seen."""
    reader, writer = await asyncio.open_connection(host, port)
    stray = 0
    try:
        for request in body:
            writer.write(request)
            await writer.drain()
            raw = await reader.readuntil(b"\r\n\r\n")
            while raw == b"0\r\n\r\n":   # a server bug: a second last chunk after the previous response
                stray += 1
                raw = await reader.readuntil(b"\r\n\r\n")
            status, _ = parse_head(raw)
            if status != 200:
                raise RuntimeError(f"HTTP {status}")
            pending = [b""]

            def on_data(data, _now):
                arrived = time.monotonic_ns()
                events = (pending[0] + data).split(b"\n\n")
                pending[0] = events.pop()
                for event in events:
                    at = event.find(b'"t":')
                    if at >= 0:
                        delays.append((arrived - int(event[at + 4:event.index(b"}", at)])) / 1000.0)

            await read_chunked(reader, on_data)
    finally:
        writer.close()
    return stray


def probe(url_host, url_port, connections=2, streams=6, events=EVENTS, delays=None):
    """Per-event delays in microseconds through host:port: `connections` keep-alive connections, each streaming
    `streams` responses of `events` events. Returns (delays, stray last chunks). `delays`: a list to append to as
    the events arrive (another thread may watch it grow), or None for a new one."""
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "stream please"}],
                       "max_tokens": events, "stream": True}).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url_host}:{url_port}\r\nContent-Type: application/json"
               f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    delays = [] if delays is None else delays

    async def main():
        return await asyncio.gather(*(_stream(url_host, url_port, [request] * streams, delays)
                                      for _ in range(connections)))

    strays = asyncio.run(main())
    return delays, sum(strays)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the timestamped SSE upstream")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--gap-ms", type=float, default=1.0, help="time between events")
    p = sub.add_parser("probe", help="measure per-event delays through HOST:PORT")
    p.add_argument("address", help="HOST:PORT")
    p.add_argument("--connections", type=int, default=2)
    p.add_argument("--streams", type=int, default=6)
    args = ap.parse_args()
    if args.command == "serve":
        try:
            asyncio.run(serve(args.port, args.gap_ms / 1000.0))
        except KeyboardInterrupt:
            pass
        return 0
    host, port = args.address.rsplit(":", 1)
    delays, stray = probe(host, int(port), args.connections, args.streams)
    delays.sort()
    print(json.dumps({"events": len(delays), "p50_us": delays[len(delays) // 2],
                      "p99_us": delays[int(len(delays) * 0.99)], "stray_last_chunks": stray}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
