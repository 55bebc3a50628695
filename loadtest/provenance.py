"""Where a benchmark report comes from: the git commit and whether the tree was dirty (and which files), the build
type of the binaries (from the CMakeCache.txt of the build folder they were built in), the command line, the
machine (CPU model, cores) and its load before, during (the highest 1-minute load average, sampled) and after.

    with LoadSampler() as load:
        ...run...
    info = collect(command, binaries, load)       # a dict for the JSON summary
    lines = markdown(info)                        # a paragraph for the Markdown report

The binaries are usually copies (scripts/lib/bench_common.sh snapshots them so a rebuild cannot swap them
mid-run); it exports PREFIXGATE_BUILD_DIR, the build folder they were copied from.
"""
import datetime
import hashlib
import os
import platform
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIRTY_FILES_SHOWN = 20


def _run(args, cwd=ROOT):
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def git_info(root=ROOT):
    """{"commit", "commit_date", "dirty", "dirty_files"}; commit None outside a git checkout."""
    commit = (_run(["git", "rev-parse", "HEAD"], root) or "").strip() or None
    date = (_run(["git", "log", "-1", "--format=%cI"], root) or "").strip() or None
    status = _run(["git", "status", "--porcelain", "--untracked-files=normal"], root)
    files = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {"commit": commit, "commit_date": date, "dirty": bool(files), "dirty_files": files}


def cmake_build_type(build_dir):
    """CMAKE_BUILD_TYPE from build_dir/CMakeCache.txt ("" when set empty), None when there is no cache."""
    cache = Path(build_dir) / "CMakeCache.txt"
    if not cache.is_file():
        return None
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith("CMAKE_BUILD_TYPE:"):
            return line.split("=", 1)[1].strip()
    return None


def find_build_dir(binary):
    """The nearest folder above `binary` holding a CMakeCache.txt, or None."""
    for folder in Path(binary).resolve().parents:
        if (folder / "CMakeCache.txt").is_file():
            return folder
    return None


def binary_info(path):
    """{"path", "sha256" (first 16 hex digits), "modified"} of a binary; None when it is missing."""
    p = Path(path)
    if not p.is_file():
        return None
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    modified = datetime.datetime.fromtimestamp(p.stat().st_mtime, datetime.timezone.utc)
    return {"path": str(p), "sha256": digest.hexdigest()[:16], "modified": modified.isoformat(timespec="seconds")}


def build_info(binaries):
    """The build folder (PREFIXGATE_BUILD_DIR, else the one above the first binary) and its build type, and the
    binaries' checksums. binaries: {label: path}."""
    build_dir = os.environ.get("PREFIXGATE_BUILD_DIR") or next(
        (str(d) for d in (find_build_dir(b) for b in binaries.values()) if d), None)
    return {"build_dir": build_dir, "build_type": cmake_build_type(build_dir) if build_dir else None,
            "binaries": {label: binary_info(path) for label, path in binaries.items()}}


def gateway_binary():
    """The prefixgate binary the harness starts (PREFIXGATE_BIN, else build/prefixgate)."""
    return os.environ.get("PREFIXGATE_BIN", str(ROOT / "build" / "prefixgate"))


def loadavg():
    """The 1, 5 and 15-minute load averages."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return list(os.getloadavg())


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores():
    """CPUs this process may run on (what `nproc` prints)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


class LoadSampler:
    """Samples the 1-minute load average every `interval_s` in a thread while the block runs: before, max, after."""

    def __init__(self, interval_s=5.0):
        self.interval_s = interval_s
        self.before = self.after = None
        self.max_1m = 0.0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = None
        self.started = self.ended = None

    def _sample(self, values=None):
        values = values or loadavg()
        self.max_1m = max(self.max_1m, values[0])
        self.samples += 1
        return values

    def _loop(self):
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self):
        self.before = self._sample()
        self.started = time.time()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.after = self._sample()
        self.ended = time.time()
        return False

    def as_dict(self):
        return {"before": self.before, "after": self.after, "max_1m": self.max_1m, "samples": self.samples,
                "interval_s": self.interval_s}


def collect(command, binaries, load=None, git=None):
    """Everything a report says about where it comes from, as a JSON-ready dict. `git`: git_info() taken when the
    run began (pass it: a run writes its own outputs, plots included, into the tree before it ends, and those must
    not make the code that ran look dirty); taken now when absent."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {"date": now.isoformat(timespec="seconds"), "command": command, "git": git or git_info(),
            "build": build_info(binaries), "host": {"cores": cores(), "cpu": cpu_model(),
                                                    "kernel": platform.release(), "python": platform.python_version()},
            "load": load.as_dict() if load else {"before": loadavg()}}


def _loads(values):
    return "/".join(f"{v:.2f}" for v in values) if values else "?"


def markdown(info):
    """A Markdown paragraph (list of lines) stating the provenance."""
    git, build, host, load = info["git"], info["build"], info["host"], info["load"]
    if git["dirty"]:
        shown = ", ".join(f"`{f}`" for f in git["dirty_files"][:DIRTY_FILES_SHOWN])
        more = len(git["dirty_files"]) - DIRTY_FILES_SHOWN
        tree = f"**dirty** ({len(git['dirty_files'])} files changed or untracked: {shown}" + (
            f" and {more} more" if more > 0 else "") + ")"
    else:
        tree = "clean"
    bins = "; ".join(f"{label} sha256 {b['sha256']}, built {b['modified']}" for label, b in build["binaries"].items()
                     if b)
    during = (f"; highest 1-minute load during the run {load['max_1m']:.2f} ({load['samples']} samples every "
              f"{load['interval_s']:g} s)" if "max_1m" in load else "")
    return [
        f"**Provenance**: commit `{git['commit'] or 'unknown'}` ({git['commit_date'] or '?'}), working tree {tree}. "
        f"Build type `{build['build_type'] or 'unknown'}` (from `{build['build_dir'] or '?'}/CMakeCache.txt`); "
        f"{bins}. Command: `{info['command']}`. Run on {info['date']}, {host['cores']} cores ({host['cpu']}), "
        f"Linux {host['kernel']}, Python {host['python']}. Load average (1/5/15 min) before {_loads(load['before'])}, "
        f"after {_loads(load.get('after'))}{during}.", ""]
