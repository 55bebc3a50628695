#!/usr/bin/python3
"""Routing quality on real engines: the shared-prefix and multi-turn workloads (and a KV-pressure variant) through a
real prefixgate in front of N llama.cpp llama-servers (default 4, each `-t 1 --parallel 2 -c 8192`, the random-weight
model of tools/llama/make_model.py), and the same requests on simulated pods calibrated against llama-server on this
machine, so the simulator's figures stand beside the real engine's (same seeds, same prompt texts, seconds).

Phases: (1) calibration: one llama-server alone, probed (calibrate.py), unless --calibration FILE gives one, and the
contention probe of --pods llama-servers; (2) per workload, every seed, every strategy (order rotated by the seed): a
fresh fleet of llama-servers (cold caches) and a fresh gateway, the workload streamed through closed loop; with
simulated fleets, after each run (its fleet stopped) a round of the contention probe and a slice of the workload's
own requests (seed 1000) one at a time on one llama-server with its flags (InRunProbe: what the simulated fleets
take is measured while the runs ran; without the real fleet, the workload's requests before its runs:
calibrate_workload), and those requests on one simulated pod for the cost of new tokens after a cached prefix
(calibrate.probe_workload_sim); (3) the same runs on simulated pods (`--engine-dialect llamacpp`, time scale 1) with
the isolated calibration ("sim-isolated"), and with the pods sharing the machine's CPU as the probe between the runs
measured it ("sim-shared-cpu": --shared-cpu-slowdown), or burning their steps' time as CPU ("sim-burn-cpu"), or slowed
by the average contention the real pods' own timings showed in phase 2 ("sim-in-situ"); (4) REPORT.md, summary.json,
calibration.json, progress.log and one TTFT plot per workload, into --out.

Per run: TTFT p50/p90 (wall seconds), the engine-reported cached share (sum cached_tokens / sum prompt_tokens from
usage) and its ratio to the workload's bound in the engine's tokens (engine_bound.py; the prompts are tokenized by a
pod of the fleet after the run), the engines' own hit ratio (llamacpp:* counters), retries, stale connections,
scrape errors, the gateway's prediction accuracy (/debug/pods), the pods' queue (requests_deferred, sampled), the
send lag. No oracle: it needs /sim/cache/match, which llama-server lacks.

Examples:
  loadtest/bench/real.py --tiny --out /tmp/real-tiny
  loadtest/bench/real.py --workloads shared-prefix --strategies random,prefix-cache --seeds 1-2 --out /tmp/r
  scripts/bench_real.sh        (the full report, docs/benchmarks/real-engine/)
"""
import argparse
import concurrent.futures
import gzip
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import provenance  # noqa: E402
from bench import calibrate, real_report, real_workloads  # noqa: E402
from bench.aggregate import aggregate, short_of_seeds  # noqa: E402
from bench.decisions import decision_stats  # noqa: E402
from bench.engine_bound import classify_misses, run_bound  # noqa: E402
from bench.fleet import (LLAMA, SIM, Fleet, QueueSampler, Tokenizer, engine_counters, engine_hit_ratio,  # noqa: E402
                         gateway_view, llama_flags, start_gateway)
from bench.loadgen import run_workload  # noqa: E402
from bench.quality import parse_seeds  # noqa: E402
from bench.runner import gateway_strategies, metrics_texts, prediction_accuracy, resolve_strategies, rotated  # noqa
from bench.stats import summarize  # noqa: E402
from harness import (GATEWAY_BIN, LLAMA_SERVER_BIN, SIM_BIN, LlamaServer, llama_available,  # noqa: E402
                     llama_model)

# Real-engine variants: the prefix strategies hashing the engine's own tokens (llama.cpp's /apply-template +
# /tokenize) instead of the local character tokenizer's bytes; and without slot waits (a request whose prefix only
# a busy slot holds is not held for it: routing.prefix_cache.slot_wait_ms 0), the gateway before they existed.
REAL_STRATEGIES = {
    "prefix-cache-remote": {"strategy": "prefix-cache", "prefix_cache": {"use_remote_tokenizer": True}},
    "prefix-cache-blend-remote": {"strategy": "prefix-cache-blend", "prefix_cache": {"use_remote_tokenizer": True}},
    "prefix-cache-no-slot-wait": {"strategy": "prefix-cache", "prefix_cache": {"slot_wait_ms": 0}},
    "prefix-cache-blend-no-slot-wait": {"strategy": "prefix-cache-blend", "prefix_cache": {"slot_wait_ms": 0}},
}
DEFAULT_STRATEGIES = ("random,least-request,prefix-cache,prefix-cache-blend,prefix-cache-remote,"
                      "prefix-cache-blend-remote")
SIM_CALIBRATIONS = ("isolated", "in-situ", "shared-cpu", "burn-cpu")
# isolated shows what the constants alone give; shared-cpu came closest to llama-server on this machine
# (docs/benchmarks.md, "Pods that share the machine's cores").
DEFAULT_SIM_CALIBRATIONS = ("isolated", "shared-cpu")
MIN_VALID_SEEDS = 5
LAG_LIMIT_MS = 10.0
REQUEST_TIMEOUT_S = 120.0
# --tiny: the smoke test's sizes (seconds per run).
TINY = {
    "shared-prefix": {"groups": "2", "prompts_per_group": "3", "system_words": "300", "question_words": "20",
                      "output_tokens": "8", "concurrency": "2"},
    "shared-prefix-kv": {"groups": "3", "prompts_per_group": "2", "system_words": "300", "question_words": "20",
                         "output_tokens": "8", "concurrency": "2", "ctx": "1536"},
    "multi-turn": {"users": "2", "turns": "3", "system_words": "150", "context_words": "150", "question_words": "20",
                   "output_tokens": "8", "concurrency": "2"},
    "multi-turn-kv": {"users": "3", "turns": "2", "system_words": "150", "context_words": "150",
                      "question_words": "20", "output_tokens": "8", "concurrency": "2", "ctx": "2048"},
}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=real_workloads.DEFAULT,
                    help=f"comma-separated, of {', '.join(real_workloads.BUILDERS)} "
                         f"(default: {real_workloads.DEFAULT})")
    ap.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                    help=f"comma-separated (default: {DEFAULT_STRATEGIES}); any gateway strategy, the quality "
                         "runner's named variants, prefix-cache-remote and prefix-cache-blend-remote "
                         "(use_remote_tokenizer: true)")
    ap.add_argument("--pods", type=int, default=None, help="engine pods per fleet (default 4; --tiny: 2)")
    ap.add_argument("--seeds", default=None, help="e.g. 1-5 or 1,4 (default 1-5; --tiny: 1)")
    ap.add_argument("--fleets", default="llama,sim",
                    help="llama (real llama-servers), sim (simulated pods, calibrated) or both (default)")
    ap.add_argument("--sim-calibrations", default=",".join(DEFAULT_SIM_CALIBRATIONS),
                    help="comma-separated, of: isolated (one pod measured alone), in-situ (slowed by the average "
                         "contention the real runs showed; needs the llama fleet in the same run), shared-cpu (the "
                         "isolated constants, the pods sharing CPU as the real fleet's probe measured: "
                         "--shared-cpu-slowdown; between the workload's real runs when they run too), burn-cpu "
                         "(the isolated constants, each step's time spent computing "
                         f"on a thread of the pod: --burn-cpu) (default: {','.join(DEFAULT_SIM_CALIBRATIONS)})")
    ap.add_argument("--in-situ", choices=["strategy", "workload"], default="strategy",
                    help="the in-situ factors from the real runs of the same strategy and workload (default), or of "
                         "the whole workload")
    ap.add_argument("--calibration", default=None, metavar="FILE",
                    help="a calibration.json from an earlier run instead of probing a llama-server now")
    ap.add_argument("--calibration-repeats", type=int, default=calibrate.REPEATS)
    ap.add_argument("--param", action="append", default=[], metavar="WORKLOAD.NAME=VALUE")
    ap.add_argument("--list-params", action="store_true", help="print every workload parameter and exit")
    ap.add_argument("--tiny", action="store_true", help="tiny workloads, 1 seed: the smoke test")
    ap.add_argument("--lag-limit-ms", type=float, default=LAG_LIMIT_MS,
                    help=f"a run whose send lag p99 exceeds this is invalid (default {LAG_LIMIT_MS:g})")
    ap.add_argument("--rerun-invalid", type=int, default=1, metavar="N")
    ap.add_argument("--min-valid-seeds", type=int, default=None)
    ap.add_argument("--gateway-threads", type=int, default=1)
    ap.add_argument("--deadline-s", type=float, default=600.0, help="wall-clock limit of one run")
    ap.add_argument("--out", default="bench-real", help="folder for REPORT.md, summary.json, calibration.json, ...")
    ap.add_argument("--work-dir", default=None, help="keep the pods' and gateways' logs here (default: removed)")
    ap.add_argument("--command", default=None, help="the command line to quote in the report")
    ap.add_argument("--progress", choices=["auto", "always", "never"], default="auto")
    args = ap.parse_args(argv)
    args.progress = {"auto": None, "always": True, "never": False}[args.progress]
    args.seeds = parse_seeds(args.seeds or ("1" if args.tiny else "1-5"))
    args.pods = args.pods or (2 if args.tiny else 4)
    args.fleets = [f.strip() for f in args.fleets.split(",") if f.strip()]
    args.sim_calibrations = [c.strip() for c in args.sim_calibrations.split(",") if c.strip()]
    if set(args.fleets) - {LLAMA, SIM} or not args.fleets:
        ap.error(f"--fleets {args.fleets}: expected llama, sim or both")
    if set(args.sim_calibrations) - set(SIM_CALIBRATIONS):
        ap.error(f"--sim-calibrations: expected some of {', '.join(SIM_CALIBRATIONS)}")
    if "in-situ" in args.sim_calibrations and LLAMA not in args.fleets:
        args.sim_calibrations.remove("in-situ")   # nothing to measure the contention on
    if args.min_valid_seeds is None:
        args.min_valid_seeds = min(MIN_VALID_SEEDS, len(args.seeds))
    return args


def parse_params(items):
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        workload, dot, name = key.partition(".")
        if not sep or not dot or workload not in real_workloads.PARAMS:
            raise SystemExit(f"--param {item!r}: expected WORKLOAD.NAME=VALUE, WORKLOAD in "
                             f"{', '.join(real_workloads.PARAMS)}")
        out.setdefault(workload, {})[name] = value
    return out


class Log:
    """Prints progress lines and keeps them in OUT/progress.log (the raw output committed beside the report)."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.write_text("")

    def __call__(self, line):
        print(line, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")


def fleet_params(workload):
    p = workload.params
    return real_workloads.FleetParams(parallel=p["parallel"], ctx=p["ctx"], cache_ram_mib=p["cache_ram_mib"])


def conversation_of(workload):
    """{rid: (conversation index or None, turn)}: carry_replies sessions are conversations."""
    out = {}
    for i, session in enumerate(workload.sessions):
        for turn, req in enumerate(session.requests):
            out[req.rid] = (i if session.carry_replies else None, turn)
    return out


def bound_block(kind, sim_flags):
    """The granularity of the bound: 1 token for llama-server and for the simulator's slots model (which caches
    token by token, as llama-server's slots do), the simulator's `--block-size` for its paged model."""
    flags = list(sim_flags or [])
    if kind == LLAMA or ("--kv-cache-model" in flags and flags[flags.index("--kv-cache-model") + 1] == "slots"):
        return 1
    return int(flags[flags.index("--block-size") + 1])


def bound_of(records, workload, tokenizer, kind, port, block):
    """The run's bound (engine_bound.run_bound) from the sent bodies, tokenized by the pod at `port`; sets each
    record's expected_prompt_tokens to its token count (summarize checks it against usage)."""
    turns = conversation_of(workload)
    items, order = [], sorted(records, key=lambda r: (r.send_s, r.rid))
    for rec in order:
        tokens = tokenizer.tokens(kind, port, rec.body) if rec.body else []
        rec.expected_prompt_tokens = len(tokens)
        conversation, turn = turns[rec.rid]
        items.append({"tokens": tokens, "completion_tokens": rec.completion_tokens, "conversation": conversation,
                      "turn": turn})
    bound = run_bound(items, block)
    bound["by_rid"] = {rec.rid: possible for rec, possible in zip(order, bound.pop("per_request"))}
    return bound


def tokenized_bound(records, workload, tokenizer, kind, ports, block):
    """bound_of, tokenized by the first pod that answers; NaN figures (and an `error`) when none does (a pod that
    died during the run)."""
    errors = []
    for port in ports:
        try:
            return bound_of(records, workload, tokenizer, kind, port, block)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            errors.append(f"{port}: {exc}"[:200])
    nan = float("nan")
    return {"ratio": nan, "prompts_only_ratio": nan, "by_rid": {}, "error": "; ".join(errors)}


def record_line(rec, bound_tokens, **labels):
    """One request of a run as a JSON-ready dict (records.jsonl.gz): what was measured, and its bound."""
    return {**labels, "rid": rec.rid, "group": rec.group, "pod": rec.pod, "status": rec.status, "error": rec.error,
            "send_s": round(rec.send_s, 4), "ttft_s": round(rec.ttft_s, 4), "e2e_s": round(rec.e2e_s, 4),
            "prompt_tokens": rec.prompt_tokens, "cached_tokens": rec.cached_tokens,
            "completion_tokens": rec.completion_tokens, "bound_tokens": bound_tokens,
            "match_percent": rec.match_percent, "lag_ms": round(rec.lag_ms, 3), "timings": rec.timings}


def run_one(workload, strategy, routing, seed, fleet_name, sim_flags, cal, args, tmp, tokenizer):
    """One run on a fresh fleet and gateway; returns (records, row fields beyond summarize's)."""
    kind = LLAMA if fleet_name == LLAMA else SIM
    params = fleet_params(workload)
    label = f"{workload.name}-s{seed}-{strategy}-{fleet_name}"
    fleet = Fleet(kind, tmp, label, args.pods, params, sim_flags=sim_flags)
    gateway = None
    try:
        gateway = start_gateway(tmp, fleet, routing, seed, label, args.gateway_threads)
        shown = f"{workload.name:>16} s{seed} {fleet_name:<12} {strategy:<25}"
        cpu_before = fleet.cpu_seconds()
        with QueueSampler(fleet.ports(), max_s=args.deadline_s + 30) as sampler:
            records, wall, notes = run_workload("127.0.0.1", gateway.port, workload, 1.0, args.deadline_s,
                                                progress=args.progress, label=shown, capture=True,
                                                request_timeout_s=REQUEST_TIMEOUT_S)
        cpu_after = fleet.cpu_seconds()
        busy = calibrate.busy_seconds(records)
        cpu = {pod: cpu_after[pod] - cpu_before[pod] for pod in cpu_after
               if cpu_after[pod] is not None and cpu_before.get(pod) is not None}
        notes["pod_busy_s"] = {pod.rsplit("-", 1)[-1]: round(v, 3) for pod, v in busy.items()}
        notes["pod_cpu_s"] = {pod.rsplit("-", 1)[-1]: round(v, 3) for pod, v in cpu.items()}
        notes["slowdown"] = calibrate.slowdown(list(busy.values()), list(cpu.values())) if kind == LLAMA else None
        if kind == LLAMA:   # the simulator's timings count its own tokens: no comparison with llama's fit
            factors = calibrate.contention(cal, records, workload.name)
            notes["contention_prefill"], notes["contention_decode"] = factors["prefill"], factors["decode"]
            notes["alone_prefill"], notes["alone_decode"] = factors["n_prefill"], factors["n_decode"]
        notes["crashed"] = fleet.dead() + ([f"gateway exited with {gateway.proc.returncode}"]
                                           if gateway.proc.poll() is not None else [])
        counters = engine_counters(fleet.ports())
        notes["engine_hit_ratio"] = engine_hit_ratio(counters)
        notes["engine_counters"] = counters
        notes |= sampler.summary()
        notes |= gateway_view(gateway, metrics_texts([gateway]))
        notes["prediction_accuracy"] = prediction_accuracy([gateway])
        block = bound_block(kind, sim_flags)
        bound = tokenized_bound(records, workload, tokenizer, kind, fleet.ports(), block)
        notes["upper_bound_engine"] = bound["ratio"]
        notes["upper_bound_prompts_only"] = bound["prompts_only_ratio"]
        notes["bound_block"] = block
        notes["bound_by_rid"] = bound["by_rid"]
        notes |= {f"requests_{what}": n for what, n in classify_misses(records, bound["by_rid"]).items()}
        return records, wall, notes
    finally:
        if gateway is not None:
            gateway.stop()
        fleet.stop()


def make_row(workload, strategy, records, wall, notes, args):
    by_rid = {r.rid: r for r in workload.requests()}
    row = summarize(strategy, records, by_rid, wall, notes.pop("engine_hit_ratio"), 1.0) | notes
    row["upper_bound"] = row.pop("upper_bound_engine")
    bound = row["upper_bound"]
    row["of_bound"] = row["hit_ratio"] / bound if bound and bound == bound else float("nan")
    row["valid"] = bool(records) and row["lag_p99_ms"] <= args.lag_limit_ms
    return row | decision_stats(records, args.pods)


def print_row(log, name, row):
    for line in row["crashed"]:
        log(f"{name:>16} s{row['seed']} {row['fleet']:<12} {row['strategy']:<25} CRASHED {line}")
    acc = "-" if row.get("prediction_accuracy") is None else f"{row['prediction_accuracy'] * 100:5.1f} %"
    deferred = "-" if row.get("deferred_mean") is None else f"{row['deferred_mean']:.2f}/{row['deferred_max']:.0f}"
    log(f"{name:>16} s{row['seed']} {row['fleet']:<12} {row['strategy']:<25} ok {row['ok']:>3} err {row['errors']:>2}"
        f"  TTFT p50/p90 {row['ttft_p50']:6.3f}/{row['ttft_p90']:6.3f} s  cached {row['hit_ratio'] * 100:5.1f} % "
        f"(bound {row['upper_bound'] * 100:5.1f} %, engine {_pct(row.get('engine_hit_ratio'))})  pred {acc}  "
        f"retries {row.get('retries', 0)} stale {row.get('stale_sent', 0)}/{row.get('stale_detected', 0)} "
        f"scrape err {row.get('scrape_errors', 0)}  deferred {deferred}  lag p99 {row['lag_p99_ms']:5.1f} ms"
        f"{'' if row['valid'] else ' INVALID'}  wall {row['wall_s']:5.1f} s")


def _pct(x):
    return "-" if x is None else f"{x * 100:.1f} %"


def sim_setup(which, cal, rows, kept, fparams, workload, strategy=None):
    """(simulator flags, in-situ factors or None) of a simulated fleet: `which` = isolated (the calibration as
    probed) or in-situ (slowed by the contention the real runs met: those of `strategy`, or all of the workload's
    when None), shared-cpu or burn-cpu (the calibration as the probe between the workload's real runs found the
    machine: calibrate.with_in_run, where InRunProbe ran). The client overhead is taken at the real runs' mean prompt;
    `workload` (its name) picks its own cost after a cached prefix (calibrate.sim_flags)."""
    real_rows = [r for r in rows if r["fleet"] == LLAMA and r["valid"] and r["ok"]]
    prompt = sum(r["prompt_tokens_mean"] for r in real_rows) / len(real_rows) if real_rows else None
    base = calibrate.sim_flags(cal, fparams, prompt_tokens=prompt, workload=workload)
    if which == "isolated":
        return base, None
    # The machine as the probe between the workload's real runs found it, where it ran (InRunProbe).
    in_run = (cal.get("in_run") or {}).get(workload)
    c = calibrate.with_in_run(cal, in_run) if in_run else cal
    if which == "burn-cpu":
        return calibrate.sim_flags(c, fparams, prompt_tokens=prompt, workload=workload) + ["--burn-cpu"], None
    if which == "shared-cpu":
        return (calibrate.sim_flags(c, fparams, prompt_tokens=prompt, workload=workload)
                + calibrate.shared_cpu_flags(c)), None
    real = [rec for (fleet, s, _), recs in kept.items() if fleet == LLAMA and strategy in (None, s) for rec in recs]
    factors = calibrate.contention(cal, real, workload)
    return calibrate.sim_flags(calibrate.scaled(cal, factors), fparams, prompt_tokens=prompt,
                              workload=workload), factors


def run_fleet(log, name, workload_of, strategies, fleet_name, flags_of, cal, args, tmp, tokenizer, rows, kept,
              after_run=None):
    """Every seed and strategy of one workload on one fleet (invalid runs rerun; flags_of(strategy): the simulator's
    flags; after_run(): called after each run, its fleet stopped); appends rows, keeps records."""
    for seed in args.seeds:
        workload = workload_of(seed)
        for position, (strategy, routing) in enumerate(rotated(strategies, seed)):
            for attempt in range(1 + max(0, args.rerun_invalid)):
                records, wall, notes = run_one(workload, strategy, routing, seed, fleet_name, flags_of(strategy), cal,
                                               args, tmp, tokenizer)
                by_rid = notes.pop("bound_by_rid")
                row = make_row(workload, strategy, records, wall, notes, args)
                row |= {"fleet": fleet_name, "seed": seed, "attempt": attempt, "position": position}
                rows.append(row)
                labels = {"workload": name, "fleet": fleet_name, "strategy": strategy, "seed": seed,
                          "attempt": attempt}
                with gzip.open(args.records_path, "at") as f:
                    for rec in sorted(records, key=lambda r: (r.send_s, r.rid)):
                        f.write(json.dumps(record_line(rec, by_rid.get(rec.rid), **labels)) + "\n")
                        rec.body, rec.reply = b"", ""   # tokenized already: only the figures are kept
                print_row(log, name, row)
                if after_run:
                    after_run()
                if row["valid"]:
                    break
            kept.setdefault((fleet_name, strategy, seed), records)


class InRunProbe:
    """The calibration that stands for the machine while one workload's real runs ran, measured between them (each
    run's fleet stopped, so only the probe computes): after each run, one round of calibrate.contention_round on
    --pods idle llama-servers (-t 1 --parallel 2 -c 8192, kept up through the runs), and the next slice of the
    workload's own probe requests (calibrate.WORKLOAD_PROBE_SEED, which no run draws) one at a time on one more
    llama-server with the workload's flags (calibrate.workload_slices; unless cal["warm"] has the workload).
    finish() fits them (calibrate.fit_in_run; the workload probe against the calibration slowed as the lone pod
    was, and its simulated twin: sim_twin) into cal["in_run"][name] and cal["warm"][name]. The machine's speed,
    its pods' contention and above all the cost of a short prompt after a cached prefix moved within minutes
    (multi-turn's context coefficient measured 152 to 281 ms per 1e6 pairs in one day's committed runs), so what the simulated
    fleets take is measured while the runs ran, not before them."""

    def __init__(self, args, tmp, log, cal, name, params, runs):
        self.args, self.tmp, self.log, self.cal, self.name = args, tmp, log, cal, name
        self.samples = {"prefill": {}, "decode": {}}
        self.pods, self.pool, self.wpod = [], None, None
        self.slices, self.by_rid, self.wall, self.sent = [], {}, 0.0, 0
        try:
            for i in range(args.pods):
                self.pods.append(LlamaServer(tmp, name=f"in-run-{name}-{i}", parallel=2, ctx=8192, threads=1))
            if name not in cal.setdefault("warm", {}):
                self.workload = real_workloads.build(name, params, calibrate.WORKLOAD_PROBE_SEED)
                self.fp = fleet_params(self.workload)
                self.slices = calibrate.workload_slices(self.workload, runs)
                log(f"calibration: {name}: its requests (seed {calibrate.WORKLOAD_PROBE_SEED}) in {len(self.slices)} "
                    f"slices between its runs, one at a time on one llama-server{llama_desc(self.fp)}")
                self.wpod = LlamaServer(tmp, name=f"calibration-{name}", parallel=self.fp.parallel, ctx=self.fp.ctx,
                                        threads=1, extra=llama_flags(self.fp))
            self.pool = concurrent.futures.ThreadPoolExecutor(len(self.pods))
            list(self.pool.map(lambda pod: calibrate._stream(pod, [{"role": "user", "content": "warm up"}], 4),
                               self.pods))
        except BaseException:
            self.stop()
            raise

    def round(self):
        rep = len(self.samples["prefill"].get(1, []))
        calibrate.contention_round(self.pool, self.pods, self.samples, seed=11, rep=rep, cal=self.cal)
        self._next_slice()

    def _next_slice(self):
        if self.sent < len(self.slices):
            by_rid, wall = calibrate._one_at_a_time(self.wpod.port, self.slices[self.sent])
            self.by_rid |= by_rid
            self.wall += wall
            self.sent += 1

    def stop(self):
        if self.pool:
            self.pool.shutdown()
            self.pool = None
        for pod in self.pods + ([self.wpod] if self.wpod else []):
            pod.stop()
        self.pods, self.wpod = [], None

    def finish(self):
        """Sends the slices left, stops the pods, fits: cal["warm"][name] (when probed here) and the in-run fit
        (calibrate.fit_in_run; returned, None without a round)."""
        try:
            while self.wpod and self.sent < len(self.slices):
                self._next_slice()
        finally:
            self.stop()
        if not self.samples["prefill"].get(1):
            return None
        fit = calibrate.fit_in_run(self.samples)
        self.log(f"calibration: {self.name}: contention between its {fit['rounds']} real runs: "
                 + ", ".join(f"{k} busy: prefill x{p:.2f}" for k, p in enumerate(fit["prefill"], start=1))
                 + f"; a lone pod x{fit['drift']['prefill']:.2f} prefill, x{fit['drift']['decode']:.2f} decode "
                 "against the calibration")
        if self.slices:
            c = calibrate.with_in_run(self.cal, fit)
            warm = calibrate.fit_workload_probe(self.name, self.by_rid, self.wall, c["prefill"],
                                                log=lambda s: self.log("calibration: " + s))
            self.cal["warm"][self.name] = sim_twin(self.args, self.tmp, self.log, c, self.name, self.workload,
                                                   self.fp, warm) | {"slices": len(self.slices)}
        return fit


def llama_desc(fp):
    return (f" (-t 1 --parallel {fp.parallel} -c {fp.ctx}"
            f"{f' --cache-ram {fp.cache_ram_mib}' if fp.cache_ram_mib >= 0 else ''})")


def sim_twin(args, tmp, log, cal, name, workload, fp, warm):
    """`warm` (calibrate.fit_workload_probe's, with its by_rid) and the same requests on one simulated pod whose
    context pairs cost as its own (calibration `cal`): the thin-batch width in its tokens
    (calibrate.probe_workload_sim)."""
    by_rid = warm.pop("by_rid")
    prompt = sum(new + cached for new, cached, _ in by_rid.values()) / max(1, len(by_rid))
    bare = {**cal, "warm": {}, "prefill": {**cal["prefill"], "context_attention_ms_per_m_pairs": None}}
    flags = calibrate.sim_flags(bare, fp, prompt_tokens=prompt)
    sim = Fleet(SIM, tmp, f"calibration-{name}-sim", 1, fp, sim_flags=flags)
    try:
        return warm | calibrate.probe_workload_sim(sim.ports()[0], workload, by_rid,
                                                   calibrate.client_overhead_ms(cal, prompt),
                                                   calibrate.sim_pair_ms(cal), log=lambda s: log("calibration: " + s))
    finally:
        sim.stop()


def calibration(args, tmp, log):
    """The calibration: --calibration FILE, or a probe of one llama-server started alone; and, for the shared-cpu
    simulated fleet, the contention probe of a fleet of --pods llama-servers (unless the file has one). Each
    workload's own probe runs between its real runs (InRunProbe), or before its runs without a real fleet
    (calibrate_workload)."""
    if args.calibration:
        cal = json.loads(Path(args.calibration).read_text())
    else:
        log("calibration: one llama-server alone (-t 1 --parallel 2 -c 8192), probed directly")
        pod = LlamaServer(tmp, name="calibration", parallel=2, ctx=8192, threads=1)
        try:
            cal = calibrate.probe(pod, repeats=args.calibration_repeats, log=lambda s: log("calibration: " + s))
        finally:
            pod.stop()
    if SIM in args.fleets and "shared-cpu" in args.sim_calibrations and not cal.get("contention_probe"):
        log(f"calibration: {args.pods} llama-servers (-t 1 --parallel 2 -c 8192), 1 to {args.pods} prefilling "
            "(and decoding) at once")
        pods = []
        try:
            for i in range(args.pods):
                pods.append(LlamaServer(tmp, name=f"contention-{i}", parallel=2, ctx=8192, threads=1))
            cal["contention_probe"] = calibrate.probe_contention(pods, repeats=args.calibration_repeats,
                                                                 log=lambda s: log("calibration: " + s))
        finally:
            for pod in pods:
                pod.stop()
    return cal


def calibrate_workload(args, tmp, log, cal, name, params):
    """For simulated fleets without the real one in the same run (with it, InRunProbe measures this between the
    runs): workload `name` probed for its own cost of new tokens after a cached prefix (cal["warm"][name]; kept when
    a --calibration file has it): its requests (calibrate.WORKLOAD_PROBE_SEED, which no run draws) one at a time on
    one llama-server with its flags (calibrate.probe_workload), then on one simulated pod (sim_twin)."""
    if SIM not in args.fleets or name in cal.setdefault("warm", {}):
        return
    workload = real_workloads.build(name, params, calibrate.WORKLOAD_PROBE_SEED)
    fp = fleet_params(workload)
    log(f"calibration: {name}: its requests (seed {calibrate.WORKLOAD_PROBE_SEED}) one at a time on one "
        f"llama-server{llama_desc(fp)}")
    pod = LlamaServer(tmp, name=f"calibration-{name}", parallel=fp.parallel, ctx=fp.ctx, threads=1,
                      extra=llama_flags(fp))
    try:
        warm = calibrate.probe_workload(pod, workload, cal["prefill"], log=lambda s: log("calibration: " + s))
    finally:
        pod.stop()
    cal["warm"][name] = sim_twin(args, tmp, log, cal, name, workload, fp, warm)


def main(argv=None):
    args = parse_args(argv)
    if args.list_params:
        from dataclasses import fields
        for name, cls in real_workloads.PARAMS.items():
            print(f"{name}:")
            for f in fields(cls):
                print(f"  {name}.{f.name} = {f.default!r}")
        return 0
    overrides = parse_params(args.param)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in real_workloads.BUILDERS]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; known: {', '.join(real_workloads.BUILDERS)}")
    if not llama_available():
        raise SystemExit(f"llama-server not found at {LLAMA_SERVER_BIN}: run scripts/fetch_llama.sh")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "progress.log")
    args.records_path = out / "records.jsonl.gz"
    args.records_path.write_bytes(b"")
    command = args.command or "loadtest/bench/real.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    log(f"$ {command}")
    started = time.monotonic()
    git_at_start = provenance.git_info()
    fleet_names = ([LLAMA] if LLAMA in args.fleets else []) + (
        [f"sim-{c}" for c in args.sim_calibrations] if SIM in args.fleets else [])
    summary = {"kind": "real-engine", "pods": args.pods, "seeds": args.seeds, "lag_limit_ms": args.lag_limit_ms,
               "fleets": fleet_names, "workloads": {}}
    model_path = llama_model()
    with provenance.LoadSampler() as load, tempfile.TemporaryDirectory(prefix="prefixgate-real-") as tmp:
        if args.work_dir:
            tmp = args.work_dir
            Path(tmp).mkdir(parents=True, exist_ok=True)
        strategies = resolve_strategies(args.strategies, gateway_strategies(tmp), extra=REAL_STRATEGIES)
        if any(name == "oracle" for name, _ in strategies):
            raise SystemExit("the oracle needs /sim/cache/match, which llama-server lacks: leave it out")
        summary["strategies"] = [s for s, _ in strategies]
        workload_params = [(name, {**(TINY.get(name, {}) if args.tiny else {}), **overrides.get(name, {})})
                           for name in names]
        cal = calibration(args, tmp, log)
        tokenizer = Tokenizer()
        for name, params in workload_params:
            if LLAMA not in args.fleets:
                calibrate_workload(args, tmp, log, cal, name, params)
            (out / "calibration.json").write_text(real_report.dumps(cal))
            summary["calibration"] = {k: v for k, v in cal.items() if k != "samples"}

            def workload_of(seed, name=name, params=params):
                return real_workloads.build(name, params, seed)

            first = workload_of(args.seeds[0])
            fparams = fleet_params(first)
            rows, kept, fleets = [], {}, {}
            if LLAMA in args.fleets:
                probe = (InRunProbe(args, tmp, log, cal, name, params, len(args.seeds) * len(strategies))
                         if SIM in args.fleets else None)
                try:
                    run_fleet(log, name, workload_of, strategies, LLAMA, lambda s: [], cal, args, tmp, tokenizer,
                              rows, kept, after_run=probe.round if probe else None)
                except BaseException:
                    if probe:   # the runs failed: stop the probe's pods, fit nothing, keep the runs' own error
                        probe.stop()
                    raise
                if probe and (fit := probe.finish()):
                    cal.setdefault("in_run", {})[name] = fit
                    (out / "calibration.json").write_text(real_report.dumps(cal))
                    summary["calibration"] = {k: v for k, v in cal.items() if k != "samples"}
                fleets[LLAMA] = {"flags": ["-t", "1", "--parallel", str(fparams.parallel), "-c", str(fparams.ctx)]
                                 + (["--cache-ram", str(fparams.cache_ram_mib)] if fparams.cache_ram_mib >= 0 else [])}
            if SIM in args.fleets:
                for which in args.sim_calibrations:
                    fleet_name = f"sim-{which}"
                    setups = {strategy: sim_setup(which, cal, rows, kept, fparams, name,
                                                  strategy if args.in_situ == "strategy" else None)
                              for strategy, _ in strategies}
                    for strategy, (flags, factors) in setups.items():
                        if factors:
                            log(f"{name}: {fleet_name} {strategy}: the real runs' requests alone on their pod were "
                                f"slower than the calibration pod: prefill x{factors['prefill']:.2f} "
                                f"({factors['n_prefill']} requests), decode x{factors['decode']:.2f} "
                                f"({factors['n_decode']} requests)")
                    log(f"{name}: {fleet_name} flags ({strategies[0][0]}): {' '.join(setups[strategies[0][0]][0])}")
                    fleets[fleet_name] = {"flags": {s: f for s, (f, _) in setups.items()},
                                          "factors": {s: x for s, (_, x) in setups.items() if x}}
                    run_fleet(log, name, workload_of, strategies, fleet_name, lambda s: setups[s][0], cal, args,
                              tmp, tokenizer, rows, kept)
            aggregates = {fleet: aggregate([r for r in rows if r["fleet"] == fleet], [s for s, _ in strategies],
                                           real_report.EXTRA_FIELDS) for fleet in fleets}
            plot = f"{name}-ttft-cdf.png"
            real_report.plot_ttft(out / plot, name, kept, args.seeds[0], [s for s, _ in strategies], list(fleets))
            summary["workloads"][name] = {"title": first.title, "description": first.description,
                                          "params": first.params, "fleets": fleets, "aggregates": aggregates,
                                          "runs": rows, "plot": plot}
    elapsed = time.monotonic() - started
    binaries = {"prefixgate": GATEWAY_BIN, "prefixgate-engine-sim": SIM_BIN, "llama-server": LLAMA_SERVER_BIN,
                "model": str(model_path)}
    info = provenance.collect(command, binaries, load, git=git_at_start)
    summary["provenance"] = info | {"wall_s": elapsed}
    (out / "summary.json").write_text(real_report.dumps(summary))
    (out / "REPORT.md").write_text(real_report.render_report(summary))
    log(f"report: {out / 'REPORT.md'} ({elapsed:.0f} s)")
    failed = [f"{w}/{r['fleet']}/{r['strategy']}/s{r['seed']}" for w, d in summary["workloads"].items()
              for r in d["runs"] if r["errors"] or r["crashed"]]
    short = [(w, f, s, n) for w, d in summary["workloads"].items() for f, agg in d["aggregates"].items()
             for s, n in short_of_seeds(agg, args.min_valid_seeds)]
    if failed:
        print(f"runs with errors or crashed processes: {', '.join(failed)}", file=sys.stderr)
    for w, f, s, n in short:
        print(f"{w}/{f}/{s}: only {n} valid seeds (need {args.min_valid_seeds})", file=sys.stderr)
    return 1 if failed or short else 0


if __name__ == "__main__":
    sys.exit(main())
