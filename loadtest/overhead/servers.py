"""The processes of the proxy-overhead benchmark: the upstreams (a static nginx and two engine simulators), and the
proxies in front of them (nginx, HAProxy, prefixgate with each strategy), all on loopback.

Two upstream routes:
- static: one nginx (one worker) answering every POST with one fixed, small chat completion (`return 200`): the
  fastest upstream there is, so the proxy in front is what is measured. It listens on PODS ports, the simulated
  pods: nginx and HAProxy balance over them round robin, prefixgate has them in its pods file;
- stream: sse_probe.py serve: 500 SSE events one --stream-gap-ms apart, each carrying the time it was written.

Every proxy gets the same number of event loops (`loops`, 1 by default): nginx `worker_processes`, HAProxy
`nbthread`, prefixgate `threads`.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from string import Template

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from harness import Gateway, Process, free_port, wait_until  # noqa: E402

ROUTES = ("static", "stream")
MODEL = "sim-model"
PODS = 8
# usage.prompt_tokens of the static completion. It also carries prompt_tokens_details.cached_tokens (0), so
# prefixgate's prediction audit counts every prefix-cache response: predicted tokens / (responses x this) is the
# mean share of the prompt the router matched.
PROMPT_TOKENS = 1000


def find_tool(name):
    """The path of a Debian tool, also looking in /usr/sbin (not on a normal user's PATH); None when absent."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/sbin", "/usr/local/sbin"):
        path = Path(folder) / name
        if path.exists():
            return str(path)
    return None


def missing_tools():
    return [name for name in ("nginx", "haproxy", "wrk") if find_tool(name) is None]


def wait_for_port(port, proc, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s")


def _stat(pid):
    """(ppid, user + system CPU seconds) of a process from /proc, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid):
    """The direct children of a process (nginx's workers)."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = _stat(entry.name)
            if info and info[0] == pid:
                children.append(int(entry.name))
    return children


def cpu_split(pid):
    """(user, system) CPU seconds used so far by a process (all threads) and its direct children."""
    user = system = 0.0
    for p in [pid, *child_pids(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        user += int(fields[11]) / os.sysconf("SC_CLK_TCK")
        system += int(fields[12]) / os.sysconf("SC_CLK_TCK")
    return user, system


def cpu_seconds(pid):
    """User + system CPU seconds used so far by a process (all threads) and its direct children."""
    return sum((_stat(p) or (0, 0.0))[1] for p in [pid, *child_pids(pid)])


def process_shape(pid):
    """{"children", "threads"} of a process from /proc: its direct children (nginx's workers) and the threads of
    it and them, to show in the report that each proxy ran as configured."""
    children = child_pids(pid)
    threads = 0
    for p in [pid, *children]:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                threads += int(line.split()[1])
    return {"children": len(children), "threads": threads}


def static_completion(prompt_tokens=PROMPT_TOKENS):
    """The fixed chat completion body the static upstream returns (no single quotes: it sits in nginx's '...')."""
    return json.dumps({
        "id": "chatcmpl-static", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "The static upstream answers at once."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 8, "total_tokens": prompt_tokens + 8,
                  "prompt_tokens_details": {"cached_tokens": 0}},
    }, separators=(",", ":"))


class Daemon:
    """nginx or HAProxy run in the foreground from a filled-in template; stopped with SIGTERM."""

    def __init__(self, name, args, conf_template, conf_path, values, ports):
        text = Template((HERE / conf_template).read_text()).substitute(values)
        Path(conf_path).write_text(text)
        self.name = name
        self.log_path = Path(conf_path).with_suffix(".log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            for port in ports:
                wait_for_port(port, self.proc, name)
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}: {self.log_path.read_text(errors='replace')[-1500:]}") from None

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def static_upstream(work_dir, pod_ports):
    """The static route's upstream: one nginx worker answering every POST on each of `pod_ports` (the pods) with
    the fixed completion; its config, logs and body folder in `work_dir`."""
    d = Path(work_dir)
    (d / "upstream-body").mkdir(parents=True, exist_ok=True)
    listens = "\n".join(f"        listen 127.0.0.1:{port} backlog=4096;" for port in pod_ports)
    return Daemon("nginx (static upstream)", [find_tool("nginx"), "-p", str(d), "-c", str(d / "upstream.conf"),
                                              "-g", "daemon off;"],
                  "nginx_upstream.conf", d / "upstream.conf",
                  {"dir": d, "listens": listens, "body": static_completion()}, pod_ports)


def nginx_proxy(work_dir, pod_ports, stream_port, loops, launcher=(), directives="daemon off;"):
    """nginx as the proxy under test (nginx_proxy.conf: `loops` workers, the static route round robin over
    `pod_ports`, the stream route to `stream_port`), run under `launcher` with the `-g` `directives`; returns
    (Daemon, {route: port it listens on})."""
    d = Path(work_dir)
    for sub in ("proxy-body", "proxy-temp"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    listen = {route: free_port() for route in ROUTES}
    values = {"dir": d, "stream_port": stream_port, "loops": loops,
              "static_servers": "\n".join(f"        server 127.0.0.1:{port};" for port in pod_ports),
              **{f"listen_{route}": port for route, port in listen.items()}}
    daemon = Daemon("nginx (proxy)", [*launcher, find_tool("nginx"), "-p", str(d), "-c", str(d / "proxy.conf"), "-g",
                                      directives], "nginx_proxy.conf", d / "proxy.conf", values, listen.values())
    return daemon, listen


class Fleet:
    """Starts every upstream and proxy; `url(target, route)` is where to send; `gateways[target]` is prefixgate's
    static-route gateway (its /metrics); `stop()` ends them all."""

    def __init__(self, work_dir, loops=1, stream_gap_ms=1.0):
        self.dir = Path(work_dir)
        self.started, self.ports, self.pids, self.gateways = [], {}, {}, {}
        try:
            self._start(loops, stream_gap_ms)
        except BaseException:
            try:
                self.stop()
            except Exception:  # the start-up failure is the one to report
                pass
            raise

    def _start(self, loops, stream_gap_ms):
        d = self.dir
        haproxy = find_tool("haproxy")
        pod_ports = [free_port() for _ in range(PODS)]
        static_port = pod_ports[0]   # direct goes to the first pod
        upstream = static_upstream(d, pod_ports)
        self.started.append(upstream)
        stream = Process([sys.executable, str(HERE / "sse_probe.py"), "serve", "--port", "0", "--gap-ms",
                          f"{stream_gap_ms:g}"], d / "stream-upstream.log")
        stream.name = "sse_probe.py serve"
        self.started.append(stream)
        upstreams = {"static": static_port, "stream": stream.port}
        self.ports["direct"] = dict(upstreams)
        self.pids["direct"] = upstream.pid
        for proxy in ("nginx", "haproxy"):
            if proxy == "nginx":
                daemon, listen = nginx_proxy(d, pod_ports, stream.port, loops)
            else:
                listen = {route: free_port() for route in ROUTES}
                servers = "\n".join(f"    server pod-{i} 127.0.0.1:{port} maxconn 2000"
                                     for i, port in enumerate(pod_ports))
                conf_values = {"dir": d, "stream_port": stream.port, "loops": loops, "static_servers": servers,
                               **{f"listen_{route}": port for route, port in listen.items()}}
                daemon = Daemon("haproxy", [haproxy, "-db", "-f", str(d / "haproxy.cfg")], "haproxy.cfg",
                                d / "haproxy.cfg", conf_values, listen.values())
            self.started.append(daemon)
            self.ports[proxy] = listen
            self.pids[proxy] = daemon.pid
        for strategy in ("random", "prefix-cache"):
            target = f"prefixgate-{strategy}"
            self.ports[target] = {}
            for route in ROUTES:
                ports = pod_ports if route == "static" else [stream.port]
                pods = [{"name": f"{route}-pod-{i}", "address": f"127.0.0.1:{port}", "models": [MODEL]}
                        for i, port in enumerate(ports)]
                # The gateway's defaults for what runs on a clock (health checks, scrapes, pods-file polls: the
                # test harness polls the file every 100 ms to see edits quickly, 5 times the default).
                gateway = Gateway(d, pods, name=f"{target}-{route}", config={
                    "routing": {"strategy": strategy}, "threads": loops, "log_level": "warn",
                    "health_check": {"interval_ms": 1000, "timeout_ms": 1000},
                    "discovery": {"file_poll_interval_ms": 500}})
                self.started.append(gateway)
                wait_until(lambda: len([p for p in gateway.debug_pods() if p["ready"]]) == len(pods),
                           what=f"{target}-{route}: every pod ready")
                self.ports[target][route] = gateway.port
                if route == "static":
                    self.pids[target] = gateway.proc.pid
                    self.gateways[target] = gateway

    def url(self, target, route):
        return f"http://127.0.0.1:{self.ports[target][route]}/v1/chat/completions"

    def stop(self):
        """Stops every process; then raises the first failure (a sanitizer report in a log, a hung child)."""
        failures = []
        for process in reversed(self.started):
            try:
                process.stop()
            except Exception as exc:  # keep stopping the others first
                failures.append(exc)
        self.started.clear()
        if failures:
            raise failures[0]
