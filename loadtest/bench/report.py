"""The quality report: a Markdown file with one table per workload, PNG plots (matplotlib, Agg backend) and a
summary.json with every figure, all written into one folder."""
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench.stats import pod_inflight_series, stage_ttft  # noqa: E402

COLUMNS = [
    ("strategy", "strategy", "{}"),
    ("throughput_rps", "req/s", "{:.2f}"),
    ("output_tps", "output tok/s", "{:.0f}"),
    ("ttft_p50", "TTFT p50 s", "{:.3f}"),
    ("ttft_p90", "TTFT p90 s", "{:.3f}"),
    ("ttft_p99", "TTFT p99 s", "{:.3f}"),
    ("itl_p50", "ITL p50 ms", "ms"),
    ("itl_p99", "ITL p99 ms", "ms"),
    ("hit_ratio", "token hit ratio", "pct"),
    ("of_bound", "% of upper bound", "pct"),
    ("pod_load", "pod load max/mean", "load"),
    ("errors", "errors", "{}"),
]


def _cell(row, key, fmt):
    if fmt == "load":
        return f"{row['pod_load_max']}/{row['pod_load_mean']:.1f}"
    value = row[key]
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if fmt == "pct":
        return f"{value * 100:.1f} %"
    if fmt == "ms":
        return f"{value * 1000:.1f}"
    return fmt.format(value)


def workload_table(rows):
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "| " + " | ".join("---" for _ in COLUMNS) + " |"
    body = ["| " + " | ".join(_cell(row, key, fmt) for key, _, fmt in COLUMNS) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def plot_ttft_cdf(path, workload, runs):
    """One line per strategy: the fraction of requests with TTFT <= x (log x axis)."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, records in runs:
        values = sorted(r.ttft_s for r in records if r.ok and r.ttft_s >= 0)
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (simulated seconds, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"{workload.name}: TTFT CDF per strategy")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_pod_load(path, workload, runs):
    """One panel per strategy: requests in flight per pod over time, as the client saw them."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.9 * len(runs) + 0.6), sharex=True, squeeze=False)
    for ax, (name, records) in zip(axes[:, 0], runs):
        times, series = pod_inflight_series([r for r in records if r.ok])
        for pod, values in series.items():
            ax.plot(times, values, linewidth=0.8, label=pod.rsplit("-", 1)[-1])
        boundary = 0.0
        for _, seconds in workload.stages[:-1]:
            boundary += seconds
            ax.axvline(boundary, color="grey", linewidth=0.6, linestyle=":")
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_ylabel("in flight", fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("simulated seconds since the start" + (" (dotted: rate steps)" if workload.stages else ""))
    axes[0, 0].legend(title="pod", fontsize=6, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{workload.name}: requests in flight per pod", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def workload_section(workload, rows, runs, out_dir):
    """Markdown for one workload; writes its two PNGs into out_dir."""
    cdf, load = f"{workload.name}-ttft-cdf.png", f"{workload.name}-pod-load.png"
    plot_ttft_cdf(Path(out_dir) / cdf, workload, runs)
    plot_pod_load(Path(out_dir) / load, workload, runs)
    bound = max(row["upper_bound"] for row in rows)
    k = workload.params.get("token_scale", 1.0)
    flags = " ".join(["--kv-capacity-tokens", str(workload.kv_capacity_tokens), *workload.sim_args])
    prompt_mean = sum(row["prompt_tokens_mean"] for row in rows) / len(rows)
    lines = [f"## {workload.title}", "", workload.description, "",
             f"Sent at token scale k = {k:g} (mean prompt {prompt_mean:.0f} tokens as sent); simulator flags: "
             f"`{flags}`.", "",
             f"Upper bound (infinite cache, every request on the pod with its longest seen prefix): "
             f"**{bound * 100:.1f} %** of prompt tokens; per run it is computed in that run's send order "
             f"({', '.join(format(row['upper_bound'] * 100, '.1f') for row in rows)} %).", "",
             workload_table(rows), ""]
    if workload.stages:
        lines += ["TTFT p90 (s) per rate step:", "",
                  "| strategy | " + " | ".join(f"{rate:g} req/s" for rate, _ in workload.stages) + " |",
                  "| --- | " + " | ".join("---" for _ in workload.stages) + " |"]
        for name, records in runs:
            lines.append(f"| {name} | " + " | ".join("-" if math.isnan(v) else f"{v:.3f}"
                                                     for _, v in stage_ttft(records, workload.stages)) + " |")
        lines.append("")
    errors = [f"{row['strategy']}: {row['error_kinds']}" for row in rows if row["errors"]]
    if errors:
        lines += ["Errors: " + "; ".join(errors), ""]
    crashed = [f"{row['strategy']}: {'; '.join(row['crashed'])}" for row in rows if row.get("crashed")]
    if crashed:
        lines += ["**Processes that exited during the run**: " + " / ".join(crashed), ""]
    stray = [f"{row['strategy']} {row['stray_last_chunks']}" for row in rows if row.get("stray_last_chunks")]
    if stray:
        lines += ["Responses followed by a stray second `0\\r\\n\\r\\n` (a gateway bug, see "
                  "docs/benchmarks.md; the client skips it): " + ", ".join(stray) + ".", ""]
    lines += ["Requests served per pod: " + "; ".join(
        f"{row['strategy']} {list(row['pod_requests'].values())}" for row in rows), "",
        f"![TTFT CDF]({cdf})", "", f"![requests in flight per pod]({load})", ""]
    return "\n".join(lines)


def write_report(out_dir, header_lines, sections, summary):
    """Writes REPORT.md (header + sections) and summary.json into out_dir; returns the Markdown path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "REPORT.md"
    path.write_text("\n".join(header_lines) + "\n\n" + "\n".join(sections))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return path
