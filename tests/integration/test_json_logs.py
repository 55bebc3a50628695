"""`log_format: json`: every line the gateway logs is one JSON object (docs/configuration.md, "Logs"), the request
line with the same fields as the text line plus `ts`, `level` and the trace id of a valid W3C traceparent; client
text with quotes, newlines or bytes that are not UTF-8 stays one parseable line. The flag `--log-format` overrides
the file and a bad value is refused naming the file and the key."""
import json
import socket
import subprocess

from harness import GATEWAY_BIN, Gateway

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def chat(gw, model, headers=None, raw_body=None):
    body = raw_body if raw_body is not None else json.dumps(
        {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hello there"}]})
    return gw.call("POST", "/v1/chat/completions", body, headers)


def raw_request(port, head):
    """Sends a request head as raw bytes (http.client refuses bytes that are not ASCII in a path) and reads the
    status line."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        return s.recv(4096).split(b"\r\n", 1)[0]


def log_records(gw):
    """Every line of the gateway's log (its stderr), each parsed as JSON; the file must be valid UTF-8."""
    text = gw.log_path.read_bytes().decode("utf-8")
    lines = text.splitlines()
    assert lines, "the gateway logged nothing"
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise AssertionError(f"not a JSON line: {line!r} ({e})")
    return records


def request_records(gw):
    return [r for r in log_records(gw) if r.get("msg") == "request"]


def test_every_log_line_is_json_and_requests_carry_their_fields(sims, gateway_factory):
    """Startup, request and shutdown lines at debug level are all JSON objects with ts, level and msg; the request
    line has the id, method, path, model, strategy, pod, match, status, latency and the traceparent's trace id, and
    client text that would break a line (quotes, a newline, bytes that are not UTF-8) is escaped or replaced."""
    gw = gateway_factory(sims, config={"log_format": "json", "log_level": "debug",
                                       "routing": {"strategy": "prefix-cache"}})
    status, headers, raw = chat(gw, "sim-model", {"traceparent": TRACEPARENT, "x-request-id": "traced-1"})
    assert status == 200, raw
    assert chat(gw, "sim-model", {"traceparent": "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                                  "x-request-id": "bad-trace"})[0] == 200
    weird = 'we"ird\\model\nwith é'
    assert chat(gw, weird, {"x-request-id": "weird-model"})[0] == 404
    assert chat(gw, None, {"x-request-id": "not-utf8"},
                raw_body=b'{"model": "m\xff\xfe", "messages": []}')[0] == 400
    status_line = raw_request(gw.port, b"POST /v1/chat/\xff\xfeq HTTP/1.1\r\nhost: x\r\nx-request-id: bad-path\r\n"
                                       b"content-length: 2\r\n\r\n{}")
    assert status_line.startswith(b"HTTP/1.1 4"), status_line
    gw.stop()  # its shutdown lines too

    records = log_records(gw)
    for record in records:
        assert list(record)[:3] == ["ts", "level", "msg"], record
        assert record["level"] in ("debug", "info", "warn", "error"), record
        assert record["ts"].endswith("Z") and "T" in record["ts"], record
    by_id = {r["id"]: r for r in records if r.get("msg") == "request" and "id" in r}
    traced = by_id["traced-1"]
    assert traced["trace_id"] == TRACE_ID
    assert traced["method"] == "POST" and traced["path"] == "/v1/chat/completions"
    assert traced["model"] == "sim-model" and traced["strategy"] == "prefix-cache"
    assert traced["pod"] == headers["target-pod"] and traced["status"] == 200
    assert traced["match"] >= 0 and traced["level"] == "info"
    assert isinstance(traced["latency_ms"], (int, float)) and traced["latency_ms"] >= traced["ttfb_ms"] >= 0
    assert traced["output_tokens"] >= 1
    assert "trace_id" not in by_id["bad-trace"]  # an all-zero trace id is not a trace
    assert by_id["weird-model"]["model"] == weird and by_id["weird-model"]["status"] == 404
    assert by_id["weird-model"]["reason"] and by_id["weird-model"]["error"]
    assert by_id["not-utf8"]["status"] == 400
    assert by_id["bad-path"]["path"] == "/v1/chat/\ufffd\ufffdq" and by_id["bad-path"]["status"] >= 400
    assert any(r["msg"] != "request" for r in records)  # other lines (startup, pods, shutdown) are JSON too


def test_the_text_format_is_the_default(sims, gateway_factory):
    """Without log_format the request line is the text line tools parse (`<time> INFO request id=...`)."""
    gw = gateway_factory(sims)
    assert chat(gw, "sim-model", {"traceparent": TRACEPARENT, "x-request-id": "plain"})[0] == 200
    gw.stop()
    lines = [line for line in gw.read_log().splitlines() if " request id=plain " in line]
    assert len(lines) == 1 and lines[0].split(" ")[1] == "INFO", lines
    assert "trace" not in lines[0] and not lines[0].startswith("{")


def test_the_flag_overrides_the_file_and_a_bad_value_names_file_and_key(tmp_path):
    """`--log-format` wins over the file's log_format; an unknown format fails `--check` with the file and key."""
    pods = tmp_path / "pods.yaml"
    pods.write_text("pods: []\n")
    config = tmp_path / "gw.yaml"
    config.write_text("log_format: json\ndiscovery: {file: pods.yaml}\n")

    def check(*flags):
        return subprocess.run([GATEWAY_BIN, "--config", str(config), "--check", *flags], capture_output=True,
                              text=True, timeout=30)

    assert check().returncode == 0
    assert check("--log-format", "text").returncode == 0
    bad = check("--log-format", "yaml")
    assert bad.returncode == 1
    assert f"{config}: log_format: expected text or json, got 'yaml'" in bad.stderr
    config.write_text("log_format: JSON\ndiscovery: {file: pods.yaml}\n")
    assert "log_format: expected text or json, got 'JSON'" in check().stderr
