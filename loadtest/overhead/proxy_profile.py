"""Where a proxy's time goes, for the overhead report (`overhead.py --profile`):
- perf: a sampled CPU profile (`perf record -g`) of prefixgate with prefix-cache, then of nginx, under wrk: by
  binary, by symbol, and the proxy's own symbols;
- /proc: each proxy's CPU time per request split into user and kernel time, under the same wrk load;
- strace: system calls per request (`strace -c -f`) of nginx, HAProxy and prefixgate under the same wrk load.
Both are optional tools (Debian: linux-perf, strace); what is missing is reported, not fatal."""
import shutil
import subprocess
import threading
import time
from pathlib import Path

from servers import child_pids, cpu_split

STRACE_TARGETS = ["nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]


def _perf_report(perf, data, *options):
    out = subprocess.run([perf, "report", "-i", str(data), "--stdio", "--no-children", "-g", "none", *options],
                         capture_output=True, text=True)
    return "\n".join(line.rstrip()[:160] for line in out.stdout.splitlines()
                     if line.strip() and not line.startswith("#"))


def perf_profile(fleet, wrk, body_file, out_dir, seconds=5, connections=32):
    """Text of the perf reports for the prefix-cache gateway under wrk, then nginx's for comparison (or why there
    is none)."""
    perf = shutil.which("perf")
    if perf is None:
        return "perf is not installed (Debian: linux-perf): no CPU profile."
    texts = []
    for target, own in (("prefixgate-prefix-cache", "prefixgate"), ("nginx", "nginx")):
        data = Path(out_dir) / "perf.data"
        pids = [fleet.pids[target], *child_pids(fleet.pids[target])]
        load = threading.Thread(target=wrk.run, args=(fleet.url(target, "static"), body_file, connections, seconds + 2))
        load.start()
        time.sleep(1)
        rec = subprocess.run([perf, "record", "-F", "999", "-g", "-p", ",".join(map(str, pids)), "-o", str(data), "--",
                              "sleep", str(seconds)], capture_output=True, text=True)
        load.join()
        if rec.returncode != 0:
            return f"perf record failed: {rec.stderr.strip()[-300:]}"
        texts.append(f"perf record -F 999 -g -p <{target}> for {seconds} s under wrk -c{connections}\n\n"
                     "--- by binary (perf report --no-children --sort dso)\n"
                     + _perf_report(perf, data, "--sort", "dso", "--percent-limit", "0.5")
                     + "\n\n--- by symbol, top (--sort sym --percent-limit 0.7)\n"
                     + _perf_report(perf, data, "--sort", "sym", "--percent-limit", "0.7")
                     + f"\n\n--- {own}'s own code (--dsos {own} --sort sym --percent-limit 0.3)\n"
                     + _perf_report(perf, data, "--dsos", own, "--sort", "sym", "--percent-limit", "0.3"))
        data.unlink(missing_ok=True)
        Path(str(data) + ".old").unlink(missing_ok=True)
    return "\n\n".join(texts)


def cpu_split_per_request(fleet, wrk, body_file, seconds=4, connections=32):
    """{target: (user us, kernel us) per request} of each proxy under wrk, from /proc: where a proxy's CPU time
    goes between its own code and the kernel's network work done on its behalf."""
    out = {}
    for target in STRACE_TARGETS:
        pid = fleet.pids[target]
        before = cpu_split(pid)
        result = wrk.run(fleet.url(target, "static"), body_file, connections, seconds)
        after = cpu_split(pid)
        requests = max(1, result["requests"])
        out[target] = tuple((a - b) * 1e6 / requests for a, b in zip(after, before))
    return out


def cpu_split_table(split):
    """Markdown: user and kernel CPU microseconds per request of each proxy."""
    lines = ["| CPU us per request | " + " | ".join(split) + " |", "| --- | " + " | ".join("---" for _ in split) + " |"]
    for i, name in enumerate(("user (the proxy's code, libc)", "kernel (system calls, TCP on its sockets)")):
        lines.append(f"| {name} | " + " | ".join(f"{v[i]:.1f}" for v in split.values()) + " |")
    lines.append("| **total** | " + " | ".join(f"**{sum(v):.1f}**" for v in split.values()) + " |")
    return lines


def _parse_strace_summary(path):
    """{syscall: calls} from an `strace -c` summary file."""
    calls = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return calls


def syscalls_per_request(fleet, wrk, body_file, out_dir, seconds=3, connections=8):
    """{target: {syscall: calls per request}} for each proxy under wrk, the whole wrk run traced."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    out = {}
    for target in STRACE_TARGETS:
        path = Path(out_dir) / f"strace-{target}.txt"
        args = [strace, "-c", "-f", "-o", str(path)]
        for pid in [fleet.pids[target], *child_pids(fleet.pids[target])]:
            args += ["-p", str(pid)]
        tracer = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)   # attached before the first request
        result = wrk.run(fleet.url(target, "static"), body_file, connections, seconds)
        tracer.send_signal(2)
        tracer.wait(10)
        requests = max(1, result["requests"])
        out[target] = {name: calls / requests for name, calls in _parse_strace_summary(path).items()}
        path.unlink(missing_ok=True)
    return out


def syscall_table(per_request):
    """Markdown: the main system calls per request of each proxy."""
    names = sorted({n for calls in per_request.values() for n, v in calls.items() if v >= 0.05},
                   key=lambda n: -max(calls.get(n, 0) for calls in per_request.values()))
    lines = ["| system calls per request | " + " | ".join(per_request) + " |",
             "| --- | " + " | ".join("---" for _ in per_request) + " |"]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{calls.get(name, 0):.2f}" for calls in per_request.values()) + " |")
    lines.append("| **total** | " + " | ".join(f"**{sum(calls.values()):.2f}**" for calls in per_request.values())
                 + " |")
    return lines


def profile(fleet, wrk, body_file, out_dir):
    """Runs both with the bodies in `body_file`; writes overhead-profile.txt; returns {"perf": text, "syscalls":
    {...} or None}."""
    perf_text = perf_profile(fleet, wrk, body_file, out_dir)
    split = cpu_split_per_request(fleet, wrk, body_file)
    syscalls = syscalls_per_request(fleet, wrk, body_file, out_dir)
    text = perf_text + "\n\n--- user and kernel CPU per request (/proc, wrk -c32)\n" + "\n".join(cpu_split_table(split))
    if syscalls:
        text += "\n\n--- system calls per request (strace -c -f, wrk -c8)\n" + "\n".join(syscall_table(syscalls))
    (Path(out_dir) / "overhead-profile.txt").write_text(text + "\n")
    return {"perf": perf_text, "syscalls": syscalls, "cpu_split": split}
