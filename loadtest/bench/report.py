"""The quality report: a Markdown file with, per workload, the figures over seeds (mean ± 95 % confidence
half-width), the steady-state TTFT per rate stage for stepped workloads, the routing decisions behind them, every
run's lag and validity, with several gateway replicas what they exchanged through Redis, PNG plots of the first
seed, and a summary.json with every per-seed row and the aggregates, all written into one folder."""
import json
import math
from pathlib import Path

from bench.aggregate import mean_ci
from bench.pd import HIT_POINTS_LIMIT, TPOT_GAIN_TARGET, TTFT_LOSS_LIMIT, is_pd, pd_comparison
from bench.plots import plot_pod_load, plot_ttft_cdf
from bench.stats import LAG_LIMIT_MS, NOT_STEADY_FACTOR, NOT_STEADY_GROWTH_S, WARMUP_FRACTION

# (aggregate key, title, format): sec = seconds, pct = ratio shown in %, ms = seconds shown in ms, num = plain.
COLUMNS = [
    ("throughput_rps", "req/s", "num2"),
    ("output_tps", "output tok/s", "num0"),
    ("ttft_p50", "TTFT p50 s", "sec"),
    ("ttft_p90", "TTFT p90 s (whole run)", "sec"),
    ("ttft_p99", "TTFT p99 s", "sec"),
    ("itl_p50", "ITL p50 ms", "ms"),
    ("tpot_p50", "TPOT p50 ms", "ms"),
    ("tpot_p90", "TPOT p90 ms", "ms"),
    ("hit_ratio", "token hit ratio", "pct"),
    ("of_oracle", "% of oracle", "pct"),
    ("of_bound", "% of upper bound", "pct"),
    ("pod_load_max", "busiest pod (mean pod load)", "load"),
    ("lag_p99_ms", "send lag p99 ms", "num1"),
    ("preemptions", "preemptions", "num0"),
    ("prediction_accuracy", "prediction accuracy", "pct"),
]
DIGITS = {"sec": 3, "num0": 0, "num1": 1, "num2": 2}
# Usage-based hit figures, meaningless for a disaggregated run (its decode legs report the pulled prompt as cached):
# shown "-" for pd strategies, whose prefill pods' hit ratio is in the disaggregation table instead.
USAGE_HIT_KEYS = {"hit_ratio", "of_oracle", "of_bound"}


def _finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def pm(stat, fmt):
    """'mean ± half-width' of an aggregate [mean, half-width, n] in a format; '-' without values."""
    mean, half, n = stat
    if not n or not _finite(mean):
        return "-"
    scale, digits, unit = {"pct": (100.0, 1, " %"), "ms": (1000.0, 1, ""), "mib": (1.0 / (1 << 20), 1, "")}.get(
        fmt, (1.0, DIGITS.get(fmt, 2), ""))
    text = f"{mean * scale:.{digits}f}"
    if _finite(half):
        text += f" ± {half * scale:.{digits}f}"
    return text + unit


def _cell(agg, key, fmt):
    if fmt == "load":
        return f"{pm(agg['pod_load_max'], 'num0')} ({agg['pod_load_mean'][0]:.0f})" if agg["seeds"] else "-"
    return pm(agg[key], fmt)


def aggregate_table(aggregates):
    head = "| strategy | valid seeds | " + " | ".join(title for _, title, _ in COLUMNS) + " | errors |"
    rule = "| --- " * (len(COLUMNS) + 3) + "|"
    body = []
    for name, agg in aggregates.items():
        errors = round(agg["errors"][0] * agg["errors"][2]) if agg["errors"][2] else 0
        seeds = str(len(agg["seeds"])) + (f" ({agg['invalid']} invalid)" if agg["invalid"] else "")
        body.append(f"| {name} | {seeds} | " + " | ".join("-" if is_pd(name) and key in USAGE_HIT_KEYS
                                                         else _cell(agg, key, fmt) for key, _, fmt in COLUMNS)
                    + f" | {errors} |")
    return "\n".join([head, rule, *body])


def _ratio(value, digits=2, suffix="x"):
    return "-" if value is None or not _finite(value) else f"{value:.{digits}f}{suffix}"


def _verdict(met):
    return {True: "yes", False: "**no**", None: "-"}[met]


def pd_section(rows, aggregates, seed):
    """Markdown for disaggregated runs: per strategy its fleet, TTFT and TPOT, the prefill pods' hit ratio (the
    whole fleet's for an aggregated strategy), the gateway's pd outcomes and mean legs; then each pd strategy
    against its aggregated strategy, with issue 26's targets (reported, not asserted)."""
    lines = ["### Disaggregated prefill/decode", "",
             "`pd-NAME` = NAME's routing on the same number of pods split by role (the first pods `role: prefill`, "
             "the rest `role: decode`; gateway `disaggregation` defaults: connector mode, decode pod by "
             "least-request, every request split); NAME = the same routing on pods that are all `both`. TPOT = "
             "(end-to-end - TTFT) / (output tokens - 1) per request with 2 or more output tokens, per full-size "
             "token. Prefill-pod hit ratio = the prefill pods' own `vllm:prefix_cache_hits_total` / "
             "`queries_total` (each prefill leg's lookup); for an aggregated strategy, every pod's. The usage-based "
             "hit columns above are \"-\" for pd strategies: a decode leg reports its pulled prompt as cached. "
             "The decisions table follows a pd strategy's prefill pods (its hit figures stay usage-based). Prefill leg "
             "and hand-off = the gateway's `prefixgate_pd_prefill_seconds` / `_handoff_seconds` means (simulated s). "
             "Mean ± 95 % CI over the valid seeds.", "",
             f"| strategy | fleet | valid seeds | TTFT p50 s | TTFT p90 s | TPOT p50 ms | TPOT p90 ms | prefill-pod "
             f"hit ratio | prefill leg s | hand-off s | pd outcomes (seed {seed}) | requests per prefill pod "
             f"(seed {seed}) |", "| --- " * 12 + "|"]
    for name, agg in aggregates.items():
        mine = [r for r in rows if r["strategy"] == name]
        if not mine or mine[0].get("fleet") is None:
            continue   # the oracle: no gateway, no fleet of its own
        first = next((r for r in mine if r["seed"] == seed and r["valid"]), None)
        outcomes = first.get("pd_outcomes") if first else None
        shown = "-" if not outcomes else ", ".join(f"{k} {v}" for k, v in outcomes.items() if v) or "none"
        spread = list(first["prefill_pod_requests"].values()) if first and first.get("prefill_pod_requests") else "-"
        lines.append(f"| {name} | {mine[0]['fleet']} | {len(agg['seeds'])} | {pm(agg['ttft_p50'], 'sec')} | "
                     f"{pm(agg['ttft_p90'], 'sec')} | {pm(agg['tpot_p50'], 'ms')} | {pm(agg['tpot_p90'], 'ms')} | "
                     f"{pm(agg['prefill_hit_ratio'], 'pct')} | {pm(agg['pd_prefill_s_mean'], 'sec')} | "
                     f"{pm(agg['pd_handoff_s_mean'], 'sec')} | {shown} | {spread} |")
    unsplit = [f"{r['strategy']} seed {r['seed']}" for r in rows if r.get("pd")
               and not (r.get("pd_outcomes") or {}).get("disaggregated")]
    lines.append("")
    if unsplit:
        lines += ["**pd runs in which the gateway split no request** (no `disaggregated` outcome: their figures are "
                  "not disaggregated serving's): " + ", ".join(unsplit), ""]
    compared = pd_comparison(aggregates)
    if compared:
        lines += [f"**Disaggregated vs aggregated** (ratios of the means over the valid seeds; issue 26's targets, "
                  f"reported, not asserted: TPOT p90 gain >= {TPOT_GAIN_TARGET:g}x, TTFT p90 ratio <= "
                  f"{TTFT_LOSS_LIMIT:g}x, prefill-pod hit ratio within {HIT_POINTS_LIMIT:g} points of the "
                  "aggregated fleet's):", "",
                  "| pd strategy | vs | TPOT p90 gain (aggregated / pd) | met | TTFT p90 ratio (pd / aggregated) | met "
                  "| hit ratio difference (points) | met |", "| --- " * 8 + "|"]
        for c in compared:
            lines.append(f"| {c['pd']} | {c['aggregated']} | {_ratio(c['tpot_gain'])} | {_verdict(c['meets']['tpot'])}"
                         f" | {_ratio(c['ttft_ratio'])} | {_verdict(c['meets']['ttft'])} | "
                         f"{_ratio(c['hit_points'], 1, '')} | {_verdict(c['meets']['hit'])} |")
        lines.append("")
    else:
        lines += ["No pd strategy ran with its aggregated strategy: no comparison.", ""]
    return lines


def stage_table(aggregates, stages):
    """Steady-state TTFT p90 per stage, mean ± half-width over the valid seeds, with the not-steady count."""
    lines = ["| strategy | " + " | ".join(f"{rate:g} req/s" for rate, _ in stages) + " |",
             "| --- " * (len(stages) + 1) + "|"]
    for name, agg in aggregates.items():
        cells = []
        for cell in agg.get("stages", []):
            text = pm(cell["ttft"], "sec")
            if cell["not_steady"]:
                text += f" (not steady {cell['not_steady']}/{cell['runs']})"
            cells.append(text)
        lines.append(f"| {name} | " + " | ".join(cells or ["-"] * len(stages)) + " |")
    return lines


# The decisions table (bench/decisions.py): (aggregate keys shown "a / b", title, format, what the column means).
DECISION_COLUMNS = [
    (("follow_rate",), "follow rate", "pct",
     "share of the requests after a group's first that went to the pod of the group's previous request"),
    (("hit_followed", "hit_moved"), "hit followed / moved", "pct",
     "token hit ratio of the requests that followed / moved"),
    (("ttft_p90_followed", "ttft_p90_moved"), "TTFT p90 s followed / moved", "sec",
     "TTFT p90 of the requests that followed / moved"),
    (("moved_share_of_misses",), "moves' share of misses", "pct",
     "of the prompt tokens not cached in requests after a group's first, the share in moved requests"),
    (("inflight_gap_moved",), "in-flight gap of moves", "num1",
     "median over moved requests of (requests in flight at the previous pod - at the chosen pod) when sent, as "
     "the client saw them: 1 = a warm pod left for one request of load"),
    (("match_moved_mean",), "match % of moves", "num0",
     "mean `x-prefix-match-percent` of moved requests: the chosen pod's match in the gateway's index (low = it "
     "knowingly moved to a cold pod; \"-\": no prefix strategy ran)"),
    (("pods_per_group",), "pods per group", "num2", "mean distinct pods used by a group of two requests or more"),
    (("pod_load_cv",), "load CV", "num2", "coefficient of variation of the requests served per pod (0 = even)"),
]


def decisions_table(aggregates):
    """Why a strategy wins or loses: its per-request decisions (mean ± half-width over the valid seeds), with a
    line per column saying what it is."""
    lines = ["**Decisions** (bench/decisions.py; a group = a conversation, a prefix group or a trace chain; in send "
             "order, each of its requests after the first either followed the previous one to its pod or moved; "
             "mean ± 95 % CI over the valid seeds):", "",
             "| strategy | " + " | ".join(title for _, title, _, _ in DECISION_COLUMNS) + " |",
             "| --- " * (len(DECISION_COLUMNS) + 1) + "|"]
    for name, agg in aggregates.items():
        lines.append(f"| {name} | " + " | ".join(" / ".join(pm(agg[k], fmt) for k in keys)
                                                  for keys, _, fmt, _ in DECISION_COLUMNS) + " |")
    return lines + [""] + [f"- {title}: {meaning}" for _, title, _, meaning in DECISION_COLUMNS] + [""]


# The replicas' table (several gateways per run): (aggregate key, title, format), as COLUMNS.
REPLICA_COLUMNS = [
    ("hit_ratio", "token hit ratio", "pct"),
    ("sync_lag_p99_s", "sync lag p99 ms", "ms"),
    ("sync_records_sent", "records sent", "num0"),
    ("sync_records_received", "records received", "num0"),
    ("sync_records_dropped", "records dropped", "num0"),
    ("sync_bytes_per_request", "bytes sent per request", "num0"),
    ("sync_redis_errors", "Redis errors", "num0"),
    ("sync_reconnects", "reconnects", "num0"),
    ("redis_used_memory", "Redis memory MiB (end)", "mib"),
]


def replicas_section(rows, aggregates, replicas, seed):
    """Markdown for several replicas per run: how requests were spread, and per strategy what the replicas
    exchanged through Redis (mean ± half-width over the valid seeds), and the requests each replica answered."""
    sync = any(r.get("sync_records_sent") is not None for r in rows)
    lines = ["### Replicas", "",
             f"{replicas} prefixgate replicas per run, the requests spread round-robin over them: the i-th session "
             f"starts on replica i mod {replicas} and each next turn goes to the next replica, so consecutive turns "
             "of a conversation never reach the same one. Every other figure of this workload is the whole fleet's. "
             + ("Sync figures are the replicas' `prefixgate_state_sync_*` series summed (the lag p99 from their "
                "histogram buckets added up); bytes sent per request = bytes sent / requests answered." if sync else
                "No replica exported state sync series (run with `--no-sync`, or a build without state sync): "
                "each learned its own prefix index."), "",
             "| strategy | valid seeds | " + " | ".join(t for _, t, _ in REPLICA_COLUMNS) + f" | requests per replica "
             f"(seed {seed}) |", "| --- " * (len(REPLICA_COLUMNS) + 3) + "|"]
    for name, agg in aggregates.items():
        mine = [r for r in rows if r["strategy"] == name and r.get("replicas", 0) > 1]
        if not mine:
            continue   # the oracle: no gateway
        spread = next((r["replica_requests"] for r in mine if r["seed"] == seed and r["valid"]), None)
        lines.append(f"| {name} | {len(agg['seeds'])} | " + " | ".join(pm(agg[k], f) for k, _, f in REPLICA_COLUMNS)
                     + f" | {spread if spread is not None else '-'} |")
    return lines + [""]


def runs_table(rows):
    lines = ["| seed | strategy | order | attempt | valid | lag p50/p99/max ms | TTFT p90 s | TPOT p90 ms | "
             "hit ratio | engine hit ratio | preemptions | % of oracle | upper bound | wall s |",
             "| --- " * 14 + "|"]
    for r in sorted(rows, key=lambda r: (r["seed"], r["position"], r["attempt"])):
        engine = "-" if r.get("engine_hit_ratio") is None else f"{r['engine_hit_ratio'] * 100:.1f} %"
        oracle = "-" if r.get("of_oracle") is None else f"{r['of_oracle'] * 100:.1f} %"
        lines.append(f"| {r['seed']} | {r['strategy']} | {r['position'] + 1} | {r['attempt'] + 1} | "
                     f"{'yes' if r['valid'] else '**INVALID**'} | {r['lag_p50_ms']:.2f}/{r['lag_p99_ms']:.2f}/"
                     f"{r['lag_max_ms']:.1f} | {r['ttft_p90']:.3f} | {_tpot(r)} | {r['hit_ratio'] * 100:.1f} % | "
                     f"{engine} | "
                     f"{r.get('preemptions', '-')} | {oracle} | {r['upper_bound'] * 100:.1f} % | {r['wall_s']:.1f} |")
    return lines


def _tpot(row):
    value = row.get("tpot_p90")
    return "-" if not _finite(value) else f"{value * 1000:.1f}"


def engine_disagreements(rows, tolerance=1e-6):
    """Runs without preemptions where the engines' /metrics hit ratio differs from the usage figures' (not
    disaggregated runs: their decode legs' usage counts the pulled prompt as cached, their engines do not)."""
    return [r for r in rows if r.get("preemptions") == 0 and r.get("engine_hit_ratio") is not None
            and not r.get("pd") and abs(r["engine_hit_ratio"] - r["hit_ratio"]) > tolerance]


def workload_section(workload, rows, aggregates, plotted, out_dir, seeds, replicas=1):
    """Markdown for one workload; writes its two PNGs (the first seed's runs) into out_dir."""
    cdf, load = f"{workload.name}-ttft-cdf.png", f"{workload.name}-pod-load.png"
    plot_ttft_cdf(Path(out_dir) / cdf, workload, plotted, seeds[0])
    plot_pod_load(Path(out_dir) / load, workload, plotted, seeds[0])
    k = workload.params.get("token_scale", 1.0)
    flags = " ".join(["--time-scale", f"{workload.time_scale:g}", "--kv-capacity-tokens",
                      str(workload.kv_capacity_tokens), *workload.sim_args])
    bounds = sorted({round(r["upper_bound"] * 100, 1) for r in rows})
    valid = [r for r in rows if r["valid"]]
    prompt_mean = sum(r["prompt_tokens_mean"] for r in valid) / len(valid) if valid else float("nan")
    per_seed = {}
    for r in rows:
        per_seed.setdefault(r["seed"], []).append(r["upper_bound"])
    bound = mean_ci([sum(v) / len(v) for v in per_seed.values()])   # one value per seed (runs differ by send order)
    lines = [f"## {workload.title}", "", workload.description + f" (Counts are seed {seeds[0]}'s; "
             f"{workload.seed_note}.)", "",
             f"Sent at token scale k = {k:g} (mean prompt {prompt_mean:.0f} tokens as sent); simulator flags: "
             f"`{flags}`. Seeds {', '.join(map(str, seeds))}; each strategy runs on the same requests per seed.", "",
             f"Upper bound (infinite cache, every request on the pod with its longest seen prefix, reply blocks "
             f"included): **{pm(bound, 'pct')}** of prompt tokens over the seeds (per run, in its send order: "
             f"{', '.join(f'{b:.1f}' for b in bounds)} %).", ""]
    if workload.stages:
        lines += [f"**Steady-state TTFT p90 (s) per rate stage** (mean ± 95 % CI over the valid seeds; requests "
                  f"scheduled in the first {WARMUP_FRACTION:.0%} of each stage are warm-up and excluded; \"not "
                  f"steady k/n\": in k of n runs the p90 moved between the middle and last thirds by more than "
                  f"{NOT_STEADY_FACTOR:g}x or {NOT_STEADY_GROWTH_S:g} s, so the queue was still growing or draining "
                  "and the figure depends on the stage length):", "",
                  *stage_table(aggregates, workload.stages), ""]
    lines += ["Over the whole run, mean ± 95 % CI over the valid seeds:", "", aggregate_table(aggregates), ""]
    lines += decisions_table(aggregates)
    if replicas > 1:
        lines += replicas_section(rows, aggregates, replicas, seeds[0])
    if any(r.get("pd") for r in rows):
        lines += pd_section(rows, aggregates, seeds[0])
    invalid = [r for r in rows if not r["valid"]]
    lines.append(f"Invalid runs (send lag p99 > {LAG_LIMIT_MS:g} ms; rerun, and left out of the aggregates): "
                 + ("; ".join(f"{r['strategy']} seed {r['seed']} attempt {r['attempt'] + 1} (lag p99 "
                              f"{r['lag_p99_ms']:.1f} ms)" for r in invalid) if invalid else "none") + ".")
    lines.append("")
    disagree = engine_disagreements(rows)
    if disagree:
        lines += ["**The engines' /metrics hit ratio differs from the usage figures in runs without preemptions**: "
                  + "; ".join(f"{r['strategy']} seed {r['seed']}" for r in disagree), ""]
    errors = [f"{r['strategy']} seed {r['seed']}: {r['error_kinds']}" for r in rows if r["errors"]]
    if errors:
        lines += ["Errors: " + "; ".join(errors), ""]
    crashed = [f"{r['strategy']} seed {r['seed']}: {'; '.join(r['crashed'])}" for r in rows if r.get("crashed")]
    if crashed:
        lines += ["**Processes that exited during the run**: " + " / ".join(crashed), ""]
    stray = [f"{r['strategy']} seed {r['seed']} {r['stray_last_chunks']}" for r in rows if r.get("stray_last_chunks")]
    if stray:
        lines += ["Responses followed by a stray second `0\\r\\n\\r\\n` (a gateway bug, see "
                  "docs/benchmarks.md; the client skips it): " + ", ".join(stray) + ".", ""]
    lines += ["<details><summary>Every run</summary>", "", *runs_table(rows), "", "</details>", "",
              f"Requests served per pod (seed {seeds[0]}): " + "; ".join(
                  f"{r['strategy']} {list(r['pod_requests'].values())}" for r in rows
                  if r["seed"] == seeds[0] and r["valid"]), "",
              f"![TTFT CDF]({cdf})", "", f"![requests in flight per pod]({load})", ""]
    return "\n".join(lines)


def header(args, strategies, info, elapsed, seeded_gateway):
    """The report's opening paragraphs: what ran, how to read it, and where it comes from."""
    from provenance import markdown

    names = ", ".join(s for s, _ in strategies)
    seed_note = ("each gets `random_seed: <seed>`" if seeded_gateway else
                 "this build does not know `random_seed`, so its random choices were not seeded")
    return [
        "# prefixgate routing quality report", "",
        *markdown(info),
        f"{args.pods} simulated engine pods (`prefixgate-engine-sim`) per run, started fresh (cold caches) for "
        f"every run; prefixgate with `threads: {args.gateway_threads}`, `log_level: warn` and its default "
        f"prefix-cache settings ({seed_note}). Strategies: {names} (`prefix-cache-standalone` = "
        "`routing.blend.load_balance_weight: 0`; `oracle` = no gateway, see below). Seeds "
        f"{', '.join(map(str, args.seeds))}: for each workload and seed, every strategy runs on the same seeded "
        "requests, in an order rotated by the seed. Wall time of the whole run: "
        f"{elapsed:.0f} s.", "",
        *([f"**Replicas**: {args.replicas} prefixgate replicas per run, requests spread round-robin over them "
           "(consecutive turns of a conversation on different replicas), "
           + ("sharing their prefix records and in-flight counts through one Redis started fresh per run "
              "(`state_sync.enabled: true`)." if args.sync else "without state sync (`--no-sync`): each replica "
              "learns its own prefix index.") + " The oracle has no gateway and is unchanged.", ""]
          if args.replicas > 1 else []),
        "**Time**: the pods run with each workload's `--time-scale S` (its simulator flags below: delays x S) and "
        "every latency and rate here is in **simulated seconds** (wall-clock / S); the send lag alone is in wall "
        "milliseconds. The client, the gateway and the pods shared the machine.", "",
        "**Figures** are the mean ± the half-width of the 95 % confidence interval (Student t, n - 1 degrees of "
        "freedom) over the valid seeds; a single seed shows its value alone.", "",
        f"**Send lag**: for every request the client records how late it was sent against its schedule (wall "
        f"ms; the oracle's cache queries count). A run whose lag p99 exceeds {LAG_LIMIT_MS:g} ms is INVALID: it "
        f"is rerun (up to {args.rerun_invalid} time(s)); one still invalid is listed and left out of the "
        "aggregates.", "",
        *([f"**Disaggregated prefill/decode**: `pd-NAME` strategies run NAME's routing on {args.pods} pods of which "
           f"the first {args.prefill_pods} are prefill pods and the rest decode pods (simulator `--role`, "
           f"`--kv-transfer-ms-per-1k-tokens {args.kv_transfer_ms_per_1k_tokens:g}`; pods file `role`); see each "
           "workload's \"Disaggregated prefill/decode\" table.", ""]
          if any(is_pd(s) for s, _ in strategies) else []),
        "**Columns**: req/s and output tok/s over the run (first send to last byte); TTFT = send to first "
        "content chunk; ITL = gaps between content chunks; TPOT = (end-to-end - TTFT) / (output tokens - 1) per "
        "request with 2 or more output tokens (p50/p90 over the requests), per full-size token; token hit ratio = "
        "the engines' "
        "`usage.prompt_tokens_details.cached_tokens` / `prompt_tokens`; % of oracle = hit ratio / the oracle's in "
        "the same seed; % of upper bound = hit ratio / the best possible with an infinite cache (every request "
        "on a pod holding its longest previously seen prefix, in 16-token engine blocks, the blocks of earlier "
        "replies included), in that run's send order; busiest pod = requests served by the busiest pod (mean "
        "per pod in brackets); preemptions = the engines' `vllm:num_preemptions_total` (requests preempted under "
        "KV pressure; the engines' own hit counters then differ from the usage figures, since a preempted "
        "request is looked up again).", "",
        "**Oracle**: no gateway; before each request the client asks every pod what its real prefix cache holds "
        "for the prompt (`POST /sim/cache/match`) and sends it to the pod with the best blend score: 5 x "
        "cached / prompt tokens + 4 x the min-max-normalised load (in flight at the pod x (1 + 2 x KV usage²)), "
        "pods above 90 % KV usage excluded unless all are, ties to fewer in flight then seeded random. It sees "
        "the engines' evictions, which a gateway's own index cannot: a reference for what the blend could reach "
        "with exact cache knowledge, not a strict maximum.", "",
        "**Token scale**: each workload's token counts are multiplied by its `token_scale` k (prompts, outputs, "
        "KV capacity) and the simulator is run with `--token-scale k`, which scales its prefill rate, decode "
        "costs and token budget to match, so every simulated duration and every capacity ratio equals the "
        "full-size workload's with k times fewer tokens and SSE events for the client. The descriptions give "
        "full-size token counts; output tok/s and ITL are per full-size token.", "",
    ]


def write_report(out_dir, header_lines, sections, summary):
    """Writes REPORT.md (header + sections) and summary.json into out_dir; returns the Markdown path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "REPORT.md"
    path.write_text("\n".join(header_lines) + "\n\n" + "\n".join(sections))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return path
