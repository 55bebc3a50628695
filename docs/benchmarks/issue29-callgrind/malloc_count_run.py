# Allocations per request, base and new alternating (tools/malloc_count): gcc -O2 -shared -fPIC -o /tmp/malloc_count.so
# tools/malloc_count/malloc_count.c -ldl -lpthread, then from the repository root with the two builds at /tmp/pg-base
# and /tmp/pg-fc765c1: /usr/bin/python3 docs/benchmarks/issue29-callgrind/malloc_count_run.py <work folder>.
# Output of the 2026-12-07 run: malloc-count.txt.
import os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "loadtest/overhead"); sys.path.insert(0, "loadtest")
from bodies import chat_body
from servers import MODEL, PODS, Daemon, find_tool, static_completion
import harness
from harness import Gateway, free_port
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True); (out/"upstream-body").mkdir(exist_ok=True)
(out/"b.jsonl").write_bytes(chat_body(2048)+b"\n")
ports=[free_port() for _ in range(PODS)]
up = Daemon("up", [find_tool("nginx"), "-p", str(out), "-c", str(out/"upstream.conf"), "-g", "daemon off;"], "nginx_upstream.conf", out/"upstream.conf", {"dir": out, "listens": "\n".join(f"listen 127.0.0.1:{p} backlog=4096;" for p in ports), "body": static_completion()}, ports)
# The two builds alternate, twice: BASE_BIN and NEW_BIN name them (default: the paths of the 2026-12-07 run).
BUILDS = (("base", os.environ.get("BASE_BIN", "/tmp/pg-base")), ("new", os.environ.get("NEW_BIN", "/tmp/pg-fc765c1")))
for label, binary in BUILDS + BUILDS:
    harness.GATEWAY_BIN = binary
    mc = out / f"mc-{label}"
    gw = Gateway(out, [{"name": f"pod-{i}", "address": f"127.0.0.1:{p}", "models": [MODEL]} for i, p in enumerate(ports)], name=f"gw-{label}", config={"routing": {"strategy": "prefix-cache"}, "threads": 1, "log_level": "warn", "discovery": {"file_poll_interval_ms": 500}}, launcher=["env", f"MCOUNT_FILE={mc}", "LD_PRELOAD=/tmp/malloc_count.so"])
    try:
        env = {**os.environ, "WRK_BODY_FILE": str(out/"b.jsonl")}
        url = f"http://127.0.0.1:{gw.port}/v1/chat/completions"
        subprocess.run([find_tool("wrk"), "-t1", "-c32", "-d2s", "-s", "loadtest/overhead/wrk_post.lua", url], env=env, capture_output=True)
        time.sleep(0.2)
        r0 = gw.metric("prefixgate_requests_total"); c0 = int(mc.read_text())
        subprocess.run([find_tool("wrk"), "-t1", "-c32", "-d4s", "-s", "loadtest/overhead/wrk_post.lua", url], env=env, capture_output=True)
        time.sleep(0.2)
        c1 = int(mc.read_text()); r1 = gw.metric("prefixgate_requests_total")
        print(f"{label}: {(c1 - c0) / (r1 - r0 - 1):.2f} allocations per request over {r1 - r0 - 1:.0f} requests (wrk -c32, prefix-cache, 2 KiB body)")
    finally:
        gw.stop()
up.stop()
