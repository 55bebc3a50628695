"""OpenTelemetry tracing (docs/configuration.md, "Tracing") through the real gateway and simulator, with a fake
OTLP/HTTP collector that records every POSTed ExportTraceServiceRequest: a client's trace is continued (request span
under the client's span; tokenize, route and upstream attempt spans under it), the engine is told the attempt's span
as parent, a trace is started when the client sends none (and the JSON log names it), sampling is parent-based, a
failover is two attempt spans, and a collector that hangs or is down costs counted spans, never a request. With
tracing off the client's trace headers reach the engine untouched."""
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import free_port, wait_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")
SERVER, CLIENT, INTERNAL = 2, 3, 1
SPAN_WAIT_S = 10


class Collector:
    """A fake OTLP/HTTP collector on a free loopback port: records each request's JSON body and content type."""

    def __init__(self):
        self.requests, self.lock = [], threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with collector.lock:
                    collector.requests.append((self.path, self.headers.get("content-type"), json.loads(body)))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def spans(self):
        """Every span received so far, each with its resource attributes under "_resource"."""
        out = []
        with self.lock:
            for _, _, request in self.requests:
                for rs in request["resourceSpans"]:
                    resource = attributes(rs["resource"])
                    for ss in rs["scopeSpans"]:
                        assert ss["scope"]["name"] == "prefixgate"
                        out += [{**span, "_resource": resource} for span in ss["spans"]]
        return out

    def trace(self, trace_id):
        return [s for s in self.spans() if s["traceId"] == trace_id]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.stop()


def attributes(holder):
    """An OTLP attribute list as a dict of Python values (intValue is a decimal string in OTLP/JSON)."""
    out = {}
    for a in holder.get("attributes", []):
        (kind, value), = a["value"].items()
        out[a["key"]] = int(value) if kind == "intValue" else value
    return out


def traced(endpoint, **tracing):
    return {"tracing": {"otlp_endpoint": endpoint, "export_delay_ms": 50, **tracing}}


LONG_PROMPT = "Trace this request through the gateway, the router and the engine. " * 8


def chat(gw, headers=None, content=LONG_PROMPT, model="sim-model", stream=False):
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 3, "stream": stream}
    return gw.call("POST", "/v1/chat/completions", json.dumps(body), headers)


def complete_trace(collector, trace_id, attempts=1):
    """Waits (bounded) until the trace's request span and its tokenize, route and attempt spans arrived."""
    def ready():
        spans = collector.trace(trace_id)
        kinds = [s["kind"] for s in spans]
        names = {s["name"] for s in spans}
        return spans if SERVER in kinds and kinds.count(CLIENT) >= attempts and {"tokenize", "route"} <= names \
            else None
    return wait_until(ready, timeout=SPAN_WAIT_S, what=f"the spans of trace {trace_id}")


def engine_request(sims, pod):
    """The last chat request the engine named `pod` received (its headers lower-cased)."""
    sim = next(s for s in sims if s.name == pod)
    return [r for r in sim.requests() if r["path"] == "/v1/chat/completions"][-1]


def test_client_trace_continued_with_children_and_propagated(sims, gateway_factory, collector):
    """(a) A request with a client traceparent yields spans in that trace: the request span (kind server) is a
    child of the client's span, tokenize/route (internal) and the attempt (client) are children of the request span,
    ids are lowercase hex of 32/16 digits, the GenAI attributes are set, the route and attempt spans name the pod the
    response's target-pod header named, and the first token is an event. (b) The engine received one traceparent:
    the same trace, the attempt span's id as parent, the sampled flag, plus the client's tracestate."""
    gw = gateway_factory(sims, config={**traced(collector.endpoint), "routing": {"strategy": "prefix-cache"}})
    status, headers, raw = chat(gw, {"traceparent": TRACEPARENT, "tracestate": TRACESTATE})
    assert status == 200, raw
    pod = headers["target-pod"]
    spans = complete_trace(collector, TRACE_ID)
    assert all(path == "/v1/traces" and ctype == "application/json" for path, ctype, _ in collector.requests)

    for s in spans:
        assert HEX32.match(s["traceId"]) and HEX16.match(s["spanId"]) and HEX16.match(s["parentSpanId"]), s
        assert int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]) > 0, s
        assert isinstance(s["startTimeUnixNano"], str) and isinstance(s["kind"], int), s
        assert s["_resource"]["service.name"] == "prefixgate"
    request = next(s for s in spans if s["kind"] == SERVER)
    assert request["parentSpanId"] == CLIENT_SPAN
    assert request["name"] == "POST /v1/chat/completions"
    assert request["traceState"] == TRACESTATE
    children = [s for s in spans if s is not request]
    assert len(children) == 3, [s["name"] for s in spans]
    assert all(s["parentSpanId"] == request["spanId"] for s in children)
    assert len({s["spanId"] for s in spans}) == len(spans)

    req = attributes(request)
    assert req["gen_ai.request.model"] == "sim-model" and req["gen_ai.operation.name"] == "chat"
    assert req["gen_ai.usage.output_tokens"] >= 1 and req["gen_ai.usage.input_tokens"] >= 1, req
    assert req["http.request.method"] == "POST" and req["url.path"] == "/v1/chat/completions"
    assert req["http.response.status_code"] == 200
    assert req["prefixgate.strategy"] == "prefix-cache" and req["prefixgate.pod"] == pod
    assert request["status"]["code"] == 0
    assert [e["name"] for e in request.get("events", [])] == ["first_token"]

    route = next(s for s in children if s["name"] == "route")
    assert route["kind"] == INTERNAL
    r = attributes(route)
    assert r["prefixgate.pod"] == pod and r["prefixgate.strategy"] == "prefix-cache"
    assert 0 <= r["prefixgate.prefix_match_percent"] <= 100 and r["prefixgate.prompt_blocks"] >= 1, r
    assert "prefixgate.predicted_cached_tokens" in r and r["prefixgate.candidates"] == 3, r
    tokenize = next(s for s in children if s["name"] == "tokenize")
    assert tokenize["kind"] == INTERNAL and attributes(tokenize)["prefixgate.tokens_source"] == "local"

    attempt = next(s for s in children if s["kind"] == CLIENT)
    a = attributes(attempt)
    sim = next(s for s in sims if s.name == pod)
    assert a["prefixgate.pod"] == pod and a["server.port"] == sim.port and a["server.address"] == "127.0.0.1"
    assert a["http.response.status_code"] == 200 and a["prefixgate.attempt"] == 1, a

    seen = engine_request(sims, pod)["headers"]
    assert seen["traceparent"] == f"00-{TRACE_ID}-{attempt['spanId']}-01"  # one value: replaced, not duplicated
    assert seen["tracestate"] == TRACESTATE


def raw_chat(gw, header_lines):
    """A chat request sent over a raw socket, so a header can be given twice; returns the response head's lines."""
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": LONG_PROMPT}],
                       "max_tokens": 3}).encode()
    head = ["POST /v1/chat/completions HTTP/1.1", f"host: 127.0.0.1:{gw.port}", "content-type: application/json",
            f"content-length: {len(body)}", "connection: close", *header_lines]
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")


def test_repeated_trace_headers_follow_w3c(sims, gateway_factory, collector):
    """W3C Trace Context: two traceparent headers are no parent to trust (a new trace starts, neither id is
    continued), and several tracestate headers are one list, passed on joined in their order."""
    gw = gateway_factory(sims, config=traced(collector.endpoint))
    other = "0af7651916cd43dd8448eb211c80319c"
    lines = raw_chat(gw, [f"traceparent: {TRACEPARENT}", f"traceparent: 00-{other}-b7ad6b7169203331-01"])
    assert lines[0].endswith("200 OK"), lines
    pod = next(line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("target-pod:"))
    seen = engine_request(sims, pod)["headers"]["traceparent"]
    assert seen.split("-")[1] not in (TRACE_ID, other), seen
    lines = raw_chat(gw, [f"traceparent: {TRACEPARENT}", "tracestate: congo=t61rcWkgMzE", "tracestate: rojo=1"])
    pod = next(line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("target-pod:"))
    seen = engine_request(sims, pod)["headers"]
    assert seen["traceparent"].split("-")[1] == TRACE_ID
    assert seen["tracestate"] == "congo=t61rcWkgMzE,rojo=1"


def test_new_trace_started_and_named_in_the_json_log(sims, gateway_factory, collector):
    """(c) Without a client traceparent the gateway starts a trace: a root request span with a fresh trace id, which
    the engine is told and the JSON log line's trace_id names; a streamed response's first token is an event."""
    gw = gateway_factory(sims, config={**traced(collector.endpoint), "log_format": "json"})
    status, headers, raw = chat(gw, {"x-request-id": "untraced-1"}, stream=True)
    assert status == 200, raw
    request = wait_until(lambda: next((s for s in collector.spans() if s["kind"] == SERVER), None),
                         timeout=SPAN_WAIT_S, what="the request span")
    trace_id = request["traceId"]
    assert HEX32.match(trace_id) and trace_id != "0" * 32
    assert "parentSpanId" not in request
    assert attributes(request)["prefixgate.request_id"] == "untraced-1"
    assert attributes(request)["prefixgate.stream"] is True
    assert [e["name"] for e in request.get("events", [])] == ["first_token"]
    spans = complete_trace(collector, trace_id)
    attempt = next(s for s in spans if s["kind"] == CLIENT)
    assert engine_request(sims, headers["target-pod"])["headers"]["traceparent"] == \
        f"00-{trace_id}-{attempt['spanId']}-01"
    gw.stop()
    lines = [json.loads(line) for line in gw.log_path.read_text().splitlines()]
    logged = next(r for r in lines if r.get("msg") == "request" and r.get("id") == "untraced-1")
    assert logged["trace_id"] == trace_id


def test_sampling_is_parent_based(sims, gateway_factory, collector):
    """(d) At sample_ratio 0 a request without a parent records no span (yet the engine is told its trace, unsampled),
    while a client's sampled parent is obeyed: its spans are exported."""
    gw = gateway_factory(sims, config=traced(collector.endpoint, sample_ratio=0))
    status, headers, _ = chat(gw, {"x-request-id": "no-parent"})
    assert status == 200
    seen = engine_request(sims, headers["target-pod"])["headers"]["traceparent"]
    assert re.match(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-00$", seen), seen
    unsampled_trace = seen.split("-")[1]
    assert chat(gw, {"traceparent": TRACEPARENT})[0] == 200
    complete_trace(collector, TRACE_ID)
    # The unsampled request ended first: had it been recorded, its spans would have left no later than these.
    assert {s["traceId"] for s in collector.spans()} == {TRACE_ID}
    assert not collector.trace(unsampled_trace)
    unsampled_parent = f"00-{'1' * 32}-{CLIENT_SPAN}-00"
    gw2 = gateway_factory(sims, config=traced(collector.endpoint, sample_ratio=1))
    assert chat(gw2, {"traceparent": unsampled_parent})[0] == 200
    assert chat(gw2, {"traceparent": f"00-{'2' * 32}-{CLIENT_SPAN}-01"})[0] == 200
    complete_trace(collector, "2" * 32)
    assert not collector.trace("1" * 32)  # an unsampled parent at ratio 1: still not recorded


def test_failover_is_two_attempt_spans(sims, gateway_factory, collector):
    """(f) A pod answering 500 before the response began: the request is sent again to another pod, and the trace
    has two attempt spans under the request span, the first failed (500, error status), the second answered; the
    engine that answered was told the second attempt's span as parent."""
    failing = sims[0]
    failing.fault(error_status=500)
    gw = gateway_factory(sims[:2], config=traced(collector.endpoint))
    for i in range(20):  # the first choice is the failing pod about half the time (ties are random)
        trace_id = f"{i + 1:032x}"
        status, headers, raw = chat(gw, {"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}, content=f"failover {i} " + LONG_PROMPT)
        assert status == 200, raw
        if headers["target-pod"] != failing.name and any(
                r["status"] == 500 for r in failing.requests() if r["path"] == "/v1/chat/completions"):
            spans = complete_trace(collector, trace_id)
            attempts = sorted((s for s in spans if s["kind"] == CLIENT), key=lambda s: int(s["startTimeUnixNano"]))
            if len(attempts) == 2:
                break
    else:
        pytest.fail("no request was tried on the failing pod first")
    request = next(s for s in spans if s["kind"] == SERVER)
    first, second = attempts
    assert all(s["parentSpanId"] == request["spanId"] for s in attempts)
    f, s = attributes(first), attributes(second)
    assert f["prefixgate.pod"] == failing.name and f["http.response.status_code"] == 500
    assert f["error.type"] and first["status"]["code"] == 2 and f["prefixgate.attempt"] == 1
    assert s["prefixgate.pod"] == headers["target-pod"] and s["http.response.status_code"] == 200
    assert s["prefixgate.attempt"] == 2 and second["status"]["code"] == 0
    assert attributes(request)["prefixgate.retries"] == 1
    assert engine_request(sims, headers["target-pod"])["headers"]["traceparent"] == \
        f"00-{trace_id}-{second['spanId']}-01"


def hanging_collector():
    """A socket that completes TCP handshakes (its backlog) and never reads nor answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


@pytest.mark.parametrize("kind", ["hangs", "down"])
def test_slow_or_absent_collector_costs_spans_not_requests(sims, gateway_factory, kind):
    """(e) A collector that accepts and never answers, or none at all: every request still succeeds promptly, the
    spans that could not leave are counted (failed_export, and dropped_queue_full once the small buffer is full),
    and the gateway still stops promptly (its flush is bounded by export_timeout_ms)."""
    hang = hanging_collector() if kind == "hangs" else None
    port = hang.getsockname()[1] if hang else free_port()
    try:
        gw = gateway_factory(sims, config=traced(f"http://127.0.0.1:{port}/v1/traces", export_delay_ms=20,
                                                 export_timeout_ms=300, max_queued_spans=4, max_batch_spans=2))
        for i in range(12):
            started = time.monotonic()
            assert chat(gw, content=f"collector {kind} {i}")[0] == 200
            assert time.monotonic() - started < 3, "a request waited for the collector"
        wait_until(lambda: gw.metric("prefixgate_trace_spans_total", outcome="failed_export") > 0,
                   timeout=SPAN_WAIT_S, what="failed exports counted")
        if kind == "hangs":  # 48 spans against 4 places while each export waits 300 ms
            wait_until(lambda: gw.metric("prefixgate_trace_spans_total", outcome="dropped_queue_full") > 0,
                       timeout=SPAN_WAIT_S, what="dropped spans counted")
        assert gw.metric("prefixgate_trace_export_batches_total", outcome="failed") > 0
        assert gw.metric("prefixgate_trace_spans_total", outcome="exported") == 0
        started = time.monotonic()
        gw.stop()
        assert time.monotonic() - started < 8
    finally:
        if hang:
            hang.close()


def test_tracing_off_passes_client_headers_through(sims, gateway_factory):
    """With otlp_endpoint empty (the default) the client's traceparent and tracestate reach the engine as sent and no
    trace metric is exported."""
    gw = gateway_factory(sims)
    status, headers, _ = chat(gw, {"traceparent": TRACEPARENT, "tracestate": TRACESTATE})
    assert status == 200
    seen = engine_request(sims, headers["target-pod"])["headers"]
    assert seen["traceparent"] == TRACEPARENT and seen["tracestate"] == TRACESTATE
    assert "prefixgate_trace_spans_total" not in gw.metrics_text()
