#!/usr/bin/python3
"""Proxy-overhead benchmark: what a request pays for going through prefixgate, against nginx and HAProxy.

The same chat completion (2 KiB prompt, non-streaming) from a fast static upstream (nginx `return 200`), sent
(a) direct, (b) through nginx (proxy_pass, upstream keep-alive), (c) through HAProxy, (d) through prefixgate with
`random`, (e) through prefixgate with `prefix-cache` (prefixgate: `threads: 2`, `log_level: warn`, because the
default info level logs a line per request). Load: wrk with keep-alive connections.

Phases:
  throughput   wrk at several connection counts: requests/s, as a ratio to nginx's in the same round
  fixed-rate   wrk paced by a Lua delay() (wrk has no fixed-rate mode): N connections each waiting D ms after
               every response, well below saturation; p50/p99 latency added to direct, as a ratio to nginx's
  long-prompt  the same with a 256 KiB prompt: requests/s and p50/p99 at a few connections
  streaming    500 SSE events per response, one every --stream-gap-ms, each stamped with the time the upstream
               wrote it (sse_probe.py): the delay each target adds to every event, against direct

Writes overhead.json and overhead.md (tables and the commands) into --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import provenance  # noqa: E402
from servers import Fleet, cpu_seconds, find_tool, missing_tools  # noqa: E402
from sse_probe import probe  # noqa: E402

TARGETS = ["direct", "nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]
PHASES = ["throughput", "fixed-rate", "long-prompt", "streaming"]
STREAM_EVENTS = 500


def chat_body(prompt_bytes, stream=False, max_tokens=16):
    """A chat completion whose prompt (one user message) is `prompt_bytes` long, as JSON bytes."""
    words = ("route", "cache", "prefix", "token", "model", "engine", "block", "query")
    text, i = [], 0
    while sum(len(w) + 1 for w in text) < prompt_bytes:
        text.append(words[i % len(words)] + str(i % 97))
        i += 1
    content = " ".join(text)[:prompt_bytes]
    body = {"model": "sim-model", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


class Wrk:
    """Runs wrk with wrk_post.lua and returns its WRK_JSON line as a dict (latencies in microseconds)."""

    def __init__(self, work_dir, threads):
        self.dir, self.threads, self.bin = Path(work_dir), threads, find_tool("wrk")
        self.commands = []

    def run(self, url, body, connections, duration_s, delay_ms=0, timeout_s=10, cpu_pid=None):
        """One wrk run; with cpu_pid, also the CPU microseconds that process (and its children) spent per request."""
        cpu_before = cpu_seconds(cpu_pid) if cpu_pid else 0.0
        body_file = self.dir / f"body-{len(body)}-{hash(body) & 0xffff:x}.json"
        if not body_file.exists():
            body_file.write_bytes(body)
        args = [self.bin, f"-t{min(self.threads, connections)}", f"-c{connections}", f"-d{duration_s}s",
                f"--timeout={timeout_s}s", "-s", str(HERE / "wrk_post.lua"), url]
        env = {**os.environ, "WRK_BODY_FILE": str(body_file), "WRK_DELAY_MS": str(delay_ms)}
        self.commands.append(f"WRK_BODY_FILE=<{len(body)}-byte body> WRK_DELAY_MS={delay_ms} " + " ".join(
            a if a != str(HERE / "wrk_post.lua") else "loadtest/overhead/wrk_post.lua" for a in args))
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=duration_s + timeout_s + 30)
        for line in out.stdout.splitlines():
            if line.startswith("WRK_JSON "):
                result = json.loads(line[len("WRK_JSON "):])
                result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
                if cpu_pid:
                    result["cpu_us_per_request"] = (cpu_seconds(cpu_pid) - cpu_before) * 1e6 / max(1, result["requests"])
                return result
        raise RuntimeError(f"wrk printed no result: {out.stdout[-500:]} {out.stderr[-500:]}")


def phase_throughput(fleet, wrk, cfg):
    """Requests/s per target per connection count; rounds alternate the target order; the median is kept."""
    body, rows = chat_body(2048), []
    for connections in cfg.connections:
        samples = {t: [] for t in TARGETS}
        for round_index in range(cfg.rounds):
            order = TARGETS if round_index % 2 == 0 else list(reversed(TARGETS))
            for target in order:
                samples[target].append(wrk.run(fleet.url(target, "static"), body, connections, cfg.duration_s,
                                               cpu_pid=fleet.pids[target]))
        row = {"connections": connections}
        for target in TARGETS:
            runs = samples[target]
            row[target] = {"rps": statistics.median(r["rps"] for r in runs),
                           "p50_us": statistics.median(r["p50_us"] for r in runs),
                           "p99_us": statistics.median(r["p99_us"] for r in runs),
                           "cpu_us_per_request": statistics.median(r["cpu_us_per_request"] for r in runs),
                           "errors": sum(r["socket_errors"] + r["non2xx"] for r in runs)}
        for target in TARGETS:
            row[target]["rps_vs_nginx"] = row[target]["rps"] / row["nginx"]["rps"]
        rows.append(row)
        print(f"throughput c={connections}: " + "  ".join(f"{t} {row[t]['rps']:.0f}" for t in TARGETS), flush=True)
    return rows


def added_latency(results, reference="nginx"):
    """Adds p50/p99 added latency (target - direct) and its ratio to the reference proxy's, in place."""
    direct = results["direct"]
    for target, r in results.items():
        r["added_p50_us"] = r["p50_us"] - direct["p50_us"]
        r["added_p99_us"] = r["p99_us"] - direct["p99_us"]
    ref = results[reference]
    for r in results.values():
        r["added_p50_vs_nginx"] = r["added_p50_us"] / ref["added_p50_us"] if ref["added_p50_us"] > 0 else None
        r["added_p99_vs_nginx"] = r["added_p99_us"] / ref["added_p99_us"] if ref["added_p99_us"] > 0 else None
    return results


def phase_fixed_rate(fleet, wrk, cfg):
    """Latency at a fixed, moderate rate (cfg.rate_connections connections x 1000 / cfg.rate_delay_ms req/s)."""
    body = chat_body(2048)
    results = {t: wrk.run(fleet.url(t, "static"), body, cfg.rate_connections, cfg.rate_duration_s,
                          delay_ms=cfg.rate_delay_ms, cpu_pid=fleet.pids[t]) for t in TARGETS}
    added_latency(results)
    print("fixed-rate: " + "  ".join(f"{t} p50 {r['p50_us']}us p99 {r['p99_us']}us" for t, r in results.items()),
          flush=True)
    return results


def phase_long_prompt(fleet, wrk, cfg):
    """256 KiB prompts: requests/s and latency at cfg.long_connections connections."""
    body = chat_body(256 * 1024)
    results = {t: wrk.run(fleet.url(t, "static"), body, cfg.long_connections, cfg.duration_s,
                          cpu_pid=fleet.pids[t]) for t in TARGETS}
    added_latency(results)
    for r in results.values():
        r["rps_vs_nginx"] = r["rps"] / results["nginx"]["rps"]
    print("long-prompt: " + "  ".join(f"{t} {r['rps']:.0f}/s" for t, r in results.items()), flush=True)
    return results


def phase_streaming(fleet, wrk, cfg):
    """Per-event delays (arrival - the upstream's write time) through each target; added = minus direct's."""
    results = {}
    for target in TARGETS:
        port = fleet.ports[target]["stream"]
        delays, stray = probe("127.0.0.1", port, cfg.stream_connections, cfg.stream_count, STREAM_EVENTS)
        delays.sort()
        pick = lambda q: delays[min(len(delays) - 1, int(len(delays) * q))]  # noqa: E731
        results[target] = {"events": len(delays), "p50_us": pick(0.5), "p90_us": pick(0.9), "p99_us": pick(0.99),
                           "p999_us": pick(0.999), "stray_last_chunks": stray}
    direct, ref = results["direct"], None
    for r in results.values():
        r["added_p50_us"] = r["p50_us"] - direct["p50_us"]
        r["added_p99_us"] = r["p99_us"] - direct["p99_us"]
    ref = results["nginx"]
    for r in results.values():
        r["added_p50_vs_nginx"] = r["added_p50_us"] / ref["added_p50_us"] if ref["added_p50_us"] > 0 else None
        r["added_p99_vs_nginx"] = r["added_p99_us"] / ref["added_p99_us"] if ref["added_p99_us"] > 0 else None
    print("streaming: " + "  ".join(f"{t} p50 {r['p50_us']:.0f}us p99 {r['p99_us']:.0f}us"
                                    for t, r in results.items()), flush=True)
    return results


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-overhead", help="folder for overhead.json and overhead.md")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    ap.add_argument("--connections", default="1,8,32,128", help="wrk connection counts of the throughput phase")
    ap.add_argument("--duration-s", type=int, default=4, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=2, help="throughput rounds (alternating order; median kept)")
    ap.add_argument("--rate-connections", type=int, default=10)
    ap.add_argument("--rate-delay-ms", type=int, default=10, help="pause per connection after each response")
    ap.add_argument("--rate-duration-s", type=int, default=10)
    ap.add_argument("--long-connections", type=int, default=8)
    ap.add_argument("--stream-connections", type=int, default=2, help="concurrent streams in the streaming phase")
    ap.add_argument("--stream-count", type=int, default=6, help="streams per connection in the streaming phase")
    ap.add_argument("--stream-gap-ms", type=float, default=1.0, help="time between the upstream's events")
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--gateway-threads", type=int, default=2)
    ap.add_argument("--profile", action="store_true",
                    help="also profile: perf of prefixgate prefix-cache, and system calls per request of every proxy "
                         "(strace); writes overhead-profile.txt")
    ap.add_argument("--tiny", action="store_true", help="1-second runs, one connection count: the smoke test")
    ap.add_argument("--command", default=None, help="the command line to quote in the report")
    args = ap.parse_args(argv)
    if args.tiny:
        args.connections, args.duration_s, args.rounds, args.rate_duration_s = "4", 1, 1, 1
        args.stream_count = 1
    args.connections = [int(c) for c in args.connections.split(",")]
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    missing = missing_tools()
    if missing:
        print(f"overhead benchmark needs {', '.join(missing)} (Debian packages: apt-get install {' '.join(missing)})",
              file=sys.stderr)
        return 3
    from overhead_report import write_report  # noqa: E402
    from proxy_profile import profile  # noqa: E402

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    git_at_start = provenance.git_info()  # before the profile is written into the tree
    results = {"config": {k: v for k, v in vars(args).items() if k not in ("command",)}}
    with provenance.LoadSampler() as load, tempfile.TemporaryDirectory(prefix="prefixgate-overhead-") as tmp:
        fleet = Fleet(tmp, gateway_threads=args.gateway_threads, stream_gap_ms=args.stream_gap_ms)
        try:
            wrk = Wrk(tmp, args.wrk_threads)
            phases = {"throughput": phase_throughput, "fixed-rate": phase_fixed_rate,
                      "long-prompt": phase_long_prompt, "streaming": phase_streaming}
            for name in args.phases:
                results[name] = phases[name](fleet, wrk, args)
            if args.profile:
                results["profile"] = profile(fleet, wrk, chat_body(2048), out_dir)
            results["wrk_commands"] = wrk.commands[:6]
        finally:
            fleet.stop()
    results["wall_s"] = time.monotonic() - started
    command = args.command or "loadtest/overhead/overhead.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results["command"] = command
    results["provenance"] = provenance.collect(command, {"prefixgate": provenance.gateway_binary()}, load,
                                               git=git_at_start)
    path = write_report(out_dir, results, command)
    print(f"report: {path} ({results['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
