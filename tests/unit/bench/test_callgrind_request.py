"""callgrind_request: the requests a callgrind dump's instructions belong to, counted as the calls it records to the
once-per-request function."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "loadtest" / "overhead"))
import callgrind_request  # noqa: E402

# A dump in callgrind's format with name compression: a name is given in full with its id the first time, then by
# id alone (as fn= or cfn=). parseRequest is called 3 + 4 times from two callers; a similarly named function and a
# cost line that looks like a call count must not count.
DUMP = """version: 1
creator: callgrind-3.19.0
events: Ir
fn=(1) main
cfn=(2) prefixgate::openai::parseRequest(prefixgate::openai::Endpoint, std::string&)
calls=3 0
10 1200
cfn=(3) prefixgate::openai::parseRequestHeaders()
calls=5 0
11 500
fn=(4) serveOne
cfn=(2)
calls=4 0
12 1600
fn=(2)
13 calls
"""


def test_calls_are_summed_over_callers_and_compressed_names(tmp_path):
    """Ensures the count follows name compression (a callee named once, then by id) across callers, and counts only
    the function whose name contains the needle with its argument list's opening parenthesis."""
    dump = tmp_path / "callgrind.out.1"
    dump.write_text(DUMP)
    assert callgrind_request.calls_to(dump, "prefixgate::openai::parseRequest(") == 7
    assert callgrind_request.calls_to(dump, callgrind_request.PER_REQUEST_FUNCTION["prefixgate"]) == 7
    assert callgrind_request.calls_to(dump, "parseRequestHeaders") == 5
    assert callgrind_request.calls_to(dump, "ngx_http_create_request") == 0


def test_stream_load_counts_the_events_as_they_arrive(tmp_path):
    """Ensures --stream's load (sse_probe's client in a thread) streams whole responses from sse_probe's upstream and
    that its count grows while it runs: the count read between the zeroing and the dump is the events of that
    window, not 0 and not the whole run's."""
    import time
    from harness import Process
    upstream = Process([sys.executable, str(Path(callgrind_request.HERE) / "sse_probe.py"), "serve", "--port", "0",
                        "--gap-ms", "1"], tmp_path / "upstream.log")
    try:
        # 2 connections x 2 responses of 500 events an ms apart: about a second.
        load = callgrind_request.StreamLoad(upstream.port, 0.5, 1.0)
        deadline = time.monotonic() + 10
        while load.received() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        during = load.received()
        load.communicate()
        assert 0 < during < 2000
        assert load.received() == 2 * 2 * callgrind_request.EVENTS
    finally:
        upstream.stop()
