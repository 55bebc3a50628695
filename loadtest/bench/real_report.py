#!/usr/bin/python3
"""The real-engine report (real.py): REPORT.md from a run's summary.json, the section's tables for
docs/benchmarks.md, and the per-seed comparison of the simulated fleets against the real one. Pure rendering over
the summary, so a report can be rendered again from the committed summary.json:

  loadtest/bench/real_report.py docs/benchmarks/real-engine                 # rewrites REPORT.md from summary.json
  loadtest/bench/real_report.py docs/benchmarks/real-engine --docs docs/benchmarks.md
                      # replaces the tables between <!-- real-engine:begin --> and <!-- real-engine:end -->
"""
import argparse
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bench.aggregate import mean_ci  # noqa: E402
from bench.docs_block import replace_block  # noqa: E402
from bench.report import pm  # noqa: E402

LLAMA = "llama"
TARGET_ERROR_PCT = 20.0
DOCS_BEGIN, DOCS_END = "<!-- real-engine:begin -->", "<!-- real-engine:end -->"
# Row fields aggregated over seeds beyond aggregate.FIELDS.
EXTRA_FIELDS = ["upper_bound_prompts_only", "tokenizer_p50_s", "tokenizer_p90_s", "retries", "stale_sent",
                "stale_detected", "scrape_errors", "deferred_mean", "deferred_max", "deferred_share", "processing_mean",
                "slowdown", "contention_prefill", "contention_decode", "requests_first", "requests_hit",
                "requests_busy_slot", "requests_evicted", "requests_moved", "over_predicted_tokens",
                "under_predicted_tokens"]


def dumps(value):
    """JSON with NaN written as null (summary.json is read by other tools)."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x
    return json.dumps(clean(value), indent=1, default=str) + "\n"


def _stat(agg, key):
    value = agg.get(key) if agg else None
    return [float("nan") if v is None else v for v in value] if value else [float("nan"), float("nan"), 0]


def error_pct(sim, real):
    """(sim - real) / real in %, None when either is missing or real is 0."""
    if sim is None or real is None or not real or (isinstance(sim, float) and math.isnan(sim)):
        return None
    return (sim - real) / real * 100.0


def last_valid(rows):
    """{(fleet, strategy, seed): the valid row} (the last valid attempt of each run)."""
    out = {}
    for r in sorted(rows, key=lambda r: r["attempt"]):
        if r["valid"]:
            out[(r["fleet"], r["strategy"], r["seed"])] = r
    return out


def paired_errors(rows, key, fleet, strategy, reference=LLAMA):
    """[mean, half-width, n] over the seeds where both fleets have a valid run of `strategy` of the error % of
    `fleet`'s `key` against `reference`'s in the same seed (the same requests)."""
    by = last_valid(rows)
    seeds = sorted({seed for (f, s, seed) in by if f == fleet and s == strategy})
    errors = [error_pct(by[(fleet, strategy, seed)].get(key), by[(reference, strategy, seed)].get(key))
              for seed in seeds if (reference, strategy, seed) in by]
    return list(mean_ci([e for e in errors if e is not None]))


def within_target(stat, target=TARGET_ERROR_PCT):
    """Whether a paired error's mean is within +-target %."""
    mean, _, n = stat
    return bool(n) and abs(mean) <= target


def _err(stat):
    mean, half, n = stat
    if not n or not math.isfinite(mean):
        return "-"
    text = f"{mean:+.0f}" + (f" ± {half:.0f}" if math.isfinite(half) else "") + " %"
    return text if within_target(stat) else f"**{text}**"


# --- tables -----------------------------------------------------------------------------------------------------
REAL_COLUMNS = [("ttft_p50", "TTFT p50 s", "sec"), ("ttft_p90", "TTFT p90 s", "sec"),
                ("hit_ratio", "cached share", "pct"), ("of_bound", "of bound", "pct"),
                ("engine_hit_ratio", "engines' own hit ratio", "pct"),
                ("requests_hit", "hits", "num1"), ("requests_busy_slot", "misses: busy slot", "num1"),
                ("requests_evicted", "evicted", "num1"), ("requests_moved", "moved", "num1"),
                ("prediction_accuracy", "prediction accuracy", "pct"),
                ("tokenizer_p90_s", "remote tokenizer p90 ms", "ms"), ("retries", "retries", "num1"),
                ("stale_sent", "stale sent", "num1"), ("stale_detected", "stale detected", "num0"),
                ("scrape_errors", "scrape errors", "num1"), ("deferred_mean", "deferred (mean)", "num2"),
                ("deferred_max", "deferred (max)", "num1"), ("lag_p99_ms", "send lag p99 ms", "num1")]


def fleet_table(aggregates, columns=REAL_COLUMNS):
    head = "| strategy | valid seeds | " + " | ".join(t for _, t, _ in columns) + " | errors |"
    lines = [head, "| --- " * (len(columns) + 3) + "|"]
    for name, agg in aggregates.items():
        errors = _stat(agg, "errors")
        total = round(errors[0] * errors[2]) if errors[2] else 0
        seeds = str(len(agg["seeds"])) + (f" ({agg['invalid']} invalid)" if agg["invalid"] else "")
        lines.append(f"| {name} | {seeds} | " + " | ".join(pm(_stat(agg, k), f) for k, _, f in columns)
                     + f" | {total} |")
    return lines


def calibration_table(workload):
    """Real against simulated TTFT p50/p90 per strategy: means over the valid seeds and the paired error %."""
    sims = [f for f in workload["fleets"] if f != LLAMA]
    aggs, rows = workload["aggregates"], workload["runs"]
    if LLAMA not in aggs or not sims:
        return []
    head = ["strategy", "real p50 s"] + [f"{f} p50 (error)" for f in sims] + ["real p90 s"] + \
           [f"{f} p90 (error)" for f in sims] + ["real cached"] + [f"{f} cached" for f in sims]
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for strategy, real in aggs[LLAMA].items():
        cells = [strategy]
        for key in ("ttft_p50", "ttft_p90"):
            cells.append(pm(_stat(real, key), "sec"))
            for f in sims:
                cells.append(f"{pm(_stat(aggs[f].get(strategy), key), 'sec')} "
                             f"({_err(paired_errors(rows, key, f, strategy))})")
        cells.append(pm(_stat(real, "hit_ratio"), "pct"))
        cells += [pm(_stat(aggs[f].get(strategy), "hit_ratio"), "pct") for f in sims]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def calibration_summary(workloads):
    """Over every workload and strategy: how many paired TTFT errors (p50 and p90) are within the target, per
    simulated fleet: {fleet: (within, total, largest |error|)}."""
    out = {}
    for w in workloads.values():
        for fleet in w["fleets"]:
            if fleet == LLAMA or LLAMA not in w["aggregates"]:
                continue
            for strategy in w["aggregates"][LLAMA]:
                for key in ("ttft_p50", "ttft_p90"):
                    stat = paired_errors(w["runs"], key, fleet, strategy)
                    if not stat[2]:
                        continue
                    within, total, worst = out.get(fleet, (0, 0, 0.0))
                    out[fleet] = (within + within_target(stat), total + 1, max(worst, abs(stat[0])))
    return out


def runs_table(rows):
    lines = ["| seed | fleet | strategy | order | attempt | valid | TTFT p50 / p90 s | cached | bound (prompts only) | "
             "engines' hit | prediction | retries | stale sent / detected | scrape errors | deferred mean / max | "
             "contention prefill / decode (CPU slowdown) | lag p99 ms | wall s |", "| --- " * 18 + "|"]
    for r in sorted(rows, key=lambda r: (r["seed"], r["fleet"], r["position"], r["attempt"])):
        def f(x, fmt):
            return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

        def pct(x):
            return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.1f} %"
        pred = "-" if r.get("prediction_accuracy") is None else f"{r['prediction_accuracy'] * 100:.1f} %"
        lines.append(
            f"| {r['seed']} | {r['fleet']} | {r['strategy']} | {r['position'] + 1} | {r['attempt'] + 1} | "
            f"{'yes' if r['valid'] else '**INVALID**'} | {f(r['ttft_p50'], '.3f')} / {f(r['ttft_p90'], '.3f')} | "
            f"{pct(r.get('hit_ratio'))} | {pct(r.get('upper_bound'))} ({pct(r.get('upper_bound_prompts_only'))}) | "
            f"{pct(r.get('engine_hit_ratio'))} | {pred} | {r.get('retries', '-')} | "
            f"{r.get('stale_sent', '-')} / {r.get('stale_detected', '-')} | {r.get('scrape_errors', '-')} | "
            f"{f(r.get('deferred_mean'), '.2f')} / {f(r.get('deferred_max'), '.0f')} | "
            f"{f(r.get('contention_prefill'), '.2f')} / {f(r.get('contention_decode'), '.2f')} "
            f"({f(r.get('slowdown'), '.2f')}) | "
            f"{f(r.get('lag_p99_ms'), '.1f')} | {f(r.get('wall_s'), '.1f')} |")
    return lines


def calibration_lines(summary):
    cal = summary.get("calibration") or {}
    p, d = cal.get("prefill") or {}, cal.get("decode") or {}
    if not p:
        return []
    lines = [
        "| measured on one llama-server alone (`-t 1 --parallel 2`) | value | simulator flag (isolated) |",
        "| --- | --- | --- |",
        f"| prefill, per uncached token | {1000.0 / p['tokens_per_s']:.4f} ms ({p['tokens_per_s']:.0f} tokens/s) | "
        f"`--prefill-tokens-per-s` = this / r |",
        f"| prefill, attention per 1e6 (new, context) token pairs | {p['attention_ms_per_m_pairs']:.1f} ms | "
        f"`--prefill-attention-ms-per-m-pairs` = this x r² |",
        f"| prefill, fixed per prompt | {p['overhead_ms']:.2f} ms (fit rms {p['rms_ms']:.1f} ms over {p['n']} answers) "
        f"| in `--step-overhead-ms` |",
        f"| client overhead: TTFT - prompt_ms (HTTP, template, tokenizing, first sample) | "
        f"{cal.get('client_overhead_fixed_ms') or cal['client_overhead_ms']:.2f} ms + "
        f"{cal.get('client_overhead_per_1k_tokens_ms', 0):.2f} ms per 1,000 prompt tokens (median "
        f"{cal['client_overhead_ms']:.2f} ms) | in `--step-overhead-ms`, at the workload's mean prompt |",
        f"| decode, per step | {d['floor_ms']:.3f} ms | `--decode-ms-per-token` |",
        f"| decode, per sequence in the step | {d['per_seq_ms']:.3f} ms | `--decode-ms-per-running-seq` |",
        f"| decode, per 1,000 tokens of context | {d['attention_ms_per_1k']:.3f} ms | "
        f"`--attention-ms-per-1k-context` = this x r |",
        f"| tokens: llama's per simulator token on this text (r) | {cal['llama_per_sim_token']:.3f} "
        f"({cal.get('bytes_per_llama_token') or float('nan'):.2f} bytes per llama token; the simulator's 4) | "
        "prefill rate, attention, KV capacity and token budget scaled by it |"]
    if p.get("context_attention_ms_per_m_pairs") is not None:
        lines.append(f"| prefill after a cached prefix, per 1e6 (new, cached) token pairs (median of "
                     f"{p.get('warm_n', '?')} warm answers, rms {p.get('warm_rms_ms') or 0:.1f} ms) | "
                     f"{p['context_attention_ms_per_m_pairs']:.1f} ms | `--context-attention-ms-per-m-pairs` = this x "
                     "r² (where a workload has none of its own) |")
    for name, w in (cal.get("warm") or {}).items():
        if w.get("context_attention_ms_per_m_pairs") is None:
            continue
        sim = w.get("sim_context_attention_ms_per_m_pairs")
        rows = w.get("sim_context_min_rows")
        when = (f", in {w['slices']} slices between its real runs, against the calibration as the lone pod found "
                "the machine then" if w.get("slices") else "")
        lines.append(f"| {name}: its own requests one at a time on one pod with its flags{when}, per 1e6 (new, "
                     f"cached) pairs (median of {w['n']} warm answers) | {w['context_attention_ms_per_m_pairs']:.1f} "
                     "ms | "
                     + (f"`--context-min-rows` {rows}: the same requests on one simulated pod without it, the "
                        f"width at which a thin prompt attends to its cached prefix, in simulator tokens "
                        f"({w.get('sim_n', 0)} warm on both, rms {w.get('sim_rms_ms') or 0:.1f} ms) |"
                        if rows is not None else
                        f"`--context-attention-ms-per-m-pairs` {sim:.1f}: the same requests on one simulated pod "
                        f"without it, per 1e6 simulator-token pairs ({w.get('sim_n', 0)} warm on both) |"
                        if sim is not None else "`--context-attention-ms-per-m-pairs` = this x r² |"))
    probe = cal.get("contention_probe") or {}
    if probe.get("prefill"):
        shown = ", ".join(f"{k}: x{x:.2f}" for k, x in enumerate(probe["prefill"], start=1))
        decode = ", ".join(f"x{x:.2f}" for x in probe.get("decode") or [])
        lines.append(f"| contention: a prefill's time with 1 to {len(probe['prefill'])} pods of the fleet prefilling "
                     f"at once, over its time alone (a decode step's: {decode}) | {shown} | "
                     "`--shared-cpu-slowdown` (sim-shared-cpu; its pods share one `--shared-cpu` file) |")
    for name, r in (cal.get("in_run") or {}).items():
        shown = ", ".join(f"{k}: x{x:.2f}" for k, x in enumerate(r["prefill"], start=1))
        lines.append(f"| {name}: the same probe, a round after each of its {r['rounds']} real runs; a lone pod "
                     f"against the calibration: prefill x{r['drift']['prefill']:.2f}, decode "
                     f"x{r['drift']['decode']:.2f} | {shown} | for this workload, sim-shared-cpu and sim-burn-cpu take the "
                     "calibration slowed by the lone pod's factors, and sim-shared-cpu `--shared-cpu-slowdown` this |")
    return lines


def fleet_lines(fleet, spec):
    """How a fleet's pods ran: its flags (per strategy for the simulated fleets: the in-situ factors differ)."""
    flags, factors = spec["flags"], spec.get("factors") or {}
    if isinstance(flags, list):
        return [f"- {fleet}: `{' '.join(flags)}`"]
    first = next(iter(flags.values()), [])
    if not factors:
        return [f"- {fleet}: `{' '.join(first)}`"]
    if "prefill" in factors:   # one set for the workload
        factors = {s: factors for s in flags}
    shown = "; ".join(f"{s} prefill x{f['prefill']:.2f}, decode x{f['decode']:.2f}" for s, f in factors.items())
    return [f"- {fleet}: the isolated constants slowed by the contention the real runs of the same strategy met "
            f"(their requests alone on their pod): {shown}; e.g. {next(iter(flags))}: `{' '.join(first)}`"]


def workload_section(name, w, seeds, level="##"):
    fleets = w["fleets"]
    lines = [f"{level} {w['title']} (`{name}`)", "", w["description"], ""]
    for fleet, spec in fleets.items():
        lines += fleet_lines(fleet, spec)
    lines.append("")
    for fleet, aggs in w["aggregates"].items():
        bound = mean_ci([r["upper_bound"] for r in w["runs"] if r["fleet"] == fleet and r["valid"]])
        only = mean_ci([r.get("upper_bound_prompts_only") for r in w["runs"] if r["fleet"] == fleet and r["valid"]])
        what = "real llama-servers" if fleet == LLAMA else f"simulated pods ({fleet})"
        lines += [f"**{fleet}** ({what}; bound {pm(bound, 'pct')} of prompt tokens, {pm(only, 'pct')} counting "
                  f"no reply tokens; mean ± 95 % CI over the valid seeds):", "", *fleet_table(aggs), ""]
    table = calibration_table(w)
    if table:
        lines += ["**Simulator against the real engines** (means over the valid seeds; the error is (simulated - "
                  "real) / real per seed on the same requests, mean ± 95 % CI; bold: outside ±"
                  f"{TARGET_ERROR_PCT:g} %):", "", *table, ""]
    if w.get("plot"):
        lines += [f"![TTFT CDF]({w['plot']})", ""]
    lines += ["<details><summary>Every run</summary>", "", *runs_table(w["runs"]), "", "</details>", ""]
    return lines


def setup_lines(summary):
    pods = summary["pods"]
    return [
        f"{pods} engine pods per fleet, fresh for every run (cold caches), behind a fresh prefixgate (`threads: 1`, "
        "`log_level: warn`, `random_seed: <seed>`, pods listed as `engine: llamacpp`). Fleets: `llama` = "
        "llama.cpp's llama-server (`tools/llama/bin/llama-server`, one thread each, the random-weight model of "
        "`tools/llama/make_model.py`); `sim-*` = `prefixgate-engine-sim --engine-dialect llamacpp` at time scale 1 "
        "with the calibrated constants below. Seeds " + ", ".join(map(str, summary["seeds"])) + ": every strategy "
        "and fleet runs the same seeded requests, strategies in an order rotated by the seed. All times are wall "
        "seconds.", "",
        f"**Machine caveat**: {pods} one-thread llama-servers, the gateway, the client and the pods' scrapes share "
        f"{summary['provenance']['host']['cores']} cores, so pods busy at once slow each other (in every run's row, "
        "`contention prefill / decode`: the prompt and decode time of the requests alone on their pod against the "
        "same work on the calibration pod alone on the machine; `CPU slowdown`: the pods' busy wall time over the "
        "CPU time they got in it). The load is closed loop with as many users as the workload says (4 = one "
        "request per pod on average); the `deferred` columns (llama.cpp's requests_deferred, sampled every 0.5 s) "
        "show requests waiting for a free slot.", "",
        "**Why requests missed** (`hits`, `misses: busy slot`, `evicted`, `moved`; per group in send order, after "
        "its first request): a hit has half its bound cached or more; a busy-slot miss found a request of its group "
        "in flight on the same pod (llama.cpp keeps one cache per slot: the other slot computes the prefix again; the "
        "simulator's paged cache is shared by its sequences); an evicted one went to a pod that had served its group "
        "but no longer held it; a moved one to a pod that had never served it.", "",
        "**Cached share** = sum of `usage.prompt_tokens_details.cached_tokens` / sum of `usage.prompt_tokens` over "
        "the answered requests (what the engines report; the engines' own `llamacpp:prompt_tokens_cached_total` "
        "against `prompt_tokens_total` is beside it). **Bound**: each request's prompt as it was sent is tokenized "
        "after the run by a pod of the same fleet (`/apply-template`, then `/tokenize` with `add_special` and "
        "`parse_special`, which equals `usage.prompt_tokens`: checked on every request); in send order, a request "
        "could hit at most the longest token prefix it shares with anything sent before (earlier prompts, and each "
        "earlier turn's reply as the next turn carries it, but its last token), capped at prompt - 1 (llama.cpp "
        "always evaluates the last prompt token again), token by token for llama.cpp (whole prompts per slot, no "
        "blocks) and for the simulator's slots model, which caches the same way (its paged model: in full blocks of "
        "`--block-size`). It is an infinite cache's bound: with 2 slots "
        "and no host prompt cache (the KV-pressure variants) the engines cannot reach it. \"counting no reply "
        "tokens\" is the same bound without the replies: a generated reply re-tokenized from its text need not give "
        "the ids llama.cpp generated, and then only the prompts can hit. No oracle: it asks the pods' "
        "`/sim/cache/match`, which llama-server lacks.", ""]


def render_report(summary):
    from provenance import markdown

    lines = ["# prefixgate routing quality on real engines (llama.cpp)", "", *markdown(summary["provenance"]),
             *setup_lines(summary)]
    cal = calibration_lines(summary)
    if cal:
        lines += ["## Calibration", "", *cal, ""]
        for fleet, (within, total, worst) in calibration_summary(summary["workloads"]).items():
            lines.append(f"- {fleet}: {within} of {total} TTFT p50/p90 figures within ±{TARGET_ERROR_PCT:g} % of "
                         f"the real engines' (largest error {worst:.0f} %).")
        lines.append("")
    for name, w in summary["workloads"].items():
        lines += workload_section(name, w, summary["seeds"])
    return "\n".join(lines) + "\n"


def docs_tables(summary):
    """The generated part of docs/benchmarks.md's section: provenance, calibration, per workload the real fleet's
    table and the simulator's comparison."""
    from provenance import markdown

    prov = summary["provenance"]
    lines = [*markdown(prov), f"Wall time {prov.get('wall_s', 0):.0f} s.", ""]
    cal = calibration_lines(summary)
    if cal:
        lines += ["**Calibration** (phase 1):", "", *cal, ""]
        for fleet, (within, total, worst) in calibration_summary(summary["workloads"]).items():
            lines.append(f"- {fleet}: {within} of {total} TTFT p50/p90 figures within ±{TARGET_ERROR_PCT:g} % of "
                         f"the real engines' (largest error {worst:.0f} %).")
        lines.append("")
    for name, w in summary["workloads"].items():
        aggs = w["aggregates"]
        lines += [f"#### {w['title']} (`{name}`)", "", w["description"], ""]
        if LLAMA in aggs:
            bound = mean_ci([r["upper_bound"] for r in w["runs"] if r["fleet"] == LLAMA and r["valid"]])
            lines += [f"Real llama-servers (bound {pm(bound, 'pct')}):", "", *fleet_table(aggs[LLAMA]), ""]
        table = calibration_table(w)
        if table:
            lines += ["Simulator against them (paired error per seed; bold: outside ±"
                      f"{TARGET_ERROR_PCT:g} %):", "", *table, ""]
    return lines


def replace_docs(text, generated):
    """`text` with the lines between DOCS_BEGIN and DOCS_END replaced by `generated` (the markers kept)."""
    return replace_block(text, DOCS_BEGIN, DOCS_END, generated)


def plot_ttft(path, name, kept, seed, strategies, fleets):
    """One panel per strategy: the TTFT CDF of each fleet's run of `seed`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(strategies)) or 1
    rows = -(-len(strategies) // cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False, sharex=True)
    styles = {0: "-", 1: "--", 2: ":"}
    for i, strategy in enumerate(strategies):
        ax = axes[i // cols][i % cols]
        for j, fleet in enumerate(fleets):
            values = sorted(r.ttft_s for r in kept.get((fleet, strategy, seed), []) if r.ok and r.ttft_s >= 0)
            if values:
                ax.step(values, [(k + 1) / len(values) for k in range(len(values))], where="post",
                        linestyle=styles.get(j, "-"), label=fleet)
        ax.set_xscale("log")
        ax.set_title(strategy, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7, loc="lower right")
    for i in range(len(strategies), rows * cols):
        axes[i // cols][i % cols].axis("off")
    fig.supxlabel("TTFT (wall seconds, log scale)", fontsize=9)
    fig.supylabel("fraction of requests", fontsize=9)
    fig.suptitle(f"{name}: TTFT CDF, real and simulated fleets (seed {seed})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="a real.py output folder (its summary.json)")
    ap.add_argument("--docs", default=None, metavar="FILE",
                    help=f"replace the block between {DOCS_BEGIN} and {DOCS_END} in FILE with the tables")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "REPORT.md").write_text(render_report(summary))
    if args.docs:
        path = Path(args.docs)
        path.write_text(replace_docs(path.read_text(), docs_tables(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
