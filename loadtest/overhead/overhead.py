#!/usr/bin/python3
"""Proxy-overhead benchmark: what a request pays for going through prefixgate, against nginx and HAProxy, each
with one event loop (--proxy-loops: as many each).

Chat completions (non-streaming) from a fast static upstream (one nginx worker, `return 200`, listening on 8 ports:
the 8 simulated pods), sent (a) direct, (b) through nginx (`worker_processes 1`, upstream keep-alive, no access
log), (c) through HAProxy (`nbthread 1`, `http-reuse always`), (d) through prefixgate with `random`, (e) through
prefixgate with `prefix-cache` (prefixgate `threads: 1`, `log_level: warn`: the default info level logs a line per
request). The proxies balance over the 8 pods (nginx and HAProxy round robin, prefixgate by its strategy). Load:
wrk, one thread, keep-alive connections.

Phases (every one runs the targets interleaved: each round runs every target once, round r starting at the r-th
target; each cell is the median of the rounds with their min-max):
  throughput   one fixed 2 KiB body, at --connections (default 32): requests/s, p50/p99, proxy CPU per request
  families     a rotating set of 2 KiB bodies from 64 conversation families (8 bodies each sharing ~90 % of their
               bytes, bodies.py) at --family-connections: the same figures, plus what prefix-cache matched (its
               own /metrics: the mean share of the prompt matched, the decisions by match bucket, requests per pod)
  long-prompt  the same with 256 KiB bodies from 16 families of 4, at --long-connections
  fixed-rate   the fixed 2 KiB body paced by a Lua delay() (wrk has no fixed-rate mode), well below saturation:
               p50/p99 latency added to direct's, as a ratio to nginx's
  streaming    500 SSE events per response, one every --stream-gap-ms, each stamped with the time the upstream
               wrote it (sse_probe.py): the delay each target adds to every event, against direct

Writes overhead.json (every round's raw figures) and overhead.md (tables, "Against the targets", the commands)
into --out.
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

from prometheus_client.parser import text_string_to_metric_families

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import provenance  # noqa: E402
from bodies import chat_body, family_bodies, write_bodies  # noqa: E402
from harness import settled  # noqa: E402
from servers import PROMPT_TOKENS, Fleet, cpu_seconds, find_tool, missing_tools, process_shape  # noqa: E402
from sse_probe import probe  # noqa: E402

TARGETS = ["direct", "nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]
GATEWAYS = ["prefixgate-random", "prefixgate-prefix-cache"]
PHASES = ["throughput", "families", "long-prompt", "fixed-rate", "streaming"]
STREAM_EVENTS = 500
MIN_ROUNDS = 5
# (families, bodies per family, bytes per body) of the rotating workloads.
FAMILIES = {"families": (64, 8, 2048), "long-prompt": (16, 4, 256 * 1024)}
FIGURES = ("rps", "p50_us", "p99_us", "cpu_us_per_request")


class Wrk:
    """Runs wrk with wrk_post.lua and returns its WRK_JSON line as a dict (latencies in microseconds)."""

    def __init__(self, work_dir, threads):
        self.dir, self.threads, self.bin = Path(work_dir), threads, find_tool("wrk")
        self.commands = []

    def bodies_file(self, name, bodies):
        """Writes the bodies (in the order to send) for WRK_BODY_FILE; returns the path."""
        path = self.dir / f"{name}.jsonl"
        write_bodies(path, bodies)
        return path

    def run(self, url, body_file, connections, duration_s, delay_ms=0, timeout_s=10, cpu_pid=None):
        """One wrk run; with cpu_pid, also the CPU microseconds that process (and its children) spent per request."""
        cpu_before = cpu_seconds(cpu_pid) if cpu_pid else 0.0
        args = [self.bin, f"-t{min(self.threads, connections)}", f"-c{connections}", f"-d{duration_s}s",
                f"--timeout={timeout_s}s", "-s", str(HERE / "wrk_post.lua"), url]
        env = {**os.environ, "WRK_BODY_FILE": str(body_file), "WRK_DELAY_MS": str(delay_ms)}
        shown = {str(HERE / "wrk_post.lua"): "loadtest/overhead/wrk_post.lua",
                 url: url.replace(url.split("/")[2], "127.0.0.1:<target's port>")}
        command = f"WRK_BODY_FILE={Path(body_file).name} WRK_DELAY_MS={delay_ms} " + " ".join(shown.get(a, a)
                                                                                             for a in args)
        if command not in self.commands:
            self.commands.append(command)
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=duration_s + timeout_s + 30)
        for line in out.stdout.splitlines():
            if line.startswith("WRK_JSON "):
                result = json.loads(line[len("WRK_JSON "):])
                result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
                if cpu_pid:
                    cpu_us = (cpu_seconds(cpu_pid) - cpu_before) * 1e6
                    result["cpu_us_per_request"] = cpu_us / max(1, result["requests"])
                return result
        raise RuntimeError(f"wrk printed no result: {out.stdout[-500:]} {out.stderr[-500:]}")


class Progress:
    """One line per run: how far the benchmark is and what the run gave."""

    def __init__(self, total_runs):
        self.total, self.done, self.started = total_runs, 0, time.monotonic()

    def run(self, label, target, text):
        self.done += 1
        print(f"[{self.done}/{self.total} {time.monotonic() - self.started:4.0f} s] {label} {target}: {text}",
              flush=True)


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def interleaved(cfg, progress, label, run_one, describe):
    """{target: [run_one(target) per round]}: every round runs every target once, round r starting at the r-th
    target, so none is always first or last while the machine's load drifts."""
    samples = {t: [] for t in TARGETS}
    for r in range(cfg.rounds):
        shift = r % len(TARGETS)
        for target in TARGETS[shift:] + TARGETS[:shift]:
            result = run_one(target)
            result["round"] = r
            samples[target].append(result)
            progress.run(f"{label} round {r + 1}/{cfg.rounds}", target, describe(result))
    return samples


def summarise(samples, figures):
    """Per target: median and min-max of each figure over the rounds, the rounds themselves, and errors."""
    cells = {}
    for target, runs in samples.items():
        cells[target] = {k: spread([r[k] for r in runs]) for k in figures}
        cells[target]["errors"] = sum(r.get("socket_errors", 0) + r.get("non2xx", 0) for r in runs)
        cells[target]["rounds"] = runs
    return cells


def add_ratios(cells):
    """Requests/s as a ratio of medians to nginx's, and the same ratio round by round (its min-max)."""
    nginx = cells["nginx"]
    for cell in cells.values():
        cell["rps_vs_nginx"] = cell["rps"]["median"] / nginx["rps"]["median"]
        per_round = [r["rps"] / n["rps"] for r, n in zip(cell["rounds"], nginx["rounds"])]
        cell["rps_vs_nginx_rounds"] = {"min": min(per_round), "max": max(per_round)}


def add_latency(cells):
    """Added p50/p99 (the target's median - direct's) and its ratio to nginx's added, in place."""
    direct = cells["direct"]
    for cell in cells.values():
        for q in ("p50", "p99"):
            cell[f"added_{q}_us"] = cell[f"{q}_us"]["median"] - direct[f"{q}_us"]["median"]
    for cell in cells.values():
        for q in ("p50", "p99"):
            ref = cells["nginx"][f"added_{q}_us"]
            cell[f"added_{q}_vs_nginx"] = cell[f"added_{q}_us"] / ref if ref > 0 else None


def routing_snapshot(gateway):
    """What a prefixgate gateway's /metrics say about its routing so far: requests per pod, prefix-cache decisions
    per match bucket, and the prediction audit's responses and predicted tokens."""
    snap = {"pods": {}, "decisions": {}, "audited": 0.0, "predicted_tokens": 0.0}
    for family in text_string_to_metric_families(gateway.metrics_text()):
        for s in family.samples:
            if s.name == "prefixgate_requests_total":
                snap["pods"][s.labels["pod"]] = snap["pods"].get(s.labels["pod"], 0) + s.value
            elif s.name == "aibrix_prefix_cache_routing_decisions_total":
                bucket = s.labels["match_percent_bucket"]
                snap["decisions"][bucket] = snap["decisions"].get(bucket, 0) + s.value
            elif s.name == "prefixgate_prefix_prediction_audited_responses_total":
                snap["audited"] += s.value
            elif s.name == "prefixgate_prefix_predicted_tokens_total":
                snap["predicted_tokens"] += s.value
    return snap


def settled_snapshot(gateway, timeout_s=3.0):
    """routing_snapshot once two reads 50 ms apart agree (bounded by timeout_s): a response is counted and audited
    just after its last byte is written, so a read made as wrk exits can miss the last few."""
    return settled(lambda: routing_snapshot(gateway), timeout_s)


def routing_delta(before, after):
    """The routing between two snapshots: requests per pod, pods used, decisions per bucket, and the mean share of
    the prompt matched (predicted tokens / (audited responses x the upstream's prompt_tokens); None without
    audited responses, as for random)."""
    pods = {pod: int(n - before["pods"].get(pod, 0)) for pod, n in sorted(after["pods"].items())}
    decisions = {b: int(n - before["decisions"].get(b, 0)) for b, n in after["decisions"].items()}
    audited = after["audited"] - before["audited"]
    predicted = after["predicted_tokens"] - before["predicted_tokens"]
    return {"pod_requests": pods, "pods_used": sum(1 for n in pods.values() if n > 0),
            "requests": sum(pods.values()), "decisions": decisions, "audited": int(audited),
            "mean_match_share": predicted / (audited * PROMPT_TOKENS) if audited else None}


def load_phase(fleet, wrk, cfg, progress, label, body_file, connections):
    """A saturating workload at `connections`: a warm-up run per target (not with --tiny), then the interleaved
    rounds; prefixgate's routing is read from its /metrics before and after the rounds."""
    if not cfg.tiny:
        for target in TARGETS:
            wrk.run(fleet.url(target, "static"), body_file, connections, 1)
    before = {t: settled_snapshot(fleet.gateways[t]) for t in GATEWAYS}
    samples = interleaved(cfg, progress, f"{label} c={connections}", lambda t: wrk.run(
        fleet.url(t, "static"), body_file, connections, cfg.duration_s, cpu_pid=fleet.pids[t]),
        lambda r: f"{r['rps']:.0f} req/s, p99 {r['p99_us'] / 1000:.2f} ms, CPU {r['cpu_us_per_request']:.1f} us/req")
    cells = summarise(samples, FIGURES)
    add_ratios(cells)
    routing = {t: routing_delta(before[t], settled_snapshot(fleet.gateways[t])) for t in GATEWAYS}
    return {"connections": connections, "targets": cells, "routing": routing}


def phase_throughput(fleet, wrk, cfg, progress):
    body_file = wrk.bodies_file("fixed-2k", [chat_body(2048)])
    return {"body": "one fixed 2 KiB body", "rows": [load_phase(fleet, wrk, cfg, progress, "throughput", body_file, c)
                                                     for c in cfg.connections]}


def family_phase(name, connections):
    def phase(fleet, wrk, cfg, progress):
        families, variants, size = FAMILIES[name]
        body_file = wrk.bodies_file(name, family_bodies(families, variants, size, cfg.seed))
        return {"body": f"{families} families x {variants} bodies of {size // 1024} KiB, seed {cfg.seed}",
                "families": families, "variants": variants, "body_bytes": size,
                "rows": [load_phase(fleet, wrk, cfg, progress, name, body_file, connections(cfg))]}
    return phase


def phase_fixed_rate(fleet, wrk, cfg, progress):
    """Latency at a fixed, moderate rate (cfg.rate_connections connections x 1000 / cfg.rate_delay_ms req/s)."""
    body_file = wrk.bodies_file("fixed-2k", [chat_body(2048)])
    samples = interleaved(cfg, progress, "fixed-rate", lambda t: wrk.run(
        fleet.url(t, "static"), body_file, cfg.rate_connections, cfg.rate_duration_s, delay_ms=cfg.rate_delay_ms,
        cpu_pid=fleet.pids[t]), lambda r: f"p50 {r['p50_us']} us, p99 {r['p99_us']} us")
    cells = summarise(samples, FIGURES)
    add_latency(cells)
    return cells


def phase_streaming(fleet, wrk, cfg, progress):
    """Per-event delays (arrival - the upstream's write time) through each target; added = minus direct's."""
    def one(target):
        delays, stray = probe("127.0.0.1", fleet.ports[target]["stream"], cfg.stream_connections, cfg.stream_count,
                              STREAM_EVENTS)
        delays.sort()
        pick = lambda q: delays[min(len(delays) - 1, int(len(delays) * q))]  # noqa: E731
        return {"events": len(delays), "p50_us": pick(0.5), "p90_us": pick(0.9), "p99_us": pick(0.99),
                "p999_us": pick(0.999), "stray_last_chunks": stray}

    samples = interleaved(cfg, progress, "streaming", one,
                          lambda r: f"delay p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us")
    cells = summarise(samples, ("p50_us", "p90_us", "p99_us", "p999_us"))
    for cell in cells.values():
        cell["events"] = sum(r["events"] for r in cell["rounds"])
        cell["stray_last_chunks"] = sum(r["stray_last_chunks"] for r in cell["rounds"])
    add_latency(cells)
    return cells


PHASE_FUNCTIONS = {"throughput": phase_throughput,
                   "families": family_phase("families", lambda cfg: cfg.family_connections),
                   "long-prompt": family_phase("long-prompt", lambda cfg: cfg.long_connections),
                   "fixed-rate": phase_fixed_rate, "streaming": phase_streaming}


def planned_runs(cfg):
    """How many measured runs the phases make (for the progress lines)."""
    rows = {"throughput": len(cfg.connections), "families": 1, "long-prompt": 1, "fixed-rate": 1, "streaming": 1}
    return sum(rows[p] for p in cfg.phases) * cfg.rounds * len(TARGETS)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-overhead", help="folder for overhead.json and overhead.md")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    ap.add_argument("--connections", default="32",
                    help="wrk connection counts of the throughput phase (comma-separated: a sweep)")
    ap.add_argument("--family-connections", type=int, default=32)
    ap.add_argument("--long-connections", type=int, default=16)
    ap.add_argument("--duration-s", type=int, default=4, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=None,
                    help=f"rounds of every phase (targets interleaved; median kept); default and least {MIN_ROUNDS}")
    ap.add_argument("--seed", type=int, default=1, help="seed of the family bodies and their order")
    ap.add_argument("--rate-connections", type=int, default=10)
    ap.add_argument("--rate-delay-ms", type=int, default=10, help="pause per connection after each response")
    ap.add_argument("--rate-duration-s", type=int, default=4)
    ap.add_argument("--stream-connections", type=int, default=2, help="concurrent streams in the streaming phase")
    ap.add_argument("--stream-count", type=int, default=4, help="streams per connection per round")
    ap.add_argument("--stream-gap-ms", type=float, default=1.0, help="time between the upstream's events")
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--proxy-loops", type=int, default=1,
                    help="event loops of every proxy: nginx worker_processes, HAProxy nbthread, prefixgate threads "
                         "(per-core parity is 1; 2 against 2 is the scaling check)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile: perf of prefixgate prefix-cache, and system calls per request of every proxy "
                         "(strace); writes overhead-profile.txt")
    ap.add_argument("--tiny", action="store_true",
                    help="one round of 1-second runs, no warm-up, one stream per connection: the smoke test")
    ap.add_argument("--command", default=None, help="the command line to quote in the report")
    args = ap.parse_args(argv)
    if args.tiny:
        args.duration_s, args.rate_duration_s, args.stream_count = 1, 1, 1
        args.rounds = args.rounds or 1
    elif args.rounds is None:
        args.rounds = MIN_ROUNDS
    elif args.rounds < MIN_ROUNDS:
        ap.error(f"--rounds {args.rounds}: at least {MIN_ROUNDS} (a median of fewer is noise); --tiny for a smoke run")
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
    progress = Progress(planned_runs(args))
    print(f"{progress.total} measured runs ({args.rounds} rounds of {len(TARGETS)} targets per phase and connection "
          f"count), {args.duration_s} s of load each" + ("" if args.tiny else ", after a 1 s warm-up per target"),
          flush=True)
    with provenance.LoadSampler() as load, tempfile.TemporaryDirectory(prefix="prefixgate-overhead-") as tmp:
        fleet = Fleet(tmp, loops=args.proxy_loops, stream_gap_ms=args.stream_gap_ms)
        try:
            wrk = Wrk(tmp, args.wrk_threads)
            for name in args.phases:
                results[name] = PHASE_FUNCTIONS[name](fleet, wrk, args, progress)
            results["processes"] = {t: process_shape(fleet.pids[t]) for t in TARGETS}
            if args.profile:
                results["profile"] = profile(fleet, wrk, wrk.bodies_file("fixed-2k", [chat_body(2048)]), out_dir)
            results["wrk_commands"] = wrk.commands
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
