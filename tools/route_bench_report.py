#!/usr/bin/python3
"""Provenance and Markdown table for the routing-decision microbenchmarks (scripts/bench_route.sh runs it).

  route_bench_report.py provenance-start --out P --build-dir D --binary B --command C --bench-command C2
      writes P: git commit, whether the tree was dirty (and which files), the build type and compiler from D's
      CMakeCache.txt, the binary's sha256, both command lines, nproc, CPU model, kernel, `uptime` now.
  route_bench_report.py provenance-finish --out P --json J
      adds `uptime` now and the load average Google Benchmark recorded when it started (J's context).
  route_bench_report.py render --json J --provenance P --out M
      writes M: median and min-max over the repetitions of CPU microseconds per iteration, per benchmark.

Standard library only (Debian's /usr/bin/python3).
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
PODS = ["8pods", "64pods", "1000pods"]


def run(*args):
    try:
        # rstrip only: `git status --porcelain` lines start with a meaningful space.
        return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.rstrip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cmake_cache(build_dir):
    values = {}
    path = Path(build_dir) / "CMakeCache.txt"
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            if ":" in line and "=" in line and not line.startswith(("//", "#")):
                key, _, value = line.partition("=")
                values[key.split(":", 1)[0]] = value
    return values


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def provenance_start(args):
    status = run("git", "status", "--porcelain", "--untracked-files=normal")
    cache = cmake_cache(args.build_dir)
    compiler = cache.get("CMAKE_CXX_COMPILER", "")
    record = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": run("git", "rev-parse", "HEAD"),
        "git_dirty": bool(status),
        "git_dirty_files": status.splitlines(),
        "git_diff_sha256": hashlib.sha256(run("git", "diff", "HEAD").encode()).hexdigest() if status else "",
        "build_dir": str(args.build_dir),
        "build_type": cache.get("CMAKE_BUILD_TYPE", "unknown (no CMakeCache.txt)"),
        "compiler": f"{compiler} ({run(compiler, '--version').splitlines()[0]})" if compiler else "unknown",
        "binary_sha256": sha256(args.binary),
        "command": args.command,
        "bench_command": args.bench_command,
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "uptime_before": run("uptime").strip(),
    }
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


def provenance_finish(args):
    record = json.loads(Path(args.out).read_text())
    record["uptime_after"] = run("uptime").strip()
    try:
        context = json.loads(Path(args.json).read_text()).get("context", {})
    except (OSError, ValueError):
        context = {}
    record["benchmark_context"] = {k: context.get(k) for k in (
        "date", "host_name", "num_cpus", "mhz_per_cpu", "cpu_scaling_enabled", "load_avg", "library_build_type")}
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")


def collect(bench_json):
    """{run_name: {"cpu": [us], "real": [us], "counters": {name: [values]}, "error": str}} over the repetitions."""
    runs = {}
    for b in bench_json.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        entry = runs.setdefault(b.get("run_name", b["name"]), {"cpu": [], "real": [], "counters": {}, "error": ""})
        if b.get("error_occurred"):
            entry["error"] = b.get("error_message", "error")
            continue
        scale = TO_US[b.get("time_unit", "ns")]
        entry["cpu"].append(b["cpu_time"] * scale)
        entry["real"].append(b["real_time"] * scale)
        for key in ("blocks", "tokens", "match_pct", "index_blocks"):
            if key in b:
                entry["counters"].setdefault(key, []).append(b[key])
    return runs


def us(value):
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def size_label(size):
    kib = int(size.removesuffix("KiB"))
    return f"{kib // 1024} MiB" if kib % 1024 == 0 else f"{kib} KiB"


def cell(entry, key="cpu"):
    if entry is None:
        return "not run"
    if entry["error"] and not entry[key]:
        return f"skipped: {entry['error']}"
    values = entry[key]
    return f"{us(statistics.median(values))} ({us(min(values))}-{us(max(values))})"


def counter(entries, key, fmt):
    values = sorted({fmt(statistics.median(e["counters"][key])) for e in entries if e and e["counters"].get(key)})
    return " / ".join(values) if values else "-"


def render(args):
    bench = json.loads(Path(args.json).read_text())
    prov = json.loads(Path(args.provenance).read_text())
    runs = collect(bench)
    reps = max((len(e["cpu"]) for e in runs.values()), default=0)
    lines = [
        "# Routing decision microbenchmarks",
        "",
        "Generated by `tools/route_bench_report.py` from [route-bench.json](route-bench.json) (Google Benchmark's",
        "raw output, every repetition) and [route-bench-provenance.json](route-bench-provenance.json); do not edit by",
        "hand. What each benchmark measures: `bench/route_bench.cpp` and `docs/benchmarks.md`.",
        "",
        "## Provenance",
        "",
        f"- Command: `{prov.get('command')}`",
        f"- Benchmark binary run as: `{prov.get('bench_command')}`",
        f"- Commit `{prov.get('git_commit')}`, working tree "
        + (f"**dirty** ({len(prov.get('git_dirty_files', []))} files changed or untracked, listed in the provenance "
           f"file; tracked diff sha256 `{prov.get('git_diff_sha256', '')[:16]}`)" if prov.get("git_dirty") else "clean"),
        f"- Build type {prov.get('build_type')} (`{prov.get('build_dir')}`), {prov.get('compiler')}; Google Benchmark "
        f"library built as {prov.get('benchmark_context', {}).get('library_build_type')}",
        f"- Machine: {prov.get('cpu_model')}, nproc {prov.get('nproc')}, Linux {prov.get('kernel')}",
        f"- Load before: `{prov.get('uptime_before')}`",
        f"- Load after: `{prov.get('uptime_after')}`",
        f"- Date: {prov.get('date_utc')}",
        "",
        f"## BM_RouterChoose: CPU microseconds per decision, median (min-max) of {reps} repetitions",
        "",
        "One iteration = `Router::choose` with the prefix-cache strategy (blend): tokenize, hash, match over every "
        "pod, load scores, blend, pick, record, metrics, in-flight guard released. 16 groups, each with its own "
        "system prompt of the given size; every request adds a new 1 KiB user message. Blocks of 128 bytes.",
        "",
        "| tokenizer | index | system prompt | 8 pods | 64 pods | 1,000 pods | blocks / request | match % of the chosen pod |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = {}
    for name, entry in runs.items():
        parts = name.split("/")
        if parts[0] == "BM_RouterChoose" and len(parts) == 5:
            rows.setdefault(tuple(parts[1:4]), {})[parts[4]] = entry
    order = {"character": 0, "tiktoken": 1, "cold": 0, "warm": 1}
    keyed = sorted(rows, key=lambda k: (order.get(k[0], 9), order.get(k[1], 9), int(k[2].removesuffix("KiB"))))
    for tokenizer, index, size in keyed:
        by_pods = rows[(tokenizer, index, size)]
        entries = [by_pods.get(p) for p in PODS]
        lines.append(f"| {tokenizer} | {index} | {size_label(size)} | "
                     + " | ".join(cell(e) for e in entries) + " | "
                     + counter(entries, "blocks", lambda v: f"{v:,.0f}") + " | "
                     + counter(entries, "match_pct", lambda v: f"{v:.0f}") + " |")
    lines += ["", "Wall-clock medians of the same runs (microseconds; the difference from CPU time is time the "
              "benchmark thread waited for a core):", "",
              "| tokenizer | index | system prompt | 8 pods | 64 pods | 1,000 pods |", "| --- | --- | --- | --- | --- | --- |"]
    for tokenizer, index, size in keyed:
        by_pods = rows[(tokenizer, index, size)]
        lines.append(f"| {tokenizer} | {index} | {size_label(size)} | "
                     + " | ".join(us(statistics.median(by_pods[p]["real"])) if by_pods.get(p) and by_pods[p]["real"]
                                  else "-" for p in PODS) + " |")
    parse = [(n, e) for n, e in runs.items() if n.startswith("BM_ParseChatRequest/")]
    if parse:
        lines += ["", "## BM_ParseChatRequest: the request body parse alone (not part of the figures above)", "",
                  "| system prompt | CPU us, median (min-max) |", "| --- | --- |"]
        for name, entry in sorted(parse, key=lambda ne: int(ne[0].split("/")[1].removesuffix("KiB"))):
            lines.append(f"| {size_label(name.split('/')[1])} | {cell(entry)} |")
    Path(args.out).write_text("\n".join(lines) + "\n")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    start = sub.add_parser("provenance-start")
    start.add_argument("--out", required=True)
    start.add_argument("--build-dir", required=True)
    start.add_argument("--binary", required=True)
    start.add_argument("--command", required=True)
    start.add_argument("--bench-command", required=True)
    finish = sub.add_parser("provenance-finish")
    finish.add_argument("--out", required=True)
    finish.add_argument("--json", required=True)
    rend = sub.add_parser("render")
    rend.add_argument("--json", required=True)
    rend.add_argument("--provenance", required=True)
    rend.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    {"provenance-start": provenance_start, "provenance-finish": provenance_finish, "render": render}[args.what](args)


if __name__ == "__main__":
    main(sys.argv[1:])
