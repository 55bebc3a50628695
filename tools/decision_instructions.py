#!/usr/bin/python3
"""Instructions per routing decision, counted by callgrind: the figure that does not move with this machine's noise
(the decision's wall time moved 1.4-2x between days on the same build). Runs prefixgate_bench's BM_RouterChoose
benchmarks one at a time under `valgrind --tool=callgrind`, collecting only inside Router::choose (the fixture's
set-up is not counted), and divides the instructions by the calls to Router::decide the dump records. The
fixture's pre-fill of the warm index routes each of its 16 groups once through the same path, and those first
decisions cost more (every block is new): each benchmark is run twice, short and long, and the figure is the
difference of the two runs' instructions over the difference of their decisions, the steady state's cost per
decision whatever the iteration counts.

    /usr/bin/python3 tools/decision_instructions.py --bench build/bench/prefixgate_bench \\
        [--baseline <another build's prefixgate_bench>] [--filter REGEX] [--top N] [--out DIR]

Default filter: the warm 8 KiB character decisions at 8, 64 and 1,000 pods. With --baseline, each benchmark is
counted on both binaries (baseline first) and the ratio printed. --top N prints the N costliest functions
(inclusive, instructions per decision) of each run; --out keeps the callgrind dumps and those listings.
Needs valgrind (Debian: valgrind)."""
import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "loadtest" / "overhead"))
from callgrind_request import calls_to  # noqa: E402

DEFAULT_FILTER = r"^BM_RouterChoose/character/warm/8KiB/(8|64|1000)pods$"
COLLECT = "prefixgate::routing::Router::choose*"
DECISION = "prefixgate::routing::Router::decide("


def program_total(annotate_text):
    """The PROGRAM TOTALS line's count in callgrind_annotate's output (0 when absent)."""
    m = re.search(r"^\s*([\d,]+)(?: \(100\.0%\))?\s+PROGRAM TOTALS", annotate_text, re.M)
    return int(m.group(1).replace(",", "")) if m else 0


def top_functions(annotate_text, per, count):
    """The first `count` function lines of an inclusive listing, as (instructions per decision, name)."""
    rows = []
    for line in annotate_text.splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            rows.append((int(m.group(1).replace(",", "")) / per, m.group(2)))
    return rows[:count]


def benchmarks(binary, pattern):
    listed = subprocess.run([binary, "--benchmark_list_tests"], capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split() if re.search(pattern, name)]


def benchmark_regex(name):
    """`name` as a regex that matches only itself for Google Benchmark's filter: its metacharacters escaped, and
    not '-' (re.escape writes it as '\\-', which that filter's regex engine does not match as a '-')."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", name)


def run(binary, name, work, min_time):
    """(instructions, decisions, annotate text) of one benchmark run under callgrind."""
    dump = work / f"callgrind.out.{min_time:g}"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}", f"--toggle-collect={COLLECT}",
                    binary, f"--benchmark_filter=^{benchmark_regex(name)}$", f"--benchmark_min_time={min_time:g}"],
                   capture_output=True, check=True)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                          capture_output=True, text=True, check=True).stdout
    return program_total(text), calls_to(dump, DECISION), text


def marginal(short, long):
    """Instructions per decision between a short and a long run of the same benchmark: (instructions, decisions)
    of each; the fixed costs both share (the first, costlier decisions) cancel."""
    extra = long[1] - short[1]
    if extra <= 0:
        raise RuntimeError(f"the long run made no more decisions than the short one ({long[1]} <= {short[1]})")
    return (long[0] - short[0]) / extra


def count(binary, name, work):
    """(instructions per decision, decisions of the long run, the long run's annotate text)."""
    short = run(binary, name, work, 0.05)
    long = run(binary, name, work, 0.3)
    return marginal(short[:2], long[:2]), long[1], long[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default="build/bench/prefixgate_bench")
    ap.add_argument("--baseline", help="another build's prefixgate_bench, counted first")
    ap.add_argument("--filter", default=DEFAULT_FILTER, help="regex over the benchmark names")
    ap.add_argument("--top", type=int, default=0, help="costliest functions to list per run (inclusive)")
    ap.add_argument("--out", help="a folder to keep the dumps and listings in")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: valgrind)")
    builds = [("baseline", args.baseline)] if args.baseline else []
    builds.append(("this build", args.bench))
    names = benchmarks(args.bench, args.filter)
    if not names:
        sys.exit(f"no benchmark matches {args.filter!r}")
    with tempfile.TemporaryDirectory(prefix="decision-instructions-") as tmp:
        for name in names:
            per_build = []
            for label, binary in builds:
                work = Path(args.out or tmp) / f"{label.replace(' ', '-')}-{re.sub(r'[^A-Za-z0-9]+', '-', name)}"
                work.mkdir(parents=True, exist_ok=True)
                per, decisions, text = count(binary, name, work)
                per_build.append(per)
                print(f"{name} ({label}): {per:,.0f} instructions per decision (the long run's {decisions} "
                      f"decisions less the short run's)", flush=True)
                if args.out:
                    (work / "annotate.txt").write_text(text)
                for cost, function in top_functions(text, max(decisions, 1), args.top):  # the long run's, first included
                    print(f"  {cost:9,.0f} {function[:170]}")
            if len(per_build) == 2:
                print(f"{name}: this build / baseline = {per_build[1] / per_build[0]:.3f}", flush=True)


if __name__ == "__main__":
    main()
