"""One run = one workload x one strategy x one seed: fresh simulated pods (cold caches), a fresh prefixgate in front
of them, or several replicas sharing their state through a fresh Redis (--replicas; or, for the oracle, none: the
load generator routes by asking the pods, see oracle.py), the workload streamed through, the engines' and the
gateways' own counters scraped at the end."""
import json
import re
import subprocess
from pathlib import Path

from bench.loadgen import run_workload
from bench.oracle import OracleRouter
from bench.pd import (BOTH, DEFAULT_KV_TRANSFER_MS_PER_1K, DEFAULT_PREFILL_PODS, base_strategy, fleet_roles,
                      is_pd, pd_notes, prefill_hit_ratio, sim_role_args, with_role)
from bench.replicas import gateway_notes, requests_answered, sync_notes
from bench.textgen import engine_tokens, predicted_reply
from harness import GATEWAY_BIN, SIM_BIN, Gateway, RedisServer, Sim, request, settled, wait_until

ORACLE = "oracle"
# Strategy name -> the gateway's `routing` config. Strategies the gateway offers beyond these are added as they are.
STRATEGIES = {
    "random": {"strategy": "random"},
    "least-request": {"strategy": "least-request"},
    "prefix-cache": {"strategy": "prefix-cache"},
    # The scorers of prefix-cache under their own names (whatever routing.prefix_cache.scorer says).
    "prefix-cache-wait": {"strategy": "prefix-cache-wait"},
    "prefix-cache-blend": {"strategy": "prefix-cache-blend"},
    "prefix-cache-standalone": {"strategy": "prefix-cache-blend", "blend": {"load_balance_weight": 0}},
    # AIBrix's standard mode: the routed blocks of a pod are not capped at its KV capacity (prefix-cache caps them:
    # routing.prefix_cache.capacity_aware is on by default).
    "prefix-cache-uncapped": {"strategy": "prefix-cache", "prefix_cache": {"capacity_aware": False}},
    # KV event sync: the index follows the engines' own cache events (the pods publish them).
    "prefix-cache-kv": {"strategy": "prefix-cache", "prefix_cache": {"kv_event_sync": True}},
    # prefill-cost's cost as a third scorer of the blend, weighed like its load term.
    "prefix-cache-prefill": {"strategy": "prefix-cache-blend", "blend": {"prefill_cost_weight": 4}},
}
# Strategies whose pods publish their KV cache events (and list them in the pods file); their pd- variants too.
KV_EVENT_STRATEGIES = {"prefix-cache-kv"}


class RoleSim(Sim):
    """A simulated pod with a prefill/decode role (bench/pd.py): its `--role` flags, and `role` in its pods-file
    entry; a `both` pod is a plain Sim."""

    def __init__(self, tmp_path, name, *extra, role=BOTH, kv_transfer_ms_per_1k=DEFAULT_KV_TRANSFER_MS_PER_1K,
                 **options):
        super().__init__(tmp_path, name, *extra, *sim_role_args(role, kv_transfer_ms_per_1k), **options)
        self.role = role

    def pod_entry(self):
        return with_role(super().pod_entry(), self.role)


def gateway_strategies(tmp):
    """The strategy names the gateway binary accepts: an unknown name makes `--check` list the valid ones."""
    out = _check_config(tmp, "routing: {strategy: no-such-strategy}\n")
    found = re.search(r"\(valid: ([^)]*)\)", out.stdout + out.stderr)
    return [name.strip() for name in found.group(1).split(",")] if found else []


def gateway_takes_random_seed(tmp):
    """Whether the gateway binary knows the `random_seed` config key (older builds reject it as unknown)."""
    return _check_config(tmp, "random_seed: 1\n").returncode == 0


def state_sync_refusal(tmp):
    """Why the gateway binary refuses `state_sync.enabled` (its --check output), or None when it accepts it."""
    out = _check_config(tmp, "state_sync: {enabled: true, redis: 'redis://127.0.0.1:6379'}\n")
    return None if out.returncode == 0 else (out.stdout + out.stderr).strip()


def pd_refusal(tmp):
    """Why the gateway binary refuses a pods file with prefill and decode pods (its --check output), or None when it
    accepts it (pd-NAME strategies need `role`)."""
    pods = ("pods:\n  - {name: p, address: '127.0.0.1:1', models: [m], role: prefill}\n"
            "  - {name: d, address: '127.0.0.1:2', models: [m], role: decode}\n")
    out = _check_config(tmp, "", pods)
    return None if out.returncode == 0 else (out.stdout + out.stderr).strip()


def _check_config(tmp, extra, pods="pods: []\n"):
    Path(tmp, "probe-pods.yaml").write_text(pods)
    conf = Path(tmp, "probe.yaml")
    conf.write_text("discovery: {file: probe-pods.yaml}\n" + extra)
    return subprocess.run([GATEWAY_BIN, "--config", str(conf), "--check"], capture_output=True, text=True, timeout=30)


def _setting_value(text):
    """A strategy setting given on the command line: an int, a float, true/false, else the text."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


# Settings named `pd.KEY` go to the gateway's `disaggregation.KEY` (gateway_config takes them out of the routing).
PD_SETTING_PREFIX, DISAGGREGATION = "pd.", "_disaggregation"
# Settings named `flow.KEY` go to the gateway's `flow_control.KEY` (issue 27), e.g.
# `least-request:flow.enabled=true`; the workload's own flow_control settings (its classes, max_in_flight_per_pod)
# fill in the keys the strategy does not give (gateway_config).
FLOW_SETTING_PREFIX, FLOW_CONTROL = "flow.", "_flow_control"


def with_settings(specs, name):
    """`NAME:key=value[+key=value]`: the strategy NAME (a named one or the gateway's) with those settings under
    routing.strategies.<its gateway strategy> (e.g. `prefill-cost:prefill_weight=4`, for a sweep), and `pd.KEY`
    ones as the gateway's disaggregation.KEY (`pd-prefix-cache:pd.max_prefill_in_flight=4`). None when NAME is
    unknown or a pair is malformed."""
    base, _, pairs = name.partition(":")
    if base not in specs or specs[base] is None or not pairs:
        return None
    routing = json.loads(json.dumps(specs[base]))   # a deep copy
    strategy = routing["strategy"]
    settings = routing.setdefault("strategies", {}).setdefault(strategy, {})
    for pair in pairs.split("+"):
        key, eq, value = pair.partition("=")
        if not key or not eq:
            return None
        if key.startswith(PD_SETTING_PREFIX):
            routing.setdefault(DISAGGREGATION, {})[key[len(PD_SETTING_PREFIX):]] = _setting_value(value)
        elif key.startswith(FLOW_SETTING_PREFIX):
            routing.setdefault(FLOW_CONTROL, {})[key[len(FLOW_SETTING_PREFIX):]] = _setting_value(value)
        else:
            settings[key] = _setting_value(value)
    if not settings:
        del routing["strategies"][strategy]
        if not routing["strategies"]:
            del routing["strategies"]
    return routing


def gateway_config(routing, workload_flow=None):
    """The gateway config's `routing`, `disaggregation` and `flow_control` sections of a strategy's routing (see
    with_settings). `workload_flow`: the workload's flow_control settings (Workload.flow_control), under the
    strategy's own `flow.KEY` ones, used only when the strategy enables flow control; a strategy without `flow.`
    settings gets no flow_control section (today's gateway)."""
    routing = dict(routing)
    disaggregation = routing.pop(DISAGGREGATION, None)
    flow = routing.pop(FLOW_CONTROL, None)
    if flow and flow.get("enabled"):
        flow = {**(workload_flow or {}), **flow}
    return {"routing": routing, **({"disaggregation": disaggregation} if disaggregation else {}),
            **({"flow_control": flow} if flow else {})}


def flow_enabled(routing):
    """Whether a strategy's routing turns the gateway's flow control on (`flow.enabled=true`)."""
    return bool(routing and (routing.get(FLOW_CONTROL) or {}).get("enabled"))


def resolve_strategies(text, offered, oracle=True, extra=None, pd=False):
    """The strategies to run: `all` = the named ones (and `extra`: more {name: routing}), any other the gateway
    offers, and the oracle; a name may carry settings (`prefill-cost:prefill_weight=4`, see with_settings). With
    `pd`, `pd-NAME` (settings allowed) is NAME's routing on a disaggregated fleet (bench/pd.py; never in `all`, and
    not for the oracle, which has no gateway)."""
    specs = {**STRATEGIES, **(extra or {})}
    for name in offered:
        specs.setdefault(name, {"strategy": name})
    specs[ORACLE] = None
    names = list(specs) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        head = name.partition(":")[0]
        if pd and is_pd(head) and head not in specs and specs.get(base_strategy(head)) is not None:
            specs[head] = specs[base_strategy(head)]
    for name in names:
        if ":" in name and name not in specs and (routing := with_settings(specs, name)) is not None:
            specs[name] = routing
    if text == "all" and not oracle:
        names.remove(ORACLE)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise SystemExit(f"unknown strategies {unknown}; known: {', '.join(specs)}")
    return [(name, specs[name]) for name in names]


def rotated(items, seed):
    """The run order for a seed: `items` rotated by seed - 1, so over n seeds each strategy runs in each position."""
    shift = (seed - 1) % len(items) if items else 0
    return items[shift:] + items[:shift]


def sim_supports(flag):
    """Whether the simulator binary lists `flag` in its --help (the token-scale and cache-match simulator)."""
    out = subprocess.run([SIM_BIN, "--help"], capture_output=True, text=True, timeout=30)
    return flag in out.stdout


def dead_processes(processes):
    """'name: exit status, last log line' for every process that is no longer running."""
    dead = []
    for proc in processes:
        if proc.proc.poll() is not None:
            tail = proc.read_log().strip().splitlines()[-1:] or ["(empty log)"]
            dead.append(f"{proc.log_path.stem} exited with {proc.proc.returncode}: {tail[0][:200]}")
    return dead


ENGINE_COUNTERS = {"vllm:prefix_cache_hits_total": "hits", "vllm:prefix_cache_queries_total": "queries",
                   "vllm:num_preemptions_total": "preemptions"}


def engine_counters(text):
    """{"hits", "queries", "preemptions"} from one engine's /metrics text (0 where a series is missing)."""
    counters = dict.fromkeys(ENGINE_COUNTERS.values(), 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ENGINE_COUNTERS:
            counters[ENGINE_COUNTERS[name]] += float(line.rsplit(" ", 1)[1])
    return counters


def scrape_engine_pods(sims):
    """Each engine's own counters, in pod order: [{"hits", "queries", "preemptions"}]; None when a pod does not
    answer."""
    out = []
    for sim in sims:
        try:
            status, _, body = request("127.0.0.1", sim.port, "GET", "/metrics", timeout=5)
        except OSError:
            return None
        out.append(engine_counters(body.decode() if status == 200 else ""))
    return out


def sum_counters(per_pod):
    """The per-pod counters summed over the pods; None when a pod did not answer."""
    if per_pod is None:
        return None
    return {key: sum(c[key] for c in per_pod) for key in ENGINE_COUNTERS.values()}


def scrape_engines(sims):
    """The engines' own counters summed over pods: {"hits", "queries", "preemptions"}; None when a pod does not
    answer."""
    return sum_counters(scrape_engine_pods(sims))


def engine_notes(counters):
    """Row fields from the scraped counters: the engines' hit ratio (a cross-check of `usage`, expected equal
    when nothing was preempted: a preempted request is looked up again when rescheduled) and preemptions."""
    if counters is None:
        return {"engine_hit_ratio": None, "preemptions": None}
    queries = counters["queries"]
    return {"engine_hit_ratio": counters["hits"] / queries if queries else None,
            "preemptions": int(counters["preemptions"])}


def prediction_accuracy(gateways):
    """The gateways' prediction audit over all pods (/debug/pods) and replicas: 1 - sum|predicted - engine| / sum
    max(predicted, engine) in cached tokens; None when they audited nothing (strategies that predict no prefix, or
    no gateway)."""
    try:
        pods = [p for gateway in gateways for p in gateway.debug_pods()]
    except (OSError, ValueError):
        return None
    sums = [p.get("prediction") or {} for p in pods]
    responses = sum(s.get("responses", 0) for s in sums)
    if not responses:
        return None
    wrong = sum(s.get("over_predicted_tokens", 0) + s.get("under_predicted_tokens", 0) for s in sums)
    base = sum(s.get("engine_cached_tokens", 0) + s.get("over_predicted_tokens", 0) for s in sums)
    return 1.0 - wrong / base if base else 1.0


def learned_rates(gateways):
    """{pod: its service rates as the first gateway learned them (/debug/pods "rates")}; {} when the gateway binary
    predates them."""
    if not gateways:
        return {}
    return {p["name"].rsplit("-", 1)[-1]: p["rates"] for p in gateways[0].debug_pods() if "rates" in p}


def metrics_texts(gateways):
    """Every gateway's /metrics once the requests they counted stop changing (a response is counted just after its
    last byte, so a read as the client finishes can miss the last); [] when one does not answer."""
    last = {}

    def counted():
        try:
            last["texts"] = [gateway.metrics_text() for gateway in gateways]
        except (OSError, AssertionError):
            last["texts"] = []
        return [requests_answered(text) for text in last["texts"]]

    settled(counted)
    return last["texts"]


def flow_metric_totals(texts):
    """{"dispatched": prefixgate_flow_dispatched_total, "shed:<reason>": prefixgate_flow_shed_total by reason},
    summed over the gateways' /metrics texts and every other label."""
    out = {}
    for text in texts:
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name == "prefixgate_flow_dispatched_total":
                key = "dispatched"
            elif name == "prefixgate_flow_shed_total":
                found = re.search(r'reason="([^"]*)"', line)
                key = f"shed:{found.group(1) if found else '?'}"
            else:
                continue
            out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out


def gateway_figures(gateways, records, redis, time_scale=1.0):
    """Row fields from the gateways' /metrics (summed over the replicas): their counters, the disaggregation
    outcomes and legs (bench/pd.py); with several replicas also the requests each one answered, the state sync
    figures and the Redis's memory at the end."""
    texts = metrics_texts(gateways)
    notes = gateway_notes(texts) | pd_notes(texts, time_scale)
    if len(gateways) > 1:
        notes["replica_requests"] = [requests_answered(t) for t in texts]
        notes.update(sync_notes(texts, sum(1 for r in records if r.ok)))
        notes["redis_used_memory"] = redis.used_memory() if redis is not None else None
    return notes


def start_gateways(tmp, sims, routing, seed, args, seeded_gateway, label, workload_flow=None):
    """args.replicas gateways in front of `sims`, each seeing every pod ready; with several and args.sync, a Redis
    they share their state through. Returns (gateways, the Redis or None)."""
    config = {**gateway_config(routing, workload_flow), "log_level": "warn", "threads": args.gateway_threads}
    redis, gateways = None, []
    try:
        if args.replicas > 1 and args.sync:
            redis = RedisServer(tmp, f"redis-{label}")
            config["state_sync"] = {"enabled": True, "redis": redis.url}
        for i in range(args.replicas):
            if seeded_gateway:   # distinct per replica, as independent pods' would be; replica 0 keeps the seed
                config["random_seed"] = seed + 1000 * i
            name = f"gateway-{label}" + (f"-r{i}" if args.replicas > 1 else "")
            gateways.append(Gateway(tmp, sims, config=dict(config), name=name))
        for gateway in gateways:
            wait_until(lambda: all(p["ready"] for p in gateway.debug_pods()), timeout=10, what="every pod ready")
    except BaseException:
        stop_all([*gateways, redis])
        raise
    return gateways, redis


def fleet_label(roles):
    """"2 prefill + 6 decode" / "8 both": a fleet's roles, for the report."""
    counts = {role: roles.count(role) for role in dict.fromkeys(roles)}
    return " + ".join(f"{n} {role}" for role, n in counts.items())


def stop_all(processes):
    for proc in processes:
        if proc is not None:
            proc.stop()


def run_one(workload, name, routing, seed, args, tmp, seeded_gateway):
    """Fresh pods and gateway(s), one workload through them; returns (records, wall seconds, notes)."""
    sims, gateways, redis = [], [], None
    label = f"{workload.name}-s{seed}-{name}" + (f"-x{args.replicas}" if args.replicas > 1 else "")
    roles = fleet_roles(args.pods, getattr(args, "prefill_pods", DEFAULT_PREFILL_PODS), is_pd(name))
    transfer = getattr(args, "kv_transfer_ms_per_1k_tokens", DEFAULT_KV_TRANSFER_MS_PER_1K)
    try:
        for i, role in enumerate(roles):
            sims.append(RoleSim(tmp, f"{label}-{'engine' if role == BOTH else role}-{i}", "--kv-capacity-tokens",
                                str(workload.kv_capacity_tokens), "--log-level", "warn", *workload.sim_args,
                                role=role, kv_transfer_ms_per_1k=transfer, time_scale=f"{workload.time_scale:g}",
                                kv_events=base_strategy(name).partition(":")[0] in KV_EVENT_STRATEGIES))
        shown = name + (f" x{args.replicas}" if args.replicas > 1 else "")
        options = {"progress": args.progress, "label": f"{workload.name:>17} s{seed} {shown:<23}"}
        if routing is None:   # the oracle
            options["router"] = OracleRouter([(s.name, "127.0.0.1", s.port) for s in sims], seed)
            host, port = "127.0.0.1", 0
        else:
            gateways, redis = start_gateways(tmp, sims, routing, seed, args, seeded_gateway, label,
                                             getattr(workload, "flow_control", None))
            host, port = "127.0.0.1", gateways[0].port
            if len(gateways) > 1:
                options["replicas"] = [("127.0.0.1", g.port) for g in gateways]
        records, wall, notes = run_workload(host, port, workload, workload.time_scale, args.deadline_s,
                                            **options)
        notes["crashed"] = dead_processes([p for p in [*gateways, redis, *sims] if p is not None])
        per_pod = scrape_engine_pods(sims)
        notes.update(engine_notes(sum_counters(per_pod)))
        notes["pd"] = is_pd(name)
        notes["fleet"] = fleet_label(roles)
        notes["prefill_hit_ratio"] = prefill_hit_ratio(per_pod, roles)
        notes["prediction_accuracy"] = prediction_accuracy(gateways)
        notes["learned_rates"] = learned_rates(gateways)
        notes.update(gateway_figures(gateways, records, redis, workload.time_scale) if gateways else {})
        notes["replicas"] = len(gateways)
        if getattr(workload, "flow_control", None) is not None:   # a flow workload (issue 27): flow.py's figures
            notes["flow_control"] = flow_enabled(routing)
            notes["flow_metrics"] = flow_metric_totals(metrics_texts(gateways)) if gateways else {}
        if routing is None:
            notes["oracle_queries"] = options["router"].queries
        return records, wall, notes
    finally:
        stop_all([*gateways, redis, *sims])


def check_replica(tmp, time_scale):
    """Checks textgen's replica of the simulator against the simulator itself: one two-turn chat straight to a
    pod. The first reply must be textgen's predicted text and the second turn (carrying it as the assistant
    message) must find the first turn's prompt + reply blocks cached. Returns a list of problems (empty = ok).
    (The second turn asks for 4 tokens: this simulator build reports cached_tokens 0 when max_tokens is 1.)"""
    sim = Sim(tmp, "replica-check", "--log-level", "warn", time_scale=f"{time_scale:g}")
    problems = []
    try:
        messages = [{"role": "system", "content": "abc " * 40}, {"role": "user", "content": "what is cached?"}]
        first = _chat(sim, messages, 37)
        tokens = engine_tokens(messages)
        expected = predicted_reply(tokens, 37)
        if first["content"] != expected:
            problems.append(f"reply {first['content'][:60]!r} is not textgen's {expected[:60]!r}")
        if first["prompt_tokens"] != len(tokens):
            problems.append(f"prompt_tokens {first['prompt_tokens']} != textgen's {len(tokens)}")
        second_messages = messages + [{"role": "assistant", "content": first["content"]},
                                      {"role": "user", "content": "and now?"}]
        second = _chat(sim, second_messages, 4)
        want = (len(tokens) + 37 - 1) // 16 * 16
        if second["cached_tokens"] != want:
            problems.append(f"second turn found {second['cached_tokens']} cached tokens, textgen expects {want} "
                            f"(full 16-token blocks of prompt {len(tokens)} + reply 37 tokens but the last)")
    finally:
        sim.stop()
    return problems


def _chat(sim, messages, max_tokens):
    body = {"model": sim.model, "messages": messages, "max_tokens": max_tokens}
    status, _, data = request("127.0.0.1", sim.port, "POST", "/v1/chat/completions", json.dumps(body))
    if status != 200:
        raise RuntimeError(f"replica check: HTTP {status}: {data[:200]!r}")
    reply = json.loads(data)
    usage = reply.get("usage") or {}
    return {"content": reply["choices"][0]["message"]["content"], "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0}
