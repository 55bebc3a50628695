"""The flow-control workloads of issue 27 (docs/benchmarks.md, "Flow control (issue 27)"): requests carrying a
tenant (x-tenant-id), a priority class (x-request-priority) and a TTFT objective (x-slo-ttft-ms, or their class's),
sent at rates set from the simulated fleet's computed capacity:

- noisy-neighbour: tenant `steady` at a steady Poisson rate well under capacity, tenant `flood` bursting to ~5x the
  fleet's capacity for a window; noisy-neighbour-alone: the same `steady` requests (same seed, same arrivals and
  texts) with no flood, for the steady tenant's figure alone;
- priority-overload: classes `high` and `low` at 1.5x capacity in all, `high` a minority share;
- mixed-objectives: TTFT objectives 500 ms / 2 s / 10 s at 1.2-2x capacity.

Every request is a fresh prompt (nothing shared, so routing and prefix caching play no part) of `prompt_tokens` with
`output_tokens` of output. The pods run with `--max-num-seqs batch` and flow control (the "on" variant) with
`max_in_flight_per_pod: batch`: the gateway lets through exactly what the engine would run at once, so the engine
never queues and the gateway's queue (with its discipline) replaces the engine's FIFO one. A smaller limit would
leave batch slots idle (less capacity than flow off), a larger one would let an engine FIFO queue form again behind
the gateway's.

Capacity (requests per simulated second of the whole fleet) is computed from the simulator's timing model
(docs/simulator.md, "The step time"), not guessed: see fleet_capacity_rps.
"""
import random
from dataclasses import dataclass

from bench.model import Session, Workload
from bench.workloads import MODEL, SIM_KV_CAPACITY_TOKENS, chat_request, poisson_times, scaled, scaled_sim_args, words

# The simulator's step-time constants (its defaults; docs/simulator.md, "The step time"), in ms.
SIM_STEP_OVERHEAD_MS = 15.0           # a step that prefills
SIM_DECODE_MS_PER_TOKEN = 4.5         # every step's floor
SIM_DECODE_MS_PER_RUNNING_SEQ = 0.046
SIM_ATTENTION_MS_PER_1K_CONTEXT = 0.05
SIM_PREFILL_TOKENS_PER_S = 25000.0
SIM_PREFILL_ATTENTION_MS_PER_M_PAIRS = 1.3
SIM_MAX_NUM_BATCHED_TOKENS = 8192


def pod_capacity_rps(prompt_tokens, output_tokens, batch):
    """Requests per simulated second one saturated simulated pod completes, at full size (token scale keeps every
    duration), for fresh prompts of `prompt_tokens` (nothing cached) and `output_tokens` each, `batch` sequences
    always running (--max-num-seqs, with a queue behind them).

    The model: a request is in the batch for `output_tokens` steps (its prefill step samples the first token, then
    one decode step per further token), so the pod finishes `batch` requests every `output_tokens` steps, i.e. one
    per output/batch steps. A step costs the decode floor + per running sequence + attention over the running
    sequences' context (on average prompt + output / 2 tokens each); each request adds its prefill (tokens at the
    prefill rate + the prefill attention over its prompt's (new, context) pairs, P (P + 1) / 2) and the prefill
    step overhead, shared when several requests are admitted in one step (output < batch). Time per request =
    output/batch x step + prefill + overhead x min(1, output/batch); capacity = 1 / that."""
    if prompt_tokens > SIM_MAX_NUM_BATCHED_TOKENS:
        raise ValueError(f"prompt_tokens {prompt_tokens}: the model assumes a prompt prefilled in one step "
                         f"(<= {SIM_MAX_NUM_BATCHED_TOKENS})")
    context = prompt_tokens + output_tokens / 2.0
    step_ms = (SIM_DECODE_MS_PER_TOKEN + SIM_DECODE_MS_PER_RUNNING_SEQ * batch
               + SIM_ATTENTION_MS_PER_1K_CONTEXT * batch * context / 1000.0)
    steps_per_request = output_tokens / batch
    prefill_ms = (prompt_tokens / SIM_PREFILL_TOKENS_PER_S * 1000.0
                  + SIM_PREFILL_ATTENTION_MS_PER_M_PAIRS * prompt_tokens * (prompt_tokens + 1) / 2.0 / 1e6)
    per_request_ms = steps_per_request * step_ms + prefill_ms + SIM_STEP_OVERHEAD_MS * min(1.0, steps_per_request)
    return 1000.0 / per_request_ms


def fleet_capacity_rps(prompt_tokens, output_tokens, batch, pods):
    """The whole fleet's capacity: `pods` x pod_capacity_rps."""
    return pods * pod_capacity_rps(prompt_tokens, output_tokens, batch)


@dataclass
class FlowParams:
    """What every flow workload shares: request sizes (full size), the pods' batch, the scales."""
    prompt_tokens: int = 1024
    output_tokens: int = 128         # the mean; each request's is drawn uniformly within +- output_spread of it
    output_spread: float = 0.5
    batch: int = 16                  # the pods' --max-num-seqs and flow control's max_in_flight_per_pod
    token_scale: float = 0.25
    time_scale: float = 1.0
    kv_capacity_tokens: int = SIM_KV_CAPACITY_TOKENS


@dataclass
class NoisyNeighbourParams(FlowParams):
    duration_s: float = 30.0         # the steady tenant's arrivals span this many simulated seconds
    steady_load: float = 0.2         # the steady tenant's rate, a fraction of the fleet's capacity
    flood_load: float = 5.0          # the flood's rate during its window, a multiple of the fleet's capacity
    flood_start_s: float = 5.0
    flood_s: float = 6.0
    slo_ttft_ms: int = 2000          # both tenants' objective (x-slo-ttft-ms)
    flood: bool = True               # False: the steady tenant alone (noisy-neighbour-alone)


@dataclass
class NoisyNeighbourAloneParams(NoisyNeighbourParams):
    flood: bool = False


@dataclass
class PriorityOverloadParams(FlowParams):
    duration_s: float = 30.0
    load: float = 1.5                # total arrival rate, a multiple of the fleet's capacity
    high_share: float = 0.2          # the share of requests in class `high`
    high_slo_ttft_ms: int = 1000     # the classes' objectives (flow_control.classes[].ttft_slo_ms)
    low_slo_ttft_ms: int = 5000
    tenants: int = 4                 # each request's tenant drawn uniformly (Jain's index over them)


@dataclass
class MixedObjectivesParams(FlowParams):
    duration_s: float = 30.0
    load: float = 1.5                # total arrival rate, a multiple of the fleet's capacity (1.2-2 in issue 27)
    objectives_ms: str = "500,2000,10000"   # drawn uniformly per request, sent as x-slo-ttft-ms
    class_per_objective: bool = True         # each objective its own class, tightest highest (see mixed_objectives)
    tenants: int = 4


def _prompt(seed, tag, rid, p):
    return [{"role": "user", "content": words(("flow", tag, seed, rid), scaled(p.prompt_tokens, p.token_scale))}]


def output_length(rng, p):
    """One request's output tokens (full size): uniform within +- output_spread of output_tokens (mean
    output_tokens). Equal lengths would keep a saturated fleet in lockstep: requests admitted together end together,
    so slots free in waves and a newcomer waits for the next wave instead of the next completion; real outputs
    vary."""
    spread = max(0.0, min(1.0, p.output_spread))
    low, high = p.output_tokens * (1 - spread), p.output_tokens * (1 + spread)
    return max(1, round(rng.uniform(low, high)))


def _request(seed, tag, rid, t, p, tenant, priority="", slo_ms=0, send_slo_header=True, group=0, rng=None):
    output = output_length(rng, p) if rng is not None else p.output_tokens
    req = chat_request(rid, _prompt(seed, tag, rid, p), scaled(output, p.token_scale), group=group, at_s=t)
    req.tenant, req.priority, req.slo_ttft_ms, req.send_slo_header = tenant, priority, int(slo_ms), send_slo_header
    return Session(t, [req])


def _sim_args(p):
    return [*scaled_sim_args(p.token_scale), "--max-num-seqs", str(p.batch)]


def _capacity_note(p, pods, capacity):
    return (f"Fleet capacity {capacity:.1f} req/s: {pods} pods x {capacity / pods:.2f} req/s, computed from the "
            f"simulator's timing model for fresh {p.prompt_tokens}-token prompts and {p.output_tokens} output tokens "
            f"(the mean: each request's drawn uniformly within +- {p.output_spread:.0%}) "
            f"with {p.batch} sequences running per pod (`--max-num-seqs {p.batch}`; flow control on: "
            f"`max_in_flight_per_pod: {p.batch}`).")


def _workload(name, title, description, sessions, p, flow_control, capacity, pods):
    params = vars(p).copy() | {"fleet_capacity_rps": capacity}
    return Workload(name=name, title=title, description=description + " " + _capacity_note(p, pods, capacity),
                    sessions=sorted(sessions, key=lambda s: s.start_s),
                    kv_capacity_tokens=scaled(p.kv_capacity_tokens, p.token_scale), sim_args=_sim_args(p),
                    params=params, time_scale=p.time_scale, flow_control=flow_control,
                    seed_note="each seed draws its own arrivals, tenants, classes and texts")


def noisy_neighbour(p, pods, seed):
    """`steady` at steady_load x capacity (Poisson) for duration_s; `flood` at flood_load x capacity from
    flood_start_s for flood_s. The two tenants draw from separate generators, so the alone variant (flood=False)
    sends exactly the steady tenant's requests of the same seed."""
    capacity = fleet_capacity_rps(p.prompt_tokens, p.output_tokens, p.batch, pods)
    steady_rng, flood_rng = random.Random(f"steady-{seed}"), random.Random(f"flood-{seed}")
    steady_rate, flood_rate = p.steady_load * capacity, p.flood_load * capacity
    steady = [t for t in poisson_times(steady_rng, steady_rate, int(steady_rate * p.duration_s * 3) + 10)
              if t < p.duration_s]
    flood = []
    if p.flood:
        flood = [t for t in poisson_times(flood_rng, flood_rate, int(flood_rate * p.flood_s * 3) + 10,
                                          start=p.flood_start_s) if t < p.flood_start_s + p.flood_s]
    sessions = [_request(seed, "steady", rid, t, p, "steady", slo_ms=p.slo_ttft_ms, group=0, rng=steady_rng)
                for rid, t in enumerate(steady)]
    sessions += [_request(seed, "flood", len(steady) + i, t, p, "flood", slo_ms=p.slo_ttft_ms, group=1,
                          rng=flood_rng) for i, t in enumerate(flood)]
    what = (f"Tenant `steady`: {len(steady)} requests, Poisson at {steady_rate:.1f} req/s ({p.steady_load:g}x "
            f"capacity) for {p.duration_s:g} s")
    if p.flood:
        name, title = "noisy-neighbour", "Noisy neighbour (a steady tenant beside a tenant flooding at 5x capacity)"
        what += (f"; tenant `flood`: {len(flood)} requests, Poisson at {flood_rate:.1f} req/s ({p.flood_load:g}x "
                 f"capacity) from {p.flood_start_s:g} s for {p.flood_s:g} s")
    else:
        name, title = "noisy-neighbour-alone", "Noisy neighbour: the steady tenant alone (its figure alone)"
        what += " (no flood: the same requests as noisy-neighbour's `steady` tenant, same seed)"
    description = (what + f". Every request has a {p.slo_ttft_ms} ms TTFT objective (`x-slo-ttft-ms`) and its tenant "
                   "in `x-tenant-id`; one priority class.")
    return _workload(name, title, description, sessions, p, {"max_in_flight_per_pod": p.batch}, capacity, pods)


def noisy_neighbour_alone(p, pods, seed):
    return noisy_neighbour(p, pods, seed)


def priority_overload(p, pods, seed):
    """Poisson arrivals at load x capacity for duration_s; each request `high` with probability high_share, else
    `low` (x-request-priority; their objectives are the classes' ttft_slo_ms, no x-slo-ttft-ms header), its tenant
    one of `tenants` drawn uniformly."""
    capacity = fleet_capacity_rps(p.prompt_tokens, p.output_tokens, p.batch, pods)
    rng = random.Random(f"priority-{seed}")
    rate = p.load * capacity
    times = [t for t in poisson_times(rng, rate, int(rate * p.duration_s * 3) + 10) if t < p.duration_s]
    sessions = []
    for rid, t in enumerate(times):
        high = rng.random() < p.high_share
        tenant = f"t{rng.randrange(p.tenants)}"
        sessions.append(_request(seed, "priority", rid, t, p, tenant, "high" if high else "low",
                                 p.high_slo_ttft_ms if high else p.low_slo_ttft_ms, send_slo_header=False,
                                 group=0 if high else 1, rng=rng))
    classes = [{"name": "high", "ttft_slo_ms": p.high_slo_ttft_ms}, {"name": "low", "ttft_slo_ms": p.low_slo_ttft_ms}]
    description = (f"{len(times)} requests, Poisson at {rate:.1f} req/s ({p.load:g}x capacity) for {p.duration_s:g} s; "
                   f"each in class `high` (share {p.high_share:g}, objective {p.high_slo_ttft_ms} ms) or `low` "
                   f"(objective {p.low_slo_ttft_ms} ms) by `x-request-priority`, the objective being the class's "
                   f"`ttft_slo_ms`; tenants t0-t{p.tenants - 1} drawn uniformly (`x-tenant-id`).")
    return _workload("priority-overload", "Two priority classes at 1.5x overload", description, sessions, p,
                     {"max_in_flight_per_pod": p.batch, "classes": classes, "default_class": "low"}, capacity, pods)


def objective_list(text):
    values = [int(v) for v in str(text).split(",") if v.strip()]
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"objectives_ms {text!r}: expected positive milliseconds like 500,2000,10000")
    return sorted(set(values))


def objective_class(ms):
    return f"slo-{ms}ms"


def mixed_objectives(p, pods, seed):
    """Poisson arrivals at load x capacity for duration_s, each with an objective drawn uniformly from
    objectives_ms, sent as x-slo-ttft-ms. With class_per_objective each objective is also its own priority class
    (x-request-priority `slo-<ms>ms`), the tightest highest: flow control has no earliest-deadline ordering inside a
    class (strict priority between classes, fair sharing by tenant within one), so tight objectives are declared
    as a higher class, as an operator would; without it every request is in one class and the gateway only sheds
    queued requests whose objective has passed."""
    capacity = fleet_capacity_rps(p.prompt_tokens, p.output_tokens, p.batch, pods)
    objectives = objective_list(p.objectives_ms)
    rng = random.Random(f"mixed-{seed}")
    rate = p.load * capacity
    times = [t for t in poisson_times(rng, rate, int(rate * p.duration_s * 3) + 10) if t < p.duration_s]
    sessions = []
    for rid, t in enumerate(times):
        index = rng.randrange(len(objectives))
        ms = objectives[index]
        tenant = f"t{rng.randrange(p.tenants)}"
        sessions.append(_request(seed, "mixed", rid, t, p, tenant, objective_class(ms) if p.class_per_objective
                                 else "", ms, group=index, rng=rng))
    flow = {"max_in_flight_per_pod": p.batch}
    if p.class_per_objective:
        flow["classes"] = [{"name": objective_class(ms), "ttft_slo_ms": ms} for ms in objectives]
    description = (f"{len(times)} requests, Poisson at {rate:.1f} req/s ({p.load:g}x capacity) for {p.duration_s:g} s, "
                   f"each with a TTFT objective drawn uniformly from {', '.join(f'{ms} ms' for ms in objectives)} "
                   "(`x-slo-ttft-ms`)" + (", each objective its own priority class, tightest highest "
                                          "(`x-request-priority`)" if p.class_per_objective else ", one class")
                   + f"; tenants t0-t{p.tenants - 1} drawn uniformly.")
    return _workload("mixed-objectives", "Mixed TTFT objectives at overload", description, sessions, p, flow,
                     capacity, pods)


PARAMS = {"noisy-neighbour": NoisyNeighbourParams, "noisy-neighbour-alone": NoisyNeighbourAloneParams,
          "priority-overload": PriorityOverloadParams, "mixed-objectives": MixedObjectivesParams}
BUILDERS = {"noisy-neighbour": noisy_neighbour, "noisy-neighbour-alone": noisy_neighbour_alone,
            "priority-overload": priority_overload, "mixed-objectives": mixed_objectives}
FLOW_WORKLOADS = list(BUILDERS)
__all__ = ["MODEL", "PARAMS", "BUILDERS", "FLOW_WORKLOADS", "fleet_capacity_rps", "pod_capacity_rps"]
