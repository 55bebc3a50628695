"""pytest plugin that keeps a CI test run from passing empty or with tests quietly skipped.

Loaded by the ctest pytest entries (tests/CMakeLists.txt) as `-p pytest_skip_guard --guard-suite NAME`, with
tests/ on PYTHONPATH. At the end of the session it prints every skipped (or xfailed) test with its reason, and
turns a passing run into a failing one when:
  - a test was skipped whose node id (relative to the repository root, e.g.
    tests/integration/test_bench_smoke.py::test_overhead_benchmark_reports_ratios_to_nginx) is not on
    tests/skip_allowlist.txt; a module skipped as a whole counts too, under the module's path;
  - fewer tests passed than the `pytest NAME` line of tests/minimum_counts asks for (at least 1 without a line);
  - nothing was collected (pytest's own exit status 5 already fails; the guard says why).
Run pytest without `-p pytest_skip_guard` to work on tests by hand (-k, single files) without the guard.
"""
import os
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
ALLOWLIST = TESTS_DIR / "skip_allowlist.txt"
MINIMUMS = TESTS_DIR / "minimum_counts"


def read_allowlist(path):
    """{node id: reason} from lines `<id>  # <reason>`; an entry without a reason is a problem, not an entry."""
    allowed, problems = {}, []
    if not path.is_file():
        return allowed, problems
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        node_id, _, reason = (part.strip() for part in line.partition("#"))
        if not reason:
            problems.append(f"{path.name}:{number}: '{node_id}' has no '# reason'")
            continue
        allowed[node_id] = reason
    return allowed, problems


def read_minimum(path, suite):
    """The minimum of the `pytest <suite> <n>` line of tests/minimum_counts, or None."""
    if not path.is_file():
        return None
    for raw in path.read_text().splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) == 3 and fields[0] == "pytest" and fields[1] == suite:
            return int(fields[2])
    return None


def pytest_addoption(parser):
    group = parser.getgroup("skip guard", "fail on unlisted skips or too few tests (tests/pytest_skip_guard.py)")
    group.addoption("--guard-suite", default=None,
                    help="this suite's name in the `pytest` lines of tests/minimum_counts")
    group.addoption("--guard-allowlist", default=str(ALLOWLIST), help="allowed skips (default: %(default)s)")
    group.addoption("--guard-minimums", default=str(MINIMUMS), help="minimum counts (default: %(default)s)")


def pytest_configure(config):
    config.pluginmanager.register(SkipGuard(config), "skip_guard")


class SkipGuard:
    def __init__(self, config):
        self.config = config
        self.suite = config.getoption("--guard-suite")
        self.allowlist_path = Path(config.getoption("--guard-allowlist"))
        self.allowed, self.problems = read_allowlist(self.allowlist_path)
        minimum = read_minimum(Path(config.getoption("--guard-minimums")), self.suite) if self.suite else None
        self.minimum = max(1, minimum if minimum is not None else 1)
        self.collected = 0
        self.passed = 0
        self.skipped = {}  # repository-relative node id -> reason

    def repo_id(self, nodeid):
        """A node id relative to the repository root, whatever directory pytest chose as its rootdir."""
        path, sep, rest = nodeid.partition("::")
        full = (self.config.rootpath / path).resolve() if path else self.config.rootpath
        try:
            path = full.relative_to(REPO_ROOT).as_posix()
        except ValueError:
            path = os.path.relpath(full, REPO_ROOT)
        return path + sep + rest

    @staticmethod
    def reason(report):
        if hasattr(report, "wasxfail"):
            return f"xfail: {report.wasxfail}" if report.wasxfail else "xfail"
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            return str(report.longrepr[2]).removeprefix("Skipped: ")
        return str(report.longrepr)

    def pytest_collectreport(self, report):
        if report.skipped:  # a module skipped as a whole (pytest.skip(allow_module_level=True), a skip mark)
            self.skipped[self.repo_id(report.nodeid)] = self.reason(report)

    def pytest_collection_finish(self, session):
        self.collected = len(session.items)

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            self.skipped[self.repo_id(report.nodeid)] = self.reason(report)
        elif report.when == "call" and report.passed:
            self.passed += 1

    def verdict(self):
        problems = list(self.problems)
        if self.collected == 0:
            problems.append("no tests were collected")
        if self.passed < self.minimum:
            where = f"the `pytest {self.suite}` line of {MINIMUMS.name}" if self.suite else "--guard-suite not given"
            problems.append(f"{self.passed} tests passed, fewer than the minimum of {self.minimum} ({where})")
        unlisted = sorted(node_id for node_id in self.skipped if node_id not in self.allowed)
        if unlisted:
            problems.append(f"{len(unlisted)} skipped tests are not on {self.allowlist_path.name}")
        return problems

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        # Runs before the terminal summary is printed, so the summary below reports the final verdict.
        if self.verdict() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        problems = self.verdict()
        tr.write_sep("=", f"skip guard ({self.suite or 'no suite'})", red=bool(problems), green=not problems)
        tr.write_line(f"collected {self.collected}, passed {self.passed} (minimum {self.minimum}), "
                      f"skipped {len(self.skipped)}")
        for node_id, reason in sorted(self.skipped.items()):
            if node_id in self.allowed:
                tr.write_line(f"  SKIPPED (allowed: {self.allowed[node_id]}) {node_id}: {reason}")
            else:
                tr.write_line(f"  SKIPPED (NOT ALLOWED) {node_id}: {reason}", red=True)
        for problem in problems:
            tr.write_line(f"skip guard FAILED: {problem}", red=True, bold=True)
        if any(node_id not in self.allowed for node_id in self.skipped):
            tr.write_line(f"  make the test run, or add its node id with a '# reason' to {self.allowlist_path}")
