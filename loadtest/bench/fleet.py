"""A fleet of llama.cpp-dialect engine pods for the real-engine benchmark (real.py): real llama-servers
(harness.LlamaServer) or simulated pods speaking llama.cpp's dialect with calibrated constants (harness.Sim with
`--engine-dialect llamacpp`), the same model name for both, each listed in the pods file as `engine: llamacpp`.

Besides starting and stopping them: the engines' own counters (llamacpp:* series), a sampler of the pods' queue
(requests_deferred: requests waiting for a free slot) during a run, the prompts' engine token ids (asked after the
run, from one pod: `/apply-template` then `/tokenize`, as the engine tokenizes a chat request), and what the
gateway says about them (retries, stale connections, scrape errors, the prediction audit, bytes per engine token).
"""
import concurrent.futures
import hashlib
import json
import os
import threading
import time
from pathlib import Path

from bench.replicas import counter_sum, histogram_buckets, histogram_quantile
from harness import Gateway, LlamaServer, Sim, request, wait_until

LLAMA, SIM = "llama", "sim"
ENGINE_SERIES = {"llamacpp:prompt_tokens_total": "prompt_computed", "llamacpp:prompt_tokens_cached_total": "cached",
                 "llamacpp:n_decode_total": "decodes", "llamacpp:tokens_predicted_total": "predicted"}


def llama_flags(params):
    """llama-server flags beyond the harness's for a workload's FleetParams (--cache-ram when not the default)."""
    return [] if params.cache_ram_mib < 0 else ["--cache-ram", str(params.cache_ram_mib)]


class Fleet:
    """`count` pods of `kind` (llama or sim) named `label`-pod-i. llama: each `-t 1 --parallel P -c CTX` plus
    llama_flags; sim: `sim_flags` (calibrate.sim_flags) at time scale 1 (real time)."""

    def __init__(self, kind, tmp, label, count, params, sim_flags=(), model="llama-model", model_path=None):
        self.kind, self.params, self.model = kind, params, model
        names = [f"{label}-pod-{i}" for i in range(count)]
        if kind == LLAMA:
            def start(name):
                return LlamaServer(tmp, name=name, model=model, model_path=model_path, parallel=params.parallel,
                                   ctx=params.ctx, threads=1, extra=llama_flags(params))
        else:
            # The measured contention (calibrate.shared_cpu_flags): the fleet's pods share one file, as the real
            # pods share the machine's cores.
            shared = (["--shared-cpu", str(Path(tmp) / f"{label}.cpu")] if "--shared-cpu-slowdown" in sim_flags
                      else [])

            def start(name):
                return Sim(tmp, name, "--engine-dialect", "llamacpp", "--log-level", "warn", *sim_flags, *shared,
                           model=model, time_scale="1")
        self.pods = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
            futures = [pool.submit(start, name) for name in names]
            errors = []
            for future in futures:
                try:
                    self.pods.append(future.result())
                except Exception as exc:   # noqa: BLE001  (stop the others, then report)
                    errors.append(exc)
        if errors:
            self.stop()
            raise errors[0]

    def entries(self):
        """Pods file entries: each pod as `engine: llamacpp`."""
        out = []
        for pod in self.pods:
            entry = pod.pod_entry()
            entry["engine"] = "llamacpp"
            out.append(entry)
        return out

    def ports(self):
        return [pod.port for pod in self.pods]

    def cpu_seconds(self):
        """{pod name: CPU seconds it used so far} (its process: llama-server's compute and HTTP threads)."""
        return {pod.name: process_cpu_seconds(pod.proc.pid) for pod in self.pods}

    def dead(self):
        """'name exited with N' for each pod no longer running."""
        return [f"{getattr(p, 'name', '?')} exited with {p.proc.returncode}" for p in self.pods
                if p.proc.poll() is not None]

    def stop(self):
        for pod in self.pods:
            pod.stop()


def process_cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics_text(port, timeout=5):
    status, _, body = request("127.0.0.1", port, "GET", "/metrics", timeout=timeout)
    return body.decode() if status == 200 else ""


def parse_series(text, names):
    """{name: value} of unlabelled series `names` in a Prometheus page (llama.cpp's has no labels)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, _, value = line.partition(" ")
        if name in names:
            try:
                out[name] = float(value.split()[0])
            except ValueError:
                pass
    return out


def engine_counters(ports):
    """The pods' llamacpp counters summed: {"prompt_computed", "cached", "decodes", "predicted"}; None when a pod does
    not answer."""
    total = dict.fromkeys(ENGINE_SERIES.values(), 0.0)
    for port in ports:
        try:
            values = parse_series(metrics_text(port), ENGINE_SERIES)
        except OSError:
            return None
        for name, key in ENGINE_SERIES.items():
            total[key] += values.get(name, 0.0)
    return total


def engine_hit_ratio(counters):
    """The engines' own hit ratio: cached / (computed + cached) prompt tokens (llama.cpp counts the computed ones in
    prompt_tokens_total, cached ones apart)."""
    if not counters:
        return None
    seen = counters["prompt_computed"] + counters["cached"]
    return counters["cached"] / seen if seen else None


class QueueSampler:
    """Samples every pod's llamacpp:requests_deferred and requests_processing every `interval_s` in a thread, for at
    most `max_s` (bounded): the peak and mean deferred per pod tell whether pods queued (more requests than slots)."""

    NAMES = ("llamacpp:requests_deferred", "llamacpp:requests_processing")

    def __init__(self, ports, interval_s=0.5, max_s=900.0):
        self.ports, self.interval_s, self.max_s = ports, interval_s, max_s
        self.samples = []   # [(t, [deferred per pod], [processing per pod])]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def _run(self):
        start = time.monotonic()
        while not self._stop.is_set() and time.monotonic() - start < self.max_s:
            deferred, processing = [], []
            for port in self.ports:
                try:
                    values = parse_series(metrics_text(port, timeout=2), self.NAMES)
                except OSError:
                    values = {}
                deferred.append(values.get(self.NAMES[0], 0.0))
                processing.append(values.get(self.NAMES[1], 0.0))
            self.samples.append((time.monotonic() - start, deferred, processing))
            self._stop.wait(self.interval_s)

    def summary(self):
        """{"deferred_max": the most requests waiting at one pod, "deferred_mean": mean over samples of the fleet's
        waiting requests, "deferred_samples": samples with any waiting / samples, "processing_mean": mean requests
        being served over the fleet}."""
        if not self.samples:
            return {"deferred_max": None, "deferred_mean": None, "deferred_share": None, "processing_mean": None}
        n = len(self.samples)
        return {"deferred_max": max(max(d, default=0.0) for _, d, _ in self.samples),
                "deferred_mean": sum(sum(d) for _, d, _ in self.samples) / n,
                "deferred_share": sum(1 for _, d, _ in self.samples if sum(d) > 0) / n,
                "processing_mean": sum(sum(p) for _, _, p in self.samples) / n}


class Tokenizer:
    """Engine token ids of chat bodies, asked of a pod as the engine itself tokenizes a chat request:
    POST /apply-template {"messages"} -> {"prompt"}, then POST /tokenize {"content": prompt, "add_special": true,
    "parse_special": true}. Answers are cached per fleet kind and messages (a benchmark sends the same prompts to
    every strategy)."""

    def __init__(self):
        self.cache = {}
        self.asked = 0

    def tokens(self, kind, port, body):
        messages = json.loads(body)["messages"]
        key = (kind, hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest())
        if key not in self.cache:
            self.asked += 1
            prompt = _json(port, "/apply-template", {"messages": messages})["prompt"]
            self.cache[key] = _json(port, "/tokenize", {"content": prompt, "add_special": True,
                                                        "parse_special": True})["tokens"]
        return self.cache[key]


def _json(port, path, body):
    status, _, data = request("127.0.0.1", port, "POST", path, json.dumps(body), timeout=30)
    if status != 200:
        raise RuntimeError(f"{path}: HTTP {status}: {data[:200]!r}")
    return json.loads(data)


def start_gateway(tmp, fleet, routing, seed, label, threads=1):
    """A prefixgate in front of the fleet (log_level warn, random_seed), once every pod is ready and its slots and
    context are known (llama.cpp's /props: the capacity the gateway's ledger uses)."""
    config = {"routing": routing, "log_level": "warn", "threads": threads, "random_seed": seed}
    gateway = Gateway(tmp, fleet.entries(), config=config, name=f"gateway-{label}")
    try:
        wait_until(lambda: all(p["ready"] and (p.get("engine_metrics") or {}).get("slots") for p in gateway.debug_pods()),
                   timeout=15, what="every pod ready with its slots known")
    except BaseException:
        gateway.stop()
        raise
    return gateway


def gateway_view(gateway, texts):
    """Row fields from the gateway's /metrics (texts: its pages) and /debug/pods: retries, stale connections by stage,
    scrape errors by reason, remote tokenizer outcomes and latency (p50, p90: its histogram), per pod the prediction
    audit and whether it saw a host prompt cache, per model the learned bytes per engine token."""
    out = {"retries": int(counter_sum(texts, "prefixgate_retries_total") or 0),
           "stale_detected": int(counter_sum(texts, "prefixgate_upstream_stale_connections_total", stage="detected")
                                 or 0),
           "stale_sent": int(counter_sum(texts, "prefixgate_upstream_stale_connections_total", stage="sent") or 0),
           "scrape_errors": int(counter_sum(texts, "prefixgate_engine_scrape_errors_total") or 0),
           "tokenizer": {outcome: int(counter_sum(texts, "prefixgate_remote_tokenizer_requests_total",
                                                  outcome=outcome) or 0)
                         for outcome in ("hit", "miss", "error", "timeout", "no_pod", "unsupported")}}
    buckets = histogram_buckets(texts, "prefixgate_remote_tokenizer_seconds")
    out["tokenizer_p50_s"] = histogram_quantile(buckets, 0.5)
    out["tokenizer_p90_s"] = histogram_quantile(buckets, 0.9)
    try:
        debug = json.loads(gateway.admin("GET", "/debug/pods")[2])
    except (OSError, ValueError):
        return out
    pods = debug.get("pods", [])
    out["pod_prediction"] = {p["name"].rsplit("-", 1)[-1]: (p.get("prediction") or {}).get("accuracy") for p in pods}
    for key in ("predicted_tokens", "engine_cached_tokens", "over_predicted_tokens", "under_predicted_tokens"):
        out[key] = sum((p.get("prediction") or {}).get(key, 0) or 0 for p in pods)
    # What the gateway learned each llama.cpp pod keeps beyond its slots (unknown, host_cache, slots_only).
    out["slot_cache"] = {p["name"].rsplit("-", 1)[-1]: (p.get("engine_metrics") or {}).get("slot_cache") for p in pods}
    out["host_prompt_cache"] = sorted(k for k, v in out["slot_cache"].items() if v == "host_cache")
    out["scrape_errors_by_reason"] = {}
    for p in pods:
        for reason, n in ((p.get("engine_metrics") or {}).get("scrape_errors") or {}).items():
            out["scrape_errors_by_reason"][reason] = out["scrape_errors_by_reason"].get(reason, 0) + n
    out["kv_capacity_tokens"] = sorted({p.get("kv_capacity_tokens") for p in pods}, key=str)
    out["bytes_per_engine_token"] = {m: v.get("bytes_per_engine_token") for m, v in
                                     (debug.get("models") or {}).items()}
    return out
