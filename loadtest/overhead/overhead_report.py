"""The proxy-overhead report (overhead.md + overhead.json), and the optional perf profile of prefixgate."""
import json
from pathlib import Path

from provenance import markdown as provenance_markdown
from proxy_profile import syscall_table

TARGETS = ["direct", "nginx", "haproxy", "prefixgate-random", "prefixgate-prefix-cache"]
NAMES = {"direct": "direct", "nginx": "nginx", "haproxy": "HAProxy", "prefixgate-random": "prefixgate random",
         "prefixgate-prefix-cache": "prefixgate prefix-cache"}


def _ratio(value):
    return "-" if value is None else f"{value:.2f}x"


def _throughput(rows):
    lines = ["Requests/s (median of the rounds; in brackets: / nginx's in the same round):", "",
             "| connections | " + " | ".join(NAMES[t] for t in TARGETS) + " |",
             "| --- | " + " | ".join("---" for _ in TARGETS) + " |"]
    for row in rows:
        cells = [f"{row[t]['rps']:.0f} ({row[t]['rps_vs_nginx']:.2f})" + (f", {row[t]['errors']} errors"
                                                                          if row[t]["errors"] else "")
                 for t in TARGETS]
        lines.append(f"| {row['connections']} | " + " | ".join(cells) + " |")
    lines += ["", "CPU time per request of the proxy process (all its threads and workers; for direct: the upstream "
              "nginx), microseconds, from /proc: what the proxy costs whatever the machine's contention:", "",
              "| connections | " + " | ".join(NAMES[t] for t in TARGETS) + " |",
              "| --- | " + " | ".join("---" for _ in TARGETS) + " |"]
    for row in rows:
        lines.append(f"| {row['connections']} | " + " | ".join(f"{row[t]['cpu_us_per_request']:.1f}"
                                                                 for t in TARGETS) + " |")
    return lines


def _latency_table(results, unit="us"):
    div = 1000.0 if unit == "ms" else 1.0
    lines = [f"| target | req/s | p50 {unit} | p99 {unit} | added p50 {unit} | added p99 {unit} | "
             "added p50 / nginx's | added p99 / nginx's | CPU us/request | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in TARGETS:
        r = results[t]
        if t == "direct":
            added = ["-", "-", "-", "-"]
        else:
            added = [f"{r['added_p50_us'] / div:.2f}", f"{r['added_p99_us'] / div:.2f}",
                     _ratio(r["added_p50_vs_nginx"]), _ratio(r["added_p99_vs_nginx"])]
        lines.append(f"| {NAMES[t]} | {r['rps']:.0f} | {r['p50_us'] / div:.2f} | {r['p99_us'] / div:.2f} | "
                     + " | ".join(added) + f" | {r.get('cpu_us_per_request', 0):.1f} | "
                     f"{r['socket_errors'] + r['non2xx']} |")
    return lines


def _streaming(results):
    lines = ["| target | events | delay p50 us | p90 us | p99 us | p99.9 us | added p50 us | added p99 us | "
             "added p50 / nginx's | added p99 / nginx's | stray last chunks |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in TARGETS:
        r = results[t]
        added = (["-"] * 4 if t == "direct" else
                 [f"{r['added_p50_us']:.0f}", f"{r['added_p99_us']:.0f}", _ratio(r["added_p50_vs_nginx"]),
                  _ratio(r["added_p99_vs_nginx"])])
        lines.append(f"| {NAMES[t]} | {r['events']} | {r['p50_us']:.0f} | {r['p90_us']:.0f} | {r['p99_us']:.0f} | "
                     f"{r['p999_us']:.0f} | " + " | ".join(added) + f" | {r['stray_last_chunks']} |")
    return lines


def _profile(prof):
    """The profile section: system calls per request (strace) and perf's split by binary and top own symbols."""
    lines = ["## Where the time goes", "", "Full text: `overhead-profile.txt` (perf and strace, written by "
             "`--profile`).", ""]
    if prof.get("syscalls"):
        lines += ["System calls per request under wrk -c8 (`strace -c -f`, the whole wrk run traced; strace slows "
                  "every call, so only the counts matter):", ""] + syscall_table(prof["syscalls"]) + [""]
    lines += ["CPU profile of prefixgate prefix-cache under wrk -c32 (`perf record -F 999 -g`):", "", "```",
              prof["perf"][:2500].rstrip(), "```", ""]
    return lines


def verdict(results):
    """The target of issue 4, checked: prefix-cache >= 0.8x nginx's req/s, and lower p99 added latency."""
    lines = []
    if "throughput" in results:
        ratios = [(row["connections"], row["prefixgate-prefix-cache"]["rps_vs_nginx"]) for row in results["throughput"]]
        met = [c for c, r in ratios if r >= 0.8]
        lines.append("prefixgate prefix-cache / nginx requests/s: " + ", ".join(f"{r:.2f}x at {c} connections"
                                                                            for c, r in ratios)
                     + f" -> 0.8x {'reached at every count' if len(met) == len(ratios) else 'reached at ' + (', '.join(map(str, met)) or 'no count')}.")
    if "fixed-rate" in results:
        pg, ng = results["fixed-rate"]["prefixgate-prefix-cache"], results["fixed-rate"]["nginx"]
        lower = pg["added_p99_us"] < ng["added_p99_us"]
        lines.append(f"p99 added latency at a fixed rate: prefixgate prefix-cache {pg['added_p99_us']} us, nginx "
                     f"{ng['added_p99_us']} us -> {'lower' if lower else 'not lower'} than nginx's.")
    return lines


def write_report(out_dir, results, command):
    """Writes overhead.json and overhead.md; returns the Markdown path."""
    out_dir = Path(out_dir)
    cfg = results["config"]
    (out_dir / "overhead.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    rate = cfg["rate_connections"] * 1000 / cfg["rate_delay_ms"]
    load = results["provenance"]["load"]
    md = ["# prefixgate proxy overhead", "", *provenance_markdown(results["provenance"]),
          "Upstream: nginx `return 200` with a fixed ~300-byte chat completion (one worker). Proxies: nginx "
          "(`proxy_pass`, upstream `keepalive`, 2 workers), HAProxy (`nbthread 2`, `http-reuse always`), prefixgate "
          f"(`threads: {cfg['gateway_threads']}`, `log_level: warn`: the default `info` writes a log line per request) "
          f"with `random` and with `prefix-cache` (one pod). Client: wrk {cfg['wrk_threads']} thread(s), keep-alive, "
          f"{cfg['duration_s']} s per run, loadtest/overhead/wrk_post.lua. Everything on one 2-core machine, so the "
          "client, the proxy and the upstream share two cores: the absolute numbers are low and the ratios are what "
          f"counts. Wall time {results['wall_s']:.0f} s; highest 1-minute load average during the run "
          f"{load['max_1m']:.2f}.", ""]
    if "throughput" in results:
        md += ["## Throughput: 2 KiB prompt, non-streaming", ""] + _throughput(results["throughput"]) + [""]
    if "fixed-rate" in results:
        md += [f"## Latency at a fixed rate: about {rate:.0f} requests/s", "",
               f"wrk has no fixed-rate mode: {cfg['rate_connections']} connections each wait {cfg['rate_delay_ms']} ms "
               "after every response (`WRK_DELAY_MS`, a Lua `delay()`), well below every target's saturation, for "
               f"{cfg['rate_duration_s']} s. Added = the target's percentile - direct's.", ""]
        md += _latency_table(results["fixed-rate"]) + [""]
    if "long-prompt" in results:
        md += [f"## Long prompt: 256 KiB body, {cfg['long_connections']} connections", ""]
        md += _latency_table(results["long-prompt"], unit="ms") + [""]
    if "streaming" in results:
        md += ["## Streaming: delay added to each of 500 SSE events", "",
               f"Upstream: `loadtest/overhead/sse_probe.py serve`, one event every {cfg['stream_gap_ms']:g} ms, each "
               "stamped with the CLOCK_MONOTONIC time the upstream wrote it; the client (same script, Python) takes "
               f"arrival - stamp for every event: {cfg['stream_connections']} connections x {cfg['stream_count']} "
               "streams x 500 events per target. The direct delay is the two Python ends and loopback; added = the "
               "target's - direct's. (The engine simulator at `--time-scale 0` was tried first: it writes events back "
               "to back, and every proxy then came out faster than direct, because what it measured was the "
               "simulator's own write rate.) Stray last chunks = responses followed by a second `0\\r\\n\\r\\n` "
               "(see docs/benchmarks.md).", ""]
        md += _streaming(results["streaming"]) + [""]
    md += ["## Against the target", ""] + [f"- {line}" for line in verdict(results)] + [""]
    if results.get("profile"):
        md += _profile(results["profile"])
    (out_dir / "overhead.md").write_text("\n".join(md))
    return out_dir / "overhead.md"
