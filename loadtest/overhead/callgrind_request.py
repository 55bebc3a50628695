"""Instructions per proxied request in a proxy's own process, by function: the deterministic figure to compare
builds by (wall time on the shared machine moves by 20-30 % between runs; instruction counts do not), and prefixgate
against nginx.

The overhead benchmark's static nginx upstream (8 pods) and one proxy in front: prefixgate (`threads: 1`,
`log_level: warn`, the strategy given) or nginx (`--proxy nginx`: nginx_proxy.conf, one worker, no master process),
run under `valgrind --tool=callgrind`, warmed up with wrk, then counted over a fixed number of seconds of
`wrk -t1 -c4` with the 2 KiB body (or 2 KiB families, or the long-prompt phase's 256 KiB ones): the counters are
zeroed with `callgrind_control -z` while the load runs and dumped with `-d` before wrk stops (instrumented
throughout, so the proxy runs at one speed). Copies and fills of large blocks (glibc's rep movsb / rep stosb) count
once per byte, which overstates their share of the time. The
requests counted are the calls the dump records to a function called once per request (PER_REQUEST_FUNCTION).
Prints the total and the instructions per request, then `callgrind_annotate`'s top functions (exclusive, then
inclusive) in instructions per request.

--stream counts per relayed SSE event instead: the proxy in front of one pod, sse_probe.py's timestamped upstream
(an event every --gap-ms), streamed through by sse_probe's client on 2 keep-alive connections (500 events per
response, one decision per response); the events counted are those the client received between the zeroing and the
dump (a few events either side of the window at most). The kernel's work (system calls, TCP) is not counted: see
proxy_profile.py for the CPU split.

    /usr/bin/python3 loadtest/overhead/callgrind_request.py --bin build/prefixgate --out /tmp/cg [--families]
    /usr/bin/python3 loadtest/overhead/callgrind_request.py --proxy nginx --out /tmp/cg-nginx
    /usr/bin/python3 loadtest/overhead/callgrind_request.py --stream [--proxy nginx] --out /tmp/cg-sse

Needs valgrind, nginx and wrk (scripts/bench_overhead.sh installs the last two)."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bodies import chat_body, family_bodies  # noqa: E402
from servers import MODEL, PODS, find_tool, nginx_proxy, static_upstream  # noqa: E402
import harness  # noqa: E402
from harness import Gateway, Process, free_port  # noqa: E402
from sse_probe import EVENTS, probe  # noqa: E402


# Called once per proxied request whatever the strategy (nginx: its request object's creation, once per request on
# a kept-alive connection): its call count in the dump is the number of requests the counted instructions belong to
# (prefixgate's own request counter, read around the window, agreed within a few percent).
PER_REQUEST_FUNCTION = {"prefixgate": "prefixgate::openai::parseRequest(",
                        "nginx": "ngx_http_create_request"}


def calls_to(dump, needle):
    """How many calls the callgrind dump records to functions whose name contains `needle`."""
    names, calls, callee = {}, 0, None
    with open(dump, errors="replace") as f:
        for line in f:
            if line.startswith("cfn="):
                m = re.match(r"\((\d+)\)(?: (.*))?", line[4:].rstrip("\n"))
                if m and m.group(2):
                    names[m.group(1)] = m.group(2)
                callee = names.get(m.group(1), "") if m else line[4:]
            elif line.startswith("fn="):
                m = re.match(r"\((\d+)\) (.*)", line[3:].rstrip("\n"))
                if m:
                    names[m.group(1)] = m.group(2)
            elif line.startswith("calls=") and callee is not None and needle in callee:
                calls += int(line[6:].split()[0])
    return calls


def start_prefixgate(args, out, pod_ports, launcher):
    """A one-thread prefixgate under `launcher`; returns (process with .stop(), pid, url)."""
    harness.GATEWAY_BIN = str(Path(args.bin).resolve())
    pods = [{"name": f"pod-{i}", "address": f"127.0.0.1:{p}", "models": [MODEL]} for i, p in enumerate(pod_ports)]
    gateway = Gateway(out, pods, name="gateway", config={
        "routing": {"strategy": args.strategy}, "threads": 1, "log_level": "warn",
        # Scrapes and health checks far apart: their work does not scale with the load, so at callgrind's few
        # hundred requests a second it would be counted per request many times over what it costs at speed.
        "health_check": {"interval_ms": 60000, "timeout_ms": 5000},
        "engine_metrics": {"scrape_interval_ms": 60000}}, launcher=launcher)
    return gateway, gateway.proc.pid, f"http://127.0.0.1:{gateway.port}/v1/chat/completions"


def start_nginx(out, pod_ports, launcher, stream_port=None):
    """The overhead benchmark's nginx proxy (one worker, upstream keep-alive), in one process (no master, so
    callgrind sees the worker): returns (process with .stop(), pid, url). With `stream_port`, the url is its stream
    route's, to that upstream."""
    proxy, listen = nginx_proxy(out, pod_ports, stream_port or free_port(), 1, launcher,
                                "daemon off; master_process off;")
    route = "stream" if stream_port else "static"
    return proxy, proxy.pid, f"http://127.0.0.1:{listen[route]}/v1/chat/completions"


class StreamLoad:
    """sse_probe's client streaming through `port` on 2 connections for about `seconds` (whole responses of
    EVENTS events, an event every `gap_ms`) in a thread; `received()` is how many events have arrived so far."""

    def __init__(self, port, seconds, gap_ms):
        self.delays = []
        streams = max(1, int(seconds * 1000 / (EVENTS * gap_ms)) + 1)
        self.thread = threading.Thread(target=probe, args=("127.0.0.1", port, 2, streams, EVENTS, self.delays))
        self.thread.start()

    def received(self):
        return len(self.delays)

    def communicate(self):
        self.thread.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--proxy", choices=("prefixgate", "nginx"), default="prefixgate")
    parser.add_argument("--bin", default=os.environ.get("PREFIXGATE_BIN", "build/prefixgate"))
    parser.add_argument("--out", required=True, help="a folder for the configs, logs and callgrind.out")
    parser.add_argument("--strategy", default="prefix-cache")
    parser.add_argument("--families", action="store_true",
                        help="64 conversation families x 16 bodies of 2 KiB (seed 1), not one body")
    parser.add_argument("--long", action="store_true",
                        help="the long-prompt phase's bodies: 16 families x 4 of 256 KiB (seed 1)")
    parser.add_argument("--stream", action="store_true",
                        help="instructions per relayed SSE event (sse_probe.py's upstream and client), not per request")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="--stream: time between the upstream's events")
    parser.add_argument("--seconds", type=float, default=4.0, help="counted seconds of load")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--top", type=int, default=40, help="functions shown by callgrind_annotate")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    valgrind, wrk = shutil.which("valgrind"), find_tool("wrk")
    if valgrind is None:
        sys.exit("valgrind is not installed (Debian: valgrind)")
    body_file = out / "bodies.jsonl"
    bodies = (family_bodies(16, 4, 256 * 1024) if args.long else family_bodies(64, 16, 2048) if args.families
              else [chat_body(2048)])
    body_file.write_bytes(b"\n".join(bodies) + b"\n")

    if args.stream:
        upstream = Process([sys.executable, str(HERE / "sse_probe.py"), "serve", "--port", "0", "--gap-ms",
                            f"{args.gap_ms:g}"], out / "stream-upstream.log")
        upstream.name = "sse_probe.py serve"
        pod_ports = [upstream.port]
    else:
        pod_ports = [free_port() for _ in range(PODS)]
        upstream = static_upstream(out, pod_ports)
    callgrind_out = out / "callgrind.out"
    for old in out.glob("callgrind.out*"):
        old.unlink()
    launcher = [valgrind, "--tool=callgrind", f"--callgrind-out-file={callgrind_out}"]
    proxy = None
    try:
        if args.proxy == "nginx":
            proxy, pid, url = start_nginx(out, pod_ports, launcher, pod_ports[0] if args.stream else None)
        else:
            proxy, pid, url = start_prefixgate(args, out, pod_ports, launcher)
        env = {**os.environ, "WRK_BODY_FILE": str(body_file)}

        def wrk_run(seconds):
            if args.stream:
                return StreamLoad(int(url.split(":")[2].split("/")[0]), seconds, args.gap_ms)
            return subprocess.Popen([wrk, "-t1", f"-c{args.connections}", f"-d{seconds:g}s", "-s",
                                     str(HERE / "wrk_post.lua"), url], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        warm = wrk_run(3)
        warm.communicate()
        load = wrk_run(args.seconds + 3)
        time.sleep(1.0)
        subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
        events_before = load.received() if args.stream else 0
        time.sleep(args.seconds)
        events_after = load.received() if args.stream else 0
        subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
        load.communicate()
    finally:
        if proxy is not None:
            proxy.stop(timeout=60) if args.proxy == "prefixgate" else proxy.stop()
        upstream.stop()
    # callgrind_control -d writes callgrind.out.1: the counted window. callgrind.out itself is what ran after it
    # (the rest of wrk's run and the shutdown), written when the process exits.
    dump = Path(str(callgrind_out) + ".1")
    if not dump.exists():
        sys.exit(f"no callgrind dump at {dump}: see the logs in {out}")
    totals = subprocess.run(["callgrind_annotate", str(dump)], capture_output=True, text=True).stdout
    match = re.search(r"^([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", totals, re.M) or \
        re.search(r"^([\d,]+)\s+PROGRAM TOTALS", totals, re.M)
    total = int(match.group(1).replace(",", "")) if match else 0
    what = args.proxy + (f" {args.strategy}" if args.proxy == "prefixgate" else "")
    if args.stream:
        served, unit = events_after - events_before, "event"
        print(f"callgrind: {total:,} instructions over {served} relayed SSE events ({what}, 2 connections of "
              f"{EVENTS}-event responses, an event every {args.gap_ms:g} ms; timers in the window included): "
              f"{total / max(served, 1):,.0f} per event")
    else:
        served, unit = calls_to(dump, PER_REQUEST_FUNCTION[args.proxy]), "request"
        print(f"callgrind: {total:,} instructions over {served} proxied requests ({what}, "
              f"{'256 KiB families' if args.long else 'families' if args.families else 'one 2 KiB body'}, "
              f"wrk -c{args.connections}; timers in the window "
              f"included): {total / max(served, 1):,.0f} per request")
    for flag in ("--inclusive=no", "--inclusive=yes"):
        text = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", flag, str(dump)],
                              capture_output=True, text=True).stdout
        lines = [ln for ln in text.splitlines() if re.match(r"^\s*[\d,]+ \(", ln)]
        print(f"\n--- callgrind_annotate {flag} (top {args.top}; instructions per {unit}, share, function)")
        for ln in lines[:args.top]:
            count = int(ln.split()[0].replace(",", ""))
            print(f"{count / max(served, 1):9,.0f} {ln.split(None, 1)[1][:180]}")


if __name__ == "__main__":
    main()
