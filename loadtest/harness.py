"""Starting the real prefixgate and prefixgate-engine-sim binaries (and llama.cpp's llama-server, Redis) on loopback,
and talking HTTP to them."""
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GATEWAY_BIN = os.environ.get("PREFIXGATE_BIN", str(ROOT / "build" / "prefixgate"))
SIM_BIN = os.environ.get("PREFIXGATE_SIM_BIN", str(ROOT / "build" / "loadtest" / "prefixgate-engine-sim"))
REDIS_BIN = os.environ.get("PREFIXGATE_REDIS_BIN", "/usr/bin/redis-server")
LLAMA_DIR = ROOT / "tools" / "llama"
LLAMA_SERVER_BIN = os.environ.get("PREFIXGATE_LLAMA_SERVER_BIN", str(LLAMA_DIR / "bin" / "llama-server"))
DEBIAN_PYTHON = "/usr/bin/python3"   # tools/llama/make_model.py needs Debian's numpy
START_TIMEOUT_S = 20
LLAMA_START_TIMEOUT_S = 60           # loading the model and warming up, on a busy 2-core machine


def wait_until(predicate, timeout=10.0, interval=0.02, what="condition"):
    """Polls `predicate` until it returns a truthy value; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port():
    """A loopback port free now (bound, then closed), for servers that cannot be told to bind port 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settled(read, timeout_s=3.0, interval_s=0.05):
    """read() once two reads `interval_s` apart agree (bounded by timeout_s; the last read then): a gateway counts a
    response just after writing its last byte, so /metrics read as the client finishes can miss the last few."""
    value, deadline = read(), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(interval_s)
        again = read()
        if again == value:
            break
        value = again
    return value


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer")


def sanitized(binary):
    """True when `binary` links a sanitizer runtime (scripts/build.sh asan or tsan)."""
    libs = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return any(lib in libs for lib in ("libasan", "libubsan", "libtsan"))


def check_sanitizer_reports(log_text, where):
    for marker in SANITIZER_MARKERS:
        if marker in log_text:
            start = log_text.index(marker)
            raise AssertionError(f"sanitizer report in {where}:\n{log_text[max(0, start - 200):start + 3000]}")


def terminate(proc, log, timeout=10):
    """SIGTERM, up to `timeout` s for the process to exit, then SIGKILL; closes its log file."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if not log.closed:
        log.close()


class Process:
    """A child process whose stdout announces `listening on HOST:PORT` lines; stderr goes to a log file."""

    def __init__(self, args, log_path, expect_lines=1, env=None):
        self.log_path = Path(log_path)
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL, env=env)
        self.ports = []
        self.startup_lines = []   # every stdout line up to the last "listening on"
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(self.ports) < expect_lines:
            line = self.proc.stdout.readline().decode()
            if not line:
                raise RuntimeError(f"{args[0]} exited before listening: {self.read_log()[-2000:]}")
            self.startup_lines.append(line.strip())
            if "listening on" in line:
                self.ports.append(int(line.strip().rsplit(":", 1)[1]))
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start in time")
        # Keep draining stdout so the child never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    @property
    def port(self):
        return self.ports[0]

    def read_log(self):
        return self.log_path.read_text(errors="replace")

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout=10):
        """SIGTERM, wait, and fail if a sanitizer (ASan, UBSan, LSan) reported anything in the log."""
        terminate(self.proc, self.log, timeout)
        check_sanitizer_reports(self.read_log(), self.log_path)


class Sim(Process):
    """A simulated engine pod. kv_events=True publishes its KV cache events (ports given, or free ones) and puts
    the endpoints in its pod entry; port= fixes the HTTP port (to restart a pod where it was)."""

    def __init__(self, tmp_path, name, *extra, model="sim-model", time_scale="0.05", kv_events=False, port=0,
                 kv_ports=(0, 0)):
        args = [SIM_BIN, "--port", str(port), "--name", name, "--model", model, "--time-scale", time_scale, *extra]
        if kv_events:
            args += ["--kv-events", f"tcp://127.0.0.1:{kv_ports[0]}", "--kv-replay", f"tcp://127.0.0.1:{kv_ports[1]}"]
        super().__init__(args, Path(tmp_path) / f"{name}.log")
        self.name = name
        self.model = model
        self.kv = {line.split(" on ", 1)[0]: line.split(" on ", 1)[1]
                   for line in self.startup_lines if line.startswith("kv ")}

    def pod_entry(self):
        entry = {"name": self.name, "address": f"127.0.0.1:{self.port}", "models": [self.model]}
        if "kv events" in self.kv:
            entry["kv_events"] = self.kv["kv events"]
            entry["kv_replay"] = self.kv["kv replay"]
        return entry

    def requests(self):
        status, _, body = request("127.0.0.1", self.port, "GET", "/sim/requests")
        assert status == 200
        return json.loads(body)

    def completions_seen(self):
        return [r for r in self.requests() if r["path"].startswith("/v1/")]

    def fault(self, **faults):
        status, _, _ = request("127.0.0.1", self.port, "POST", "/sim/fault", json.dumps(faults))
        assert status == 200


def write_pods(path, sims):
    """Writes a pods file atomically (rename), so the gateway never reads a half-written one."""
    import yaml

    tmp = Path(str(path) + ".tmp")
    pods = [s.pod_entry() if hasattr(s, "pod_entry") else s for s in sims]   # Sim, LlamaServer or a plain dict
    tmp.write_text(yaml.safe_dump({"pods": pods}))
    os.replace(tmp, path)


class Gateway(Process):
    def __init__(self, tmp_path, sims, config=None, env=None, name="gateway", listeners=2, launcher=(),
                 wait_ready=True):
        """`listeners`: the `listening on` lines to wait for (3 with health_listen set: its port is ports[2]).
        `launcher`: a command the gateway runs under (e.g. ["prlimit", "--nofile=64:64"]).
        A `config` with discovery.kubernetes replaces the pods file; `wait_ready`: wait for /readyz."""
        import yaml

        tmp_path = Path(tmp_path)
        self.pods_file = tmp_path / f"{name}-pods.yaml"
        write_pods(self.pods_file, sims)
        cfg = {
            "listen": "127.0.0.1:0",
            "admin_listen": "127.0.0.1:0",
            "threads": 2,
            "discovery": {"file": self.pods_file.name, "file_poll_interval_ms": 100},
            "routing": {"strategy": "least-request"},
            "health_check": {"interval_ms": 200, "timeout_ms": 500},
        }
        for key, value in (config or {}).items():
            if isinstance(value, dict) and isinstance(cfg.get(key), dict):
                cfg[key] = {**cfg[key], **value}
            else:
                cfg[key] = value
        if "kubernetes" in cfg["discovery"]:
            del cfg["discovery"]["file"]
        self.config_file = tmp_path / f"{name}.yaml"
        self.config_file.write_text(yaml.safe_dump(cfg))
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("AIBRIX_", "ROUTING_ALGORITHM"))}
        full_env.update(env or {})
        args = [*launcher, GATEWAY_BIN, "--config", str(self.config_file)]
        super().__init__(args, tmp_path / f"{name}.log", expect_lines=listeners, env=full_env)
        self.admin_port = self.ports[1]
        if wait_ready:
            wait_until(lambda: self.admin("GET", "/readyz")[0] == 200, what="gateway /readyz")
            # /readyz needs one ready pod; a test's first request may be for another pod's model, so wait for every
            # engine it was given (where /debug/pods is open: an admin token closes it).
            names = {s.name for s in sims if isinstance(s, (Sim, LlamaServer))}
            if names and self.admin("GET", "/debug/pods")[0] == 200:
                wait_until(lambda: names <= {p["name"] for p in self.debug_pods() if p["ready"]},
                           what=f"pods {sorted(names)} ready")

    def call(self, method, path, body=None, headers=None, timeout=30):
        return request("127.0.0.1", self.port, method, path, body, headers, timeout)

    def admin(self, method, path, body=None, headers=None):
        return request("127.0.0.1", self.admin_port, method, path, body, headers)

    def chat(self, content, max_tokens=4, stream=False, headers=None, model="sim-model", **extra):
        body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "stream": stream, **extra}
        return self.call("POST", "/v1/chat/completions", json.dumps(body), headers)

    def metrics_text(self):
        status, _, body = self.admin("GET", "/metrics")
        assert status == 200
        return body.decode()

    def metric(self, name, **labels):
        """The sum of /metrics samples called `name` (e.g. a counter's `..._total`) whose labels include `labels`."""
        from prometheus_client.parser import text_string_to_metric_families

        total = 0.0
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def debug_pods(self):
        return json.loads(self.admin("GET", "/debug/pods")[2])["pods"]


def llama_available():
    """True when the llama-server binary (scripts/fetch_llama.sh, or PREFIXGATE_LLAMA_SERVER_BIN) is there."""
    return os.access(LLAMA_SERVER_BIN, os.X_OK)


def llama_model(cache_dir=None, **shape):
    """The path of a random-weight llama GGUF from tools/llama/make_model.py, written once and then reused: it is
    cached in `cache_dir` (default tools/llama/models/) under a name made of the generator's arguments (`shape`:
    seed, embd, layers, heads, ff, ctx; make_model.py's defaults for the rest) and a hash of make_model.py and the
    vocabulary it copies, so a changed generator or llama.cpp writes a new file. make_model.py writes atomically, so
    concurrent sessions are safe."""
    generator = LLAMA_DIR / "make_model.py"
    vocab = LLAMA_DIR / "src" / "models" / "ggml-vocab-llama-spm.gguf"   # absent: make_model.py says what to run
    unknown = set(shape) - {"seed", "embd", "layers", "heads", "ff", "ctx"}
    if unknown:
        raise ValueError(f"llama_model: unknown arguments {sorted(unknown)}")
    digest = hashlib.sha256(generator.read_bytes() + (vocab.read_bytes() if vocab.is_file() else b"")).hexdigest()[:12]
    label = "-".join(f"{k}{shape[k]}" for k in sorted(shape)) or "default"
    path = Path(cache_dir or LLAMA_DIR / "models") / f"random-{label}-{digest}.gguf"
    if not path.is_file():
        args = [DEBIAN_PYTHON, str(generator), "--out", str(path)]
        for key in sorted(shape):
            args += [f"--{key}", str(shape[key])]
        result = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"{generator.name} failed ({result.returncode}): {result.stderr[-2000:]}")
    return path


class LlamaServer:
    """llama.cpp's llama-server (scripts/fetch_llama.sh) on loopback, serving `model_path` (default: llama_model())
    under the name `model`, with `parallel` slots sharing `ctx` tokens of KV cache (-c is the total: each slot gets
    ctx / parallel unless `extra` has --kv-unified), on `threads` CPU threads. `extra`: more llama-server flags (e.g.
    "--cache-ram", "0"). It binds port 0 (this llama-server can) and reads the port from its log, which goes to
    `tmp_path`/`name`.log; `port=` fixes it instead (to restart a pod where it was). Ready once GET /health is 200."""

    def __init__(self, tmp_path, name="llama", model_path=None, model="llama-model", parallel=1, ctx=8192,
                 threads=1, extra=(), port=0):
        if not llama_available():
            raise RuntimeError(f"llama-server not found at {LLAMA_SERVER_BIN}: run scripts/fetch_llama.sh "
                               "(scripts/setup.sh runs it), or set PREFIXGATE_LLAMA_SERVER_BIN")
        self.name = name
        self.model = model
        self.model_path = Path(model_path or llama_model())
        self.log_path = Path(tmp_path) / f"{name}.log"
        self.args = [LLAMA_SERVER_BIN, "-m", str(self.model_path), "-a", model, "--host", "127.0.0.1",
                     "--port", str(port), "-t", str(threads), "--parallel", str(parallel), "-c", str(ctx),
                     "--metrics", "--slots", "--props", "--no-webui", "--log-colors", "off", *map(str, extra)]
        # LLAMA_ARG_* variables set llama-server's options: the caller's environment must not change the test's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env)
        try:
            self.port = wait_until(self._listening_port, timeout=LLAMA_START_TIMEOUT_S,
                                   what=f"{name} listening (log: {self.log_path})")
            wait_until(lambda: self._get_status("/health") == 200, timeout=LLAMA_START_TIMEOUT_S,
                       what=f"{name} /health answering 200")
        except BaseException:
            self.stop()
            raise

    def _listening_port(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {self.read_log()[-3000:]}")
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.read_log())
        return int(m.group(1)) if m else None

    def _get_status(self, path):
        try:
            return self.call("GET", path, timeout=5)[0]
        except OSError:
            return None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def pod_entry(self):
        return {"name": self.name, "address": self.address, "models": [self.model], "engine": "llamacpp"}

    def read_log(self):
        return self.log_path.read_text(errors="replace")

    def call(self, method, path, body=None, headers=None, timeout=60):
        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        return request("127.0.0.1", self.port, method, path, body, headers, timeout)

    def json(self, method, path, body=None):
        """The JSON answer of a request that must succeed."""
        status, _, data = self.call(method, path, body)
        assert status == 200, f"{method} {path}: {status} {data[:500]!r}"
        return json.loads(data)

    def chat(self, content, max_tokens=4, stream=False, **extra):
        body = {"model": self.model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "stream": stream, **extra}
        return self.call("POST", "/v1/chat/completions", body)

    def metrics_text(self):
        status, _, data = self.call("GET", "/metrics")
        assert status == 200, status
        return data.decode()

    def stop(self, timeout=10):
        """SIGTERM, wait, then SIGKILL."""
        terminate(self.proc, self.log, timeout)


class RedisError(Exception):
    """An error reply (`-ERR ...`) from Redis."""


class RedisServer:
    """A real redis-server on a free loopback port, without persistence, logging to the tmp folder; for the
    replicas' state sync. Redis cannot bind port 0, so the port is picked by free_port() and kept across
    restart(). command() speaks RESP on a fresh connection each time (there is no redis package here)."""

    def __init__(self, tmp_path, name="redis"):
        self.tmp_path = Path(tmp_path)
        self.name = name
        self.port = free_port()
        self.log_path = self.tmp_path / f"{name}.log"
        self.proc = None
        self._sleepers = []   # the connections of sleep(), closed by kill() and stop()
        self._start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def _start(self):
        args = [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--enable-debug-command", "local", "--dir", str(self.tmp_path), "--logfile", str(self.log_path)]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_until(self._answers_ping, timeout=START_TIMEOUT_S, what=f"{self.name} answering PING")

    def _answers_ping(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {self.read_log()[-2000:]}")
        try:
            return self.command("PING", timeout=1) == "PONG"
        except (OSError, RedisError):   # not listening yet, or still loading
            return False

    def read_log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def command(self, *args, timeout=5):
        """Sends one command; returns the reply: str (status), int, bytes (bulk), list or None. An error reply
        raises RedisError."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(_resp_command(args))
            return _resp_reply(sock.makefile("rb"))

    def sleep(self, seconds):
        """Makes Redis stall for `seconds` (DEBUG SLEEP) and returns without waiting: a slow Redis."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        sock.sendall(_resp_command(("DEBUG", "SLEEP", f"{seconds:g}")))
        self._sleepers.append(sock)

    def used_memory(self):
        """used_memory (bytes) from INFO memory."""
        info = self.command("INFO", "memory").decode()
        return int(next(line.split(":", 1)[1] for line in info.splitlines() if line.startswith("used_memory:")))

    def kill(self):
        """SIGKILL, as a crashed or evicted Redis: nothing is flushed or answered."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._close_sleepers()

    def restart(self):
        """Kills Redis if it runs and starts a fresh, empty one on the same port."""
        self.kill()
        self._start()

    def stop(self, timeout=10):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_sleepers()

    def _close_sleepers(self):
        for sock in self._sleepers:
            sock.close()
        self._sleepers.clear()


def _resp_command(args):
    """A command as a RESP array of bulk strings."""
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(f"${len(data)}\r\n".encode() + data + b"\r\n")
    return b"".join(out)


def _resp_reply(stream):
    """Reads one RESP2 reply from a binary file object."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise OSError("connection closed by Redis")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else stream.read(size + 2)[:-2]
    if kind == b"*":
        count = int(rest)
        return None if count < 0 else [_resp_reply(stream) for _ in range(count)]
    raise OSError(f"unexpected reply from Redis: {line[:80]!r}")


def request(host, port, method, path, body=None, headers=None, timeout=30):
    """One HTTP request on a fresh connection; returns (status, headers as a lower-cased dict, body bytes)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        res = conn.getresponse()
        data = res.read()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, data
    finally:
        conn.close()


def sse_events(raw):
    """The `data:` payloads of an SSE body, in order."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    return [block[len("data: "):] for block in text.split("\n\n") if block.startswith("data: ")]


def stream_content(raw):
    """The text of a streamed chat or text completion, joined from its chunks."""
    out = []
    for data in sse_events(raw):
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        for choice in chunk.get("choices", []):
            out.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
    return "".join(out)


def read_chunks(res):
    """Reads a chunked HTTP/1.1 body chunk by chunk as it arrives; returns [(arrival time, bytes)]."""
    chunks = []
    while True:
        size_line = res.fp.readline()
        if not size_line:
            break
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            res.fp.readline()
            break
        data = res.fp.read(size)
        res.fp.readline()
        chunks.append((time.monotonic(), data))
    return chunks
