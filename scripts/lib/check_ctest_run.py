#!/usr/bin/python3
"""Checks a finished ctest run of a build folder against ctest's own listing of its tests (scripts/test.sh runs it
after each ctest stage): prints the tests per label and every skipped test with its reason, and exits 1 when a
listed test did not run, a test failed or was skipped without being on the allow list, a label has no minimum, or
a label's passed tests are fewer than its minimum (a minimum that names another build folder does not apply).

Usage: check_ctest_run.py BUILD_DIR JUNIT_XML MINIMUM_COUNTS SKIP_ALLOWLIST [LABEL...]
With labels, only tests and minimums of those labels are checked (a filtered run).
"""
import json, os, re, subprocess, sys
import xml.etree.ElementTree as ET

build, results, minimums_path, allowlist_path, *only = sys.argv[1:]
problems = []

# A `ctest` line may end with the build folder its label belongs to (e.g. `ctest tsan 6 build-tsan`): in other
# folders that label is not expected.
minimums = {}
folder = os.path.basename(os.path.normpath(build))
for raw in open(minimums_path):
    fields = raw.split("#", 1)[0].split()
    if len(fields) in (3, 4) and fields[0] == "ctest" and fields[3:] in ([], [folder]):
        minimums[fields[1]] = int(fields[2])
allowed = {}
for number, raw in enumerate(open(allowlist_path), 1):
    line = raw.strip()
    if line and not line.startswith("#"):
        name, _, reason = (part.strip() for part in line.partition("#"))
        if reason:
            allowed[name] = reason
        else:
            problems.append(f"{allowlist_path}:{number}: '{name}' has no '# reason'")

# What ctest lists (names, labels, DISABLED), from ctest itself.
listing = json.loads(subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], check=True,
                                    capture_output=True, text=True).stdout)
labels_of = {}
for test in listing["tests"]:
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    labels_of[test["name"]] = props.get("LABELS", [])
selected = set(only) if only else None
if selected is None:
    for name, labels in labels_of.items():
        if name.endswith("_NOT_BUILT"):  # gtest_discover_tests' placeholder for a missing binary
            problems.append(f"{name.removesuffix('_NOT_BUILT')} was not built, so none of its tests are listed")
        elif not labels:
            problems.append(f"ctest entry {name} has no label, so no minimum counts it (tests/CMakeLists.txt)")
        for label in labels:
            if label not in minimums:
                problems.append(f"label {label} (of {name}) has no `ctest {label} N` line in {minimums_path}")
    expected = set(labels_of)
else:
    expected = {name for name, labels in labels_of.items() if selected & set(labels)}

# What ran, from the JUnit report of the run.
try:
    cases = ET.parse(results).getroot().iter("testcase")
except (OSError, ET.ParseError) as error:
    sys.exit(f"check: cannot read ctest's results {results}: {error}")
outcome, reasons = {}, {}
for case in cases:
    name, status = case.get("name"), case.get("status")
    skipped = case.find("skipped")
    if case.find("failure") is not None or status == "fail":
        outcome[name] = "failed"
    elif status == "notrun" and not (skipped is not None and skipped.get("message", "").startswith("SKIP_")):
        outcome[name] = "failed"  # e.g. `Unable to find executable`: ctest counts it failed too
    elif skipped is not None or status in ("notrun", "disabled"):
        outcome[name] = "skipped"
        out = case.findtext("system-out") or ""
        # GoogleTest prints `file:line: Skipped`, the GTEST_SKIP message, then `[  SKIPPED ] name`.
        found = re.search(r": Skipped\n(.*?)\n\[  SKIPPED \]", out, re.S)
        reasons[name] = (found.group(1).strip() if found and found.group(1).strip()
                         else skipped.get("message") if skipped is not None else status)
    else:
        outcome[name] = "passed"

rows = {}
for label in sorted(set(minimums) | {l for n in expected for l in labels_of[n]}):
    if selected is not None and label not in selected:
        continue
    names = [n for n in expected if label in labels_of[n]]
    count = lambda what: sum(outcome.get(n) == what for n in names)
    rows[label] = (len(names), count("passed"), count("failed"), count("skipped"), minimums.get(label))
    if label in minimums and count("passed") < minimums[label]:
        problems.append(f"label {label}: {count('passed')} tests passed, fewer than the minimum of "
                        f"{minimums[label]} in {minimums_path}")

print(f"ctest results in {build}:")
print(f"  {'label':<14} {'listed':>6} {'passed':>6} {'failed':>6} {'skipped':>7} {'minimum':>7}")
for label, (listed, passed, failed, skipped, minimum) in rows.items():
    print(f"  {label:<14} {listed:>6} {passed:>6} {failed:>6} {skipped:>7} {'-' if minimum is None else minimum:>7}")

not_run = sorted(expected - set(outcome))
if not_run:
    problems.append(f"{len(not_run)} listed tests did not run: {', '.join(not_run[:10])}"
                    + (" ..." if len(not_run) > 10 else ""))
failed = sorted(n for n in expected if outcome.get(n) == "failed")
if failed:
    problems.append(f"{len(failed)} tests failed: {', '.join(failed[:10])}" + (" ..." if len(failed) > 10 else ""))
skipped = sorted(n for n in expected if outcome.get(n) == "skipped")
for name in skipped:
    verdict = f"allowed: {allowed[name]}" if name in allowed else "NOT ALLOWED"
    print(f"  SKIPPED ({verdict}) {name}: {reasons.get(name, '')}")
unlisted = [n for n in skipped if n not in allowed]
if unlisted:
    problems.append(f"{len(unlisted)} skipped tests are not on {allowlist_path}: make them run, or list them there "
                    "with a '# reason'")
for problem in problems:
    print(f"check FAILED: {problem}")
sys.exit(1 if problems else 0)
