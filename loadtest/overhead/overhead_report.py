"""The proxy-overhead report (overhead.md + overhead.json), its "Against the targets" section, and the optional perf
profile of prefixgate."""
import json
from pathlib import Path

from provenance import markdown as provenance_markdown
from proxy_profile import cpu_split_table, syscall_table
from servers import PODS, PROMPT_TOKENS

TARGETS = ["direct", "nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]
NAMES = {"direct": "direct", "nginx": "nginx", "haproxy": "HAProxy", "prefixgate-random": "prefixgate random",
         "prefixgate-prefix-cache": "prefixgate prefix-cache"}
PC = "prefixgate-prefix-cache"
LOAD_PHASES = {"throughput": "2 KiB prompt, one fixed body",
               "families": "2 KiB prompts, rotating conversation families",
               "long-prompt": "256 KiB prompts, rotating conversation families"}
# Issue 12's targets: prefix-cache / nginx requests/s on 2 KiB and on 256 KiB (with real matching).
TARGET_2K, TARGET_256K = 1.0, 0.5


def _ratio(value):
    return "-" if value is None else f"{value:.2f}x"


def _spread(s, scale=1.0, digits=0):
    """"median (min-max)" of a spread dict, divided by `scale`."""
    f = f"{{:.{digits}f}}"
    return f"{f.format(s['median'] / scale)} ({f.format(s['min'] / scale)}-{f.format(s['max'] / scale)})"


def _met(ok):
    return "**met**" if ok else "**not met**"


def _load_table(row):
    lines = ["| target | req/s | / nginx's (per round) | p50 ms | p99 ms | CPU us/request | errors |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for t in TARGETS:
        c = row["targets"][t]
        per_round = c["rps_vs_nginx_rounds"]
        lines.append(f"| {NAMES[t]} | {_spread(c['rps'])} | {c['rps_vs_nginx']:.2f} ({per_round['min']:.2f}-"
                     f"{per_round['max']:.2f}) | {_spread(c['p50_us'], 1000, 2)} | {_spread(c['p99_us'], 1000, 2)} | "
                     f"{_spread(c['cpu_us_per_request'], 1, 1)} | {c['errors']} |")
    return lines


def _share(value):
    return "-" if value is None else f"{100 * value:.1f} %"


def _routing_table(routing):
    buckets = ["0", "1-25", "26-50", "51-75", "76-100"]
    lines = ["| target | requests | pods used | requests per pod | mean share of the prompt matched | decisions by "
             "match % (" + " / ".join(buckets) + ") |", "| --- | --- | --- | --- | --- | --- |"]
    for t, r in routing.items():
        per_pod = " / ".join(str(n) for n in r["pod_requests"].values())
        decisions = " / ".join(str(r["decisions"].get(b, 0)) for b in buckets) if r["decisions"] else "-"
        lines.append(f"| {NAMES[t]} | {r['requests']} | {r['pods_used']} of {PODS} | {per_pod} | "
                     f"{_share(r['mean_match_share'])} | {decisions} |")
    return lines


def _latency_table(cells):
    lines = ["| target | req/s | p50 us | p99 us | added p50 us | added p99 us | added p50 / nginx's | "
             "added p99 / nginx's | CPU us/request | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in TARGETS:
        c = cells[t]
        added = (["-"] * 4 if t == "direct" else [f"{c['added_p50_us']:.0f}", f"{c['added_p99_us']:.0f}",
                                                  _ratio(c["added_p50_vs_nginx"]), _ratio(c["added_p99_vs_nginx"])])
        lines.append(f"| {NAMES[t]} | {_spread(c['rps'])} | {_spread(c['p50_us'])} | {_spread(c['p99_us'])} | "
                     + " | ".join(added) + f" | {_spread(c['cpu_us_per_request'], 1, 1)} | {c['errors']} |")
    return lines


def _streaming(cells):
    lines = ["| target | events | delay p50 us | p90 us | p99 us | p99.9 us | added p50 us | added p99 us | "
             "added p50 / nginx's | added p99 / nginx's | stray last chunks |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in TARGETS:
        c = cells[t]
        added = (["-"] * 4 if t == "direct" else
                 [f"{c['added_p50_us']:.0f}", f"{c['added_p99_us']:.0f}", _ratio(c["added_p50_vs_nginx"]),
                  _ratio(c["added_p99_vs_nginx"])])
        lines.append(f"| {NAMES[t]} | {c['events']} | {_spread(c['p50_us'])} | {c['p90_us']['median']:.0f} | "
                     f"{_spread(c['p99_us'])} | {c['p999_us']['median']:.0f} | " + " | ".join(added)
                     + f" | {c['stray_last_chunks']} |")
    return lines


def _profile(prof):
    """The profile section: system calls per request (strace) and perf's split by binary and top own symbols."""
    lines = ["## Where the time goes", "", "Full text: `overhead-profile.txt` (perf and strace, written by "
             "`--profile`).", ""]
    if prof.get("cpu_split"):
        lines += ["CPU time per request under wrk -c32, the fixed 2 KiB body, split into user and kernel time (from "
                  "/proc, over one 4 s run each; the kernel's share is the TCP work on the proxy's sockets):", ""]
        lines += cpu_split_table(prof["cpu_split"]) + [""]
    if prof.get("syscalls"):
        lines += ["System calls per request under wrk -c8, the fixed 2 KiB body (`strace -c -f`, the whole wrk run "
                  "traced; strace slows every call, so only the counts matter):", ""] + syscall_table(prof["syscalls"])
        lines += [""]
    lines += ["CPU profiles of prefixgate prefix-cache, then of nginx, under wrk -c32, the fixed 2 KiB body (`perf "
              "record -F 999 -g`; the full text is in overhead-profile.txt):", "", "```", prof["perf"][:6000].rstrip(),
              "```", ""]
    return lines


def _main_row(phase):
    """The row at 32 connections when the phase has one (the issue's figure), else its first."""
    return next((row for row in phase["rows"] if row["connections"] == 32), phase["rows"][0])


def verdict(results):
    """Issue 12's targets, from the medians: prefix-cache >= 1.0x nginx's requests/s with p99 no higher on 2 KiB;
    >= 0.5x on 256 KiB with real matching; SSE delay added per event no more than nginx's."""
    lines = []
    for name, label in (("throughput", "2 KiB, one fixed body"), ("families", "2 KiB, conversation families")):
        if name not in results:
            continue
        row = _main_row(results[name])
        pc, ng = row["targets"][PC], row["targets"]["nginx"]
        share = row["routing"][PC]["mean_match_share"]
        lines.append(
            f"{label}, {row['connections']} connections: prefix-cache / nginx requests/s {pc['rps_vs_nginx']:.2f}x "
            f"(per round {pc['rps_vs_nginx_rounds']['min']:.2f}-{pc['rps_vs_nginx_rounds']['max']:.2f}; target "
            f">= {TARGET_2K:.1f}x: {_met(pc['rps_vs_nginx'] >= TARGET_2K)}); p99 {pc['p99_us']['median'] / 1000:.2f} "
            f"ms against nginx's {ng['p99_us']['median'] / 1000:.2f} ms (target no higher: "
            f"{_met(pc['p99_us']['median'] <= ng['p99_us']['median'])})"
            + (f"; mean share of the prompt matched {_share(share)}, {row['routing'][PC]['pods_used']} of {PODS} pods"
               f" used" if name == "families" else "") + ".")
    if "long-prompt" in results:
        row = _main_row(results["long-prompt"])
        pc, routing = row["targets"][PC], row["routing"][PC]
        matching = (routing["mean_match_share"] or 0) > 0
        lines.append(
            f"256 KiB, conversation families, {row['connections']} connections: prefix-cache / nginx requests/s "
            f"{pc['rps_vs_nginx']:.2f}x (per round {pc['rps_vs_nginx_rounds']['min']:.2f}-"
            f"{pc['rps_vs_nginx_rounds']['max']:.2f}), with mean share of the prompt matched "
            f"{_share(routing['mean_match_share'])} over {routing['pods_used']} of {PODS} pods (target >= "
            f"{TARGET_256K:.1f}x with real matching: {_met(pc['rps_vs_nginx'] >= TARGET_256K and matching)}); CPU "
            f"{pc['cpu_us_per_request']['median']:.0f} us per request, nginx "
            f"{row['targets']['nginx']['cpu_us_per_request']['median']:.0f} us.")
    if "streaming" in results:
        pc, ng = results["streaming"][PC], results["streaming"]["nginx"]
        lines.append(f"SSE delay added per event, p50 / p99: prefix-cache {pc['added_p50_us']:.0f} / "
                     f"{pc['added_p99_us']:.0f} us, nginx {ng['added_p50_us']:.0f} / {ng['added_p99_us']:.0f} us "
                     f"(target no more than nginx's: "
                     f"{_met(pc['added_p50_us'] <= ng['added_p50_us'] and pc['added_p99_us'] <= ng['added_p99_us'])}).")
    if "fixed-rate" in results:
        pc, ng = results["fixed-rate"][PC], results["fixed-rate"]["nginx"]
        lines.append(f"Not a target, for the record: p99 added at a fixed rate, prefix-cache {pc['added_p99_us']:.0f} "
                     f"us, nginx {ng['added_p99_us']:.0f} us ({_ratio(pc['added_p99_vs_nginx'])}).")
    return lines


def _processes(shape, loops):
    """What /proc said of the proxies after the run: the workers or threads each was configured with."""
    serving = "one serves" if loops == 1 else f"{loops} serve"
    return (f"From /proc after the run: nginx master and {shape['nginx']['children']} worker(s), HAProxy "
            f"{shape['haproxy']['threads']} thread(s), prefixgate random and prefix-cache "
            f"{shape['prefixgate-random']['threads']} and {shape['prefixgate-prefix-cache']['threads']} threads "
            f"({serving} requests; the others are the main thread, the control loop: admin, health checks and "
            "scrapes of the pods' /metrics, counted in its CPU time, and the drain thread).")


def _setup(results):
    cfg, load = results["config"], results["provenance"]["load"]
    rounds = f"{cfg['rounds']} round" + ("" if cfg["rounds"] == 1 else "s")
    loops = cfg.get("proxy_loops", 1)
    each = "one event loop each" if loops == 1 else f"{loops} event loops each (--proxy-loops {loops})"
    return [
        f"Upstream: one nginx worker answering every POST with a fixed ~380-byte chat completion (`return 200`; its "
        f"`usage` says {PROMPT_TOKENS} prompt tokens and `prompt_tokens_details.cached_tokens` 0, so prefixgate's "
        f"prediction audit counts every prefix-cache response), listening on {PODS} ports: the {PODS} pods. Proxies, "
        f"{each}: nginx (`worker_processes {loops}`, `proxy_pass` to an upstream block of the {PODS} pods, "
        f"round robin, `keepalive 512`, `access_log off`), HAProxy (`nbthread {loops}`, `balance roundrobin` over the "
        f"pods, `http-reuse always`), prefixgate (`threads: {loops}`, `log_level: warn`; the {PODS} pods in its pods "
        "file) with "
        f"`random` and with `prefix-cache`. Client: wrk, {cfg['wrk_threads']} thread, keep-alive, {cfg['duration_s']} "
        "s per run, loadtest/overhead/wrk_post.lua (a rotating workload's bodies are sent in a fixed, seeded order "
        f"per wrk thread). {rounds} per phase, the targets interleaved in each (round r starts at the r-th target); "
        "every cell is the median of the rounds with their min-max in brackets, and the raw figures of every round "
        "are in overhead.json. CPU us/request: user + system CPU time of the proxy process (nginx: master and worker; "
        "for direct: the upstream nginx) over the run, from /proc, divided by the requests. "
        f"{_processes(results['processes'], loops)} Wall time {results['wall_s']:.0f} s; highest 1-minute load average "
        f"during the run {load['max_1m']:.2f}.", ""]


def write_report(out_dir, results, command):
    """Writes overhead.json and overhead.md; returns the Markdown path."""
    out_dir = Path(out_dir)
    cfg = results["config"]
    (out_dir / "overhead.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    md = ["# prefixgate proxy overhead", "", *provenance_markdown(results["provenance"]), *_setup(results)]
    md += ["## Against the targets", ""] + [f"- {line}" for line in verdict(results)] + [""]
    for name, title in LOAD_PHASES.items():
        if name not in results:
            continue
        phase = results[name]
        md += [f"## {title}", "", f"Bodies: {phase['body']}." + ("" if name == "throughput" else
               " Each family's bodies share its system prompt and two earlier turns (about 90 % of the bytes) and "
               "end in a last user message of their own; the order interleaves the families."), ""]
        for row in phase["rows"]:
            md += [f"{row['connections']} connections:", ""] + _load_table(row) + [""]
            md += ["prefixgate's routing over the measured rounds, from its own /metrics (`prefixgate_requests_total` "
                   "by pod, `aibrix_prefix_cache_routing_decisions_total` by match bucket; mean share = "
                   "`prefixgate_prefix_predicted_tokens_total` / (`prefixgate_prefix_prediction_audited_responses_"
                   f"total` x {PROMPT_TOKENS})):", ""] + _routing_table(row["routing"]) + [""]
    if "fixed-rate" in results:
        rate = cfg["rate_connections"] * 1000 / cfg["rate_delay_ms"]
        md += [f"## Latency at a fixed rate: about {rate:.0f} requests/s, the fixed 2 KiB body", "",
               f"wrk has no fixed-rate mode: {cfg['rate_connections']} connections each wait {cfg['rate_delay_ms']} ms "
               "after every response (`WRK_DELAY_MS`, a Lua `delay()`), well below every target's saturation, for "
               f"{cfg['rate_duration_s']} s per round. Added = the target's median - direct's.", ""]
        md += _latency_table(results["fixed-rate"]) + [""]
    if "streaming" in results:
        md += ["## Streaming: delay added to each of 500 SSE events", "",
               f"Upstream: `loadtest/overhead/sse_probe.py serve`, one event every {cfg['stream_gap_ms']:g} ms, each "
               "stamped with the CLOCK_MONOTONIC time the upstream wrote it; the client (same script, Python) takes "
               f"arrival - stamp for every event: {cfg['stream_connections']} connections x {cfg['stream_count']} "
               "streams x 500 events per target per round (the proxies as above, one pod: the probe). The direct delay "
               "is the two Python ends and loopback; added = the target's median - direct's. Stray last chunks = "
               "responses followed by a second `0\\r\\n\\r\\n` (see docs/benchmarks.md).", ""]
        md += _streaming(results["streaming"]) + [""]
    md += ["## Commands", "", f"`{command}`; its wrk runs (each once per target and round):", "", "```",
           *results["wrk_commands"], "```", ""]
    if results.get("profile"):
        md += _profile(results["profile"])
    (out_dir / "overhead.md").write_text("\n".join(md))
    return out_dir / "overhead.md"
