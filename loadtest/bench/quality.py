#!/usr/bin/python3
"""Routing-quality benchmark: for each workload, for each seed, for each strategy (in an order rotated by the seed),
start fresh simulated engine pods (cold caches) and a prefixgate in front of them, stream the seeded workload
through the gateway, and report throughput, TTFT, ITL, the engines' token hit ratio against the finite-cache
oracle and the infinite-cache upper bound, the load per pod and the client's send lag; then the mean and 95 %
confidence interval of every figure over the seeds.

`oracle` is a reference, not a gateway strategy: no gateway, each request goes straight to the pod whose real
cache holds the longest prefix, load weighed as the blend does (oracle.py). A run whose send lag p99 exceeds
10 ms is invalid: it is rerun (--rerun-invalid times) and, if still invalid, left out of the aggregates.

`pd-NAME` (e.g. pd-prefix-cache) runs NAME's routing on a disaggregated fleet of the same --pods: the first
--prefill-pods P pods `role: prefill` (simulator --role prefill), the rest `role: decode`, the decode pods pulling
the prompt's KV at --kv-transfer-ms-per-1k-tokens; NAME itself is the aggregated comparison (every pod `both`).
Such runs add TPOT (time per output token) and the prefill pods' engine-reported hit ratio to compare (bench/pd.py);
--output-tokens N sets every workload's output length (long outputs are where decode interference shows).

--replicas N runs N gateways per run, sharing their prefix records and in-flight counts through one fresh Redis
(state_sync), and spreads the requests round-robin over them (consecutive turns of a conversation on different
replicas); --no-sync runs the same replicas without state sync, each learning alone.

Flow control (issue 27): the workloads noisy-neighbour, noisy-neighbour-alone, priority-overload and
mixed-objectives (bench/flow_workloads.py) send a tenant, a priority class and a TTFT objective per request; a
strategy setting `flow.KEY=VALUE` sets the gateway's flow_control.KEY (`least-request:flow.enabled=true`, over the
workload's classes and max_in_flight_per_pod), and their report adds per tenant / class figures, sheds, lost
requests and the targets (bench/flow.py); --docs FILE writes those tables between the markers in FILE.
scripts/bench_flow.sh runs them all.

All latencies are simulated seconds: the pods run with --time-scale S (delays x S) and every measured duration
is divided by S. Workload parameters are set with --param WORKLOAD.NAME=VALUE (see --list-params).

Examples:
  loadtest/bench/quality.py --workloads capacity-pressure --strategies random,prefix-cache,oracle --seeds 1-3
  loadtest/bench/quality.py --tiny --pods 2 --strategies random,prefix-cache,oracle --out /tmp/report
  loadtest/bench/quality.py --workloads multi-turn --strategies prefix-cache --replicas 3 --out /tmp/x3
  loadtest/bench/quality.py --workloads shared-prefix --strategies prefix-cache,pd-prefix-cache --prefill-pods 2
  scripts/bench_quality.sh        (the full committed report)
"""
import argparse
import shlex
import sys
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import provenance  # noqa: E402
from bench import flow, flow_workloads, report, workloads  # noqa: E402
from bench.aggregate import add_oracle_ratios, aggregate, short_of_seeds  # noqa: E402
from bench.decisions import decision_stats  # noqa: E402
from bench.pd import DEFAULT_KV_TRANSFER_MS_PER_1K, DEFAULT_PREFILL_PODS, is_pd  # noqa: E402
from bench.runner import (ORACLE, check_replica, gateway_strategies, gateway_takes_random_seed,  # noqa: E402
                          pd_refusal, resolve_strategies, rotated, run_one, sim_supports, state_sync_refusal)
from bench.stats import LAG_LIMIT_MS, steady_stages, summarize  # noqa: E402
from bench.trace import TraceParams, trace_workload  # noqa: E402
from harness import GATEWAY_BIN, SIM_BIN  # noqa: E402

PARAMS = {**workloads.PARAMS, "trace": TraceParams, **flow_workloads.PARAMS}
BUILDERS = {**workloads.BUILDERS, "trace": trace_workload, **flow_workloads.BUILDERS}
DEFAULT_WORKLOADS = "shared-prefix,multi-turn,capacity-pressure,capacity-pressure-repeating,trace"
MIN_VALID_SEEDS = 5
# --tiny: seconds, for the smoke test and development.
TINY = {
    "shared-prefix": {"groups": "4", "prompts_per_group": "4", "rate": "20"},
    "multi-turn": {"users": "4", "turns": "3", "user_rate": "8", "think_s": "0.2", "answer_tokens": "96"},
    "capacity-pressure": {"groups": "8", "output_tokens": "200", "rates": "4,8", "stage_s": "1.5"},
    "capacity-pressure-repeating": {"groups": "8", "output_tokens": "200", "rates": "4,8", "stage_s": "1.5"},
    "trace": {"limit": "24", "speedup": "4"},
    # The flow workloads (issue 27): 2 pods of batch 4 (about 9 req/s), a few seconds each.
    "noisy-neighbour": {"batch": "4", "duration_s": "3", "flood_start_s": "0.5", "flood_s": "1", "time_scale": "0.5"},
    "noisy-neighbour-alone": {"batch": "4", "duration_s": "3", "flood_start_s": "0.5", "flood_s": "1",
                              "time_scale": "0.5"},
    "priority-overload": {"batch": "4", "duration_s": "3", "time_scale": "0.5"},
    "mixed-objectives": {"batch": "4", "duration_s": "3", "time_scale": "0.5"},
}


# The parameter that sets each workload's output length in tokens (--output-tokens); the trace's come from the trace.
OUTPUT_PARAMS = {"shared-prefix": "output_tokens", "multi-turn": "answer_tokens",
                 "capacity-pressure": "output_tokens", "capacity-pressure-repeating": "output_tokens"}


def workload_params(name, tiny, output_tokens, overrides):
    """A workload's parameter overrides: --tiny's, then --output-tokens (its OUTPUT_PARAMS entry), then its own
    --param items, each winning over the one before."""
    params = dict(TINY[name]) if tiny else {}
    if output_tokens and name in OUTPUT_PARAMS:
        params[OUTPUT_PARAMS[name]] = str(output_tokens)
    return params | overrides.get(name, {})


def build_workload(name, overrides, pods, seed):
    params = workloads.apply_overrides(PARAMS[name](), overrides)
    return BUILDERS[name](params, pods, seed)


def parse_params(items):
    """--param WORKLOAD.NAME=VALUE items -> {workload: {name: value}}."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        workload, dot, name = key.partition(".")
        if not sep or not dot or workload not in PARAMS:
            raise SystemExit(f"--param {item!r}: expected WORKLOAD.NAME=VALUE with WORKLOAD in {', '.join(PARAMS)}")
        out.setdefault(workload, {})[name] = value
    return out


def parse_seeds(text):
    """"1-5" / "1,3,7" / "2-3,9" -> [1, 2, 3, 4, 5] / [1, 3, 7] / [2, 3, 9] (order kept, duplicates dropped)."""
    seeds = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        values = range(int(lo), int(hi) + 1) if dash else [int(part)]
        seeds += [s for s in values if s not in seeds]
    if not seeds or any(s <= 0 for s in seeds):
        raise SystemExit(f"--seeds {text!r}: expected positive seeds like 1-5 or 1,2,3")
    return seeds


def list_params():
    for name, cls in PARAMS.items():
        print(f"{name}:")
        for f in fields(cls):
            print(f"  {name}.{f.name} = {f.default!r}")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=DEFAULT_WORKLOADS,
                    help=f"comma-separated, in order (default: {DEFAULT_WORKLOADS})")
    ap.add_argument("--strategies", default="all",
                    help="comma-separated, or all (default: every gateway strategy and the oracle)")
    ap.add_argument("--pods", type=int, default=8, help="simulated engine pods (default 8)")
    ap.add_argument("--time-scale", type=float, default=None,
                    help="simulator speed for every workload: delays x this; latencies are reported / this "
                         "(default: each workload's time_scale parameter)")
    ap.add_argument("--kv-capacity-tokens", type=int, default=0, metavar="TOKENS",
                    help="KV cache per pod for every workload, in the workload's (scaled) tokens; default: each "
                         "workload's own (capacity-pressure derives it from working_set_fraction)")
    ap.add_argument("--seeds", default=None, help="workload (and gateway random_seed) seeds, e.g. 1-5 or 1,4,9 "
                                                  "(default 1-5; with --tiny 1-2)")
    ap.add_argument("--seed", type=int, default=None, help="a single seed (same as --seeds N)")
    ap.add_argument("--rerun-invalid", type=int, default=1, metavar="N",
                    help=f"rerun a run whose send lag p99 exceeds {LAG_LIMIT_MS:g} ms up to N times (default 1)")
    ap.add_argument("--min-valid-seeds", type=int, default=None,
                    help=f"exit 1 when a strategy has fewer valid seeds (default: {MIN_VALID_SEEDS}, or every seed "
                         "when fewer are run)")
    ap.add_argument("--param", action="append", default=[], metavar="WORKLOAD.NAME=VALUE")
    ap.add_argument("--output-tokens", type=int, default=0, metavar="N",
                    help="output tokens per request (full size) for every workload that has the parameter: "
                         f"{', '.join(f'{w}.{p}' for w, p in OUTPUT_PARAMS.items())} (the trace keeps its own); a "
                         "--param for the same parameter wins (default: each workload's own)")
    ap.add_argument("--prefill-pods", type=int, default=DEFAULT_PREFILL_PODS, metavar="P",
                    help="pd-NAME strategies: the first P of the --pods pods are prefill pods, the rest decode pods "
                         f"(default {DEFAULT_PREFILL_PODS})")
    ap.add_argument("--kv-transfer-ms-per-1k-tokens", type=float, default=DEFAULT_KV_TRANSFER_MS_PER_1K,
                    metavar="MS", help="pd-NAME strategies: the decode pods' KV pull cost, simulated ms per 1,000 "
                    f"prompt tokens (the simulator's flag; default {DEFAULT_KV_TRANSFER_MS_PER_1K:g})")
    ap.add_argument("--closed-loop", type=int, default=0, metavar="USERS",
                    help="run every workload closed loop with USERS concurrent users (each sends its next session "
                         "when the last one ends; arrival times are ignored) instead of open loop")
    ap.add_argument("--tiny", action="store_true", help="tiny workloads (seconds), 2 seeds: the smoke test")
    ap.add_argument("--gateway-threads", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=1, metavar="N",
                    help="gateway replicas per run, sharing their state through one Redis; requests go round-robin "
                         "over them, consecutive turns of a conversation to different replicas (default 1)")
    ap.add_argument("--no-sync", dest="sync", action="store_false",
                    help="with --replicas: no state sync and no Redis, each replica learns alone (the comparison)")
    ap.add_argument("--deadline-s", type=float, default=600.0, help="wall-clock limit of one run")
    ap.add_argument("--out", default="bench-report", help="folder for REPORT.md, summary.json and the PNGs")
    ap.add_argument("--work-dir", default=None,
                    help="keep the pods' and gateways' configs and logs here (default: a temporary folder, removed)")
    ap.add_argument("--command", default=None, help="the command line to quote in the report (default: this one)")
    ap.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                    help="progress bar on stderr (auto: when stderr is a terminal)")
    ap.add_argument("--list-params", action="store_true", help="print every workload parameter and exit")
    ap.add_argument("--docs", default=None, metavar="FILE",
                    help=f"with flow workloads: also replace the block between {flow.DOCS_BEGIN} and "
                         f"{flow.DOCS_END} in FILE (docs/benchmarks.md) with the flow-control tables")
    args = ap.parse_args(argv)
    args.progress = {"auto": None, "always": True, "never": False}[args.progress]
    if args.seed is not None:
        args.seeds = str(args.seed)
    args.seeds = parse_seeds(args.seeds or ("1-2" if args.tiny else "1-5"))
    if args.replicas < 1:
        ap.error(f"--replicas {args.replicas}: expected 1 or more gateways")
    if not args.sync and args.replicas < 2:
        ap.error("--no-sync needs --replicas N with N > 1")
    if args.output_tokens < 0:
        ap.error(f"--output-tokens {args.output_tokens}: expected a positive count (0 = each workload's own)")
    if any(is_pd(n) for n in args.strategies.split(",")) and not 1 <= args.prefill_pods < args.pods:
        ap.error(f"--prefill-pods {args.prefill_pods}: a disaggregated fleet of --pods {args.pods} needs 1 to "
                 f"{args.pods - 1} prefill pods")
    if args.kv_transfer_ms_per_1k_tokens < 0:
        ap.error("--kv-transfer-ms-per-1k-tokens: expected 0 or more")
    if args.min_valid_seeds is None:
        args.min_valid_seeds = min(MIN_VALID_SEEDS, len(args.seeds))
    return args


def prepare(name, params, seed, args):
    workload = build_workload(name, params, args.pods, seed)
    if args.time_scale:
        workload.time_scale = args.time_scale
    if args.kv_capacity_tokens:
        workload.kv_capacity_tokens = args.kv_capacity_tokens
        workload.description += f" KV cache set to {args.kv_capacity_tokens} tokens per pod."
    if args.closed_loop:
        workload.mode, workload.concurrency = "closed", args.closed_loop
        workload.description += f" Closed loop: {args.closed_loop} concurrent users, arrival times ignored."
    return workload


def decided(records, pd, args):
    """(records, pods) for the decisions table: a pd run's records with each request's pod its prefill pod, among
    the --prefill-pods (the strategy chose that pod; the decode pod is chosen by load)."""
    if not pd:
        return records, args.pods
    return [replace(r, pod=r.prefill_pod or r.pod) for r in records], args.prefill_pods


def run_seeds(name, params, strategies, args, tmp, seeded_gateway):
    """Every seed, every strategy (order rotated by seed), invalid runs rerun; returns (first seed's workload, run
    rows, first seed's [(strategy, records)] for the plots)."""
    rows, plotted, first = [], [], None
    for seed in args.seeds:
        workload = prepare(name, params, seed, args)
        first = first or workload
        by_rid = {r.rid: r for r in workload.requests()}
        for position, (strategy, routing) in enumerate(rotated(strategies, seed)):
            for attempt in range(1 + max(0, args.rerun_invalid)):
                records, wall, notes = run_one(workload, strategy, routing, seed, args, tmp, seeded_gateway)
                row = summarize(strategy, records, by_rid, wall, notes.pop("engine_hit_ratio"),
                                workload.params.get("token_scale", 1.0)) | notes
                row |= decision_stats(*decided(records, notes.get("pd"), args))
                row |= {"seed": seed, "attempt": attempt, "position": position}
                if workload.stages:
                    row["stages"] = steady_stages(records, workload.stages, by_rid)
                if workload.flow_control is not None:   # a flow-control workload (issue 27)
                    row["flow"] = flow.flow_row(records, by_rid)
                rows.append(row)
                print_row(name, row)
                if row["valid"]:
                    break
            if seed == args.seeds[0]:
                plotted.append((strategy, records))
    add_oracle_ratios(rows, ORACLE)
    names = [s for s, _ in strategies]
    return first, rows, sorted(plotted, key=lambda run: names.index(run[0]))


def print_row(name, row):
    strategy = row["strategy"] + (f" x{row['replicas']}" if row.get("replicas", 0) > 1 else "")
    for line in row["crashed"]:
        print(f"{name:>17} s{row['seed']} {strategy:<23} CRASHED {line}", flush=True)
    pd = ""
    if row.get("pd"):
        hit = row.get("prefill_hit_ratio")
        pd = (f"  TPOT p90 {row['tpot_p90'] * 1000:6.1f} ms  prefill-pod hit "
              f"{'-' if hit is None else f'{hit * 100:5.1f} %'}  pd {row.get('pd_outcomes')}")
    elif row.get("tpot_p90") == row.get("tpot_p90"):   # not NaN
        pd = f"  TPOT p90 {row['tpot_p90'] * 1000:6.1f} ms"
    if "flow" in row:
        f = row["flow"]
        print(f"{name:>17} s{row['seed']} {strategy:<23} flow {'on' if row.get('flow_control') else 'off'}: sent "
              f"{f['all']['sent']} answered {f['all']['answered']} shed {f['shed_reasons']} lost {f['lost']}; "
              + "; ".join(f"{group} TTFT p90 {g['ttft_p90']:.3f} s met {g['attainment'] * 100:.1f} %"
                          for group, g in [*f["tenants"].items(), *f["classes"].items()])
              + f"; goodput {f['all']['goodput_rps']:.2f} req/s", flush=True)
    print(f"{name:>17} s{row['seed']} {strategy:<23} ok {row['ok']:>5} errors {row['errors']:>3}  TTFT p90 "
          f"{row['ttft_p90']:8.3f} s{pd}  hit {row['hit_ratio'] * 100:5.1f} % (bound {row['upper_bound'] * 100:5.1f} %)"
          f"  lag p99 {row['lag_p99_ms']:5.1f} ms{'' if row['valid'] else ' INVALID'}  preempted "
          f"{row['preemptions']}  wall {row['wall_s']:5.1f} s", flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.list_params:
        list_params()
        return 0
    overrides = parse_params(args.param)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    for name in names:
        if name not in BUILDERS:
            raise SystemExit(f"unknown workload {name!r}; known: {', '.join(BUILDERS)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = args.command or "loadtest/bench/quality.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    started = time.monotonic()
    git_at_start = provenance.git_info()  # before this run writes its plots into the tree
    summary = {"pods": args.pods, "seeds": args.seeds, "lag_limit_ms": LAG_LIMIT_MS, "replicas": args.replicas,
               "state_sync": args.replicas > 1 and args.sync, "prefill_pods": args.prefill_pods,
               "kv_transfer_ms_per_1k_tokens": args.kv_transfer_ms_per_1k_tokens,
               "output_tokens": args.output_tokens or None, "workloads": {}}
    sections, flow_aggs, flow_sections = [], {}, {}
    with provenance.LoadSampler() as load, tempfile.TemporaryDirectory(prefix="prefixgate-bench-") as tmp:
        if args.work_dir:
            tmp = args.work_dir
            Path(tmp).mkdir(parents=True, exist_ok=True)
        if not sim_supports("--token-scale"):
            raise SystemExit(f"{SIM_BIN} has no --token-scale: the benchmark needs the current simulator (rebuild it)")
        problems = check_replica(tmp, args.time_scale or 0.5)
        if problems:
            raise SystemExit("the simulator and loadtest/bench/textgen.py disagree: " + "; ".join(problems))
        seeded_gateway = gateway_takes_random_seed(tmp)
        refusal = state_sync_refusal(tmp) if summary["state_sync"] else None
        if refusal:
            raise SystemExit(f"{GATEWAY_BIN} refuses state_sync.enabled, which --replicas {args.replicas} needs "
                             f"(--no-sync runs the replicas without it): {refusal}")
        strategies = resolve_strategies(args.strategies, gateway_strategies(tmp), pd=True)
        refusal = pd_refusal(tmp) if any(is_pd(s) for s, _ in strategies) else None
        if refusal:
            raise SystemExit(f"{GATEWAY_BIN} refuses a pods file with `role: prefill` / `role: decode`, which the pd- "
                             f"strategies need (a build without disaggregation): {refusal}")
        if any(is_pd(s) for s, _ in strategies) and not sim_supports("--role"):
            raise SystemExit(f"{SIM_BIN} has no --role: the pd- strategies need the current simulator (rebuild it)")
        for name in names:
            params = workload_params(name, args.tiny, args.output_tokens, overrides)
            workload, rows, plotted = run_seeds(name, params, strategies, args, tmp, seeded_gateway)
            aggregates = aggregate(rows, [s for s, _ in strategies])
            sections.append(report.workload_section(workload, rows, aggregates, plotted, out_dir, args.seeds,
                                                    args.replicas))
            if workload.flow_control is not None:
                flow_aggs[name] = flow.flow_aggregate(rows, [s for s, _ in strategies])
                flow_sections[name] = flow.flow_section(name, flow_aggs[name])
                sections.append("\n".join(flow_sections[name]))
            summary["workloads"][name] = {"params": workload.params, "kv_capacity_tokens": workload.kv_capacity_tokens,
                                          "sim_args": workload.sim_args, "time_scale": workload.time_scale,
                                          "stages": workload.stages,
                                          "aggregates": aggregates, "runs": rows}
            if name in flow_aggs:
                summary["workloads"][name]["flow"] = flow_aggs[name]
                summary["workloads"][name]["flow_control"] = workload.flow_control
        if flow_aggs:
            sections.append("\n".join(flow.comparison_section(flow_aggs)))
            summary["flow_targets"] = flow.target_rows(flow_aggs)
    elapsed = time.monotonic() - started
    info = provenance.collect(command, {"prefixgate": GATEWAY_BIN, "prefixgate-engine-sim": SIM_BIN}, load,
                              git=git_at_start)
    summary["provenance"] = info | {"wall_s": elapsed, "gateway_random_seed": seeded_gateway}
    header = report.header(args, strategies, info, elapsed, seeded_gateway)
    path = report.write_report(out_dir, header, sections, summary)
    print(f"report: {path} ({elapsed:.0f} s)")
    if args.docs and flow_aggs:
        docs = Path(args.docs)
        docs.write_text(flow.replace_docs(docs.read_text(), flow.docs_tables(flow_aggs, flow_sections)))
        print(f"flow-control tables written into {docs}")
    # A flow workload's sheds (429/503 with a code) are its expected answers: only a lost request fails its run.
    failed = [f"{w}/{r['strategy']}/s{r['seed']}" for w, d in summary["workloads"].items() for r in d["runs"]
              if (r["flow"]["lost"] if "flow" in r else r["errors"]) or r["crashed"]]
    short = [(w, s, n) for w, d in summary["workloads"].items()
             for s, n in short_of_seeds(d["aggregates"], args.min_valid_seeds)]
    if failed:
        print(f"runs with errors or crashed processes: {', '.join(failed)}", file=sys.stderr)
    for w, s, n in short:
        print(f"{w}/{s}: only {n} valid seeds (need {args.min_valid_seeds})", file=sys.stderr)
    return 1 if failed or short else 0


if __name__ == "__main__":
    sys.exit(main())
