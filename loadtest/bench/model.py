"""The plain data the benchmark passes around: requests, sessions, workloads, and one measured request.

A workload is a list of sessions; a session is one or more requests sent one after another (a multi-turn chat,
or a single request). Times in a workload are simulated seconds: the load generator multiplies them by the
simulator's --time-scale to get wall-clock delays, and divides what it measures by the same factor, so every
figure in a report is in simulated seconds.
"""
from dataclasses import dataclass, field


@dataclass
class BenchRequest:
    """One HTTP request, fully prepared: the body is sent as is."""
    rid: int                 # unique in the workload, in generation order
    path: str                # /v1/chat/completions or /v1/completions
    body: bytes              # JSON, always streaming with stream_options.include_usage
    prompt_tokens: int       # engine prompt tokens, from the replicated tokenization (textgen)
    max_tokens: int
    block_keys: list         # chained engine block keys of the prompt (textgen.engine_block_keys)
    cache_keys: list = field(default_factory=list)   # keys of prompt + predicted reply: what the engine caches
    group: int = 0           # workload label: prefix group, user or trace chain
    stage: int = 0           # rate stage (stepped-rate workloads), else 0
    at_s: float = 0.0        # scheduled arrival (simulated s) of a session's first request; the stage rule uses it
    # A turn of a conversation that carries the engine's actual replies (Session.carry_replies): the messages this
    # turn adds to the history, and the body's other fields; the load generator builds `body` when it sends it.
    new_messages: list = None
    body_fields: dict = None
    # Flow control (issue 27; bench/flow_workloads.py): sent as x-tenant-id, x-request-priority and x-slo-ttft-ms
    # when set. slo_ttft_ms is also the objective the report checks (a class's objective is recorded here even when
    # the request names only its class); 0 = none.
    tenant: str = ""
    priority: str = ""
    slo_ttft_ms: int = 0
    send_slo_header: bool = True     # False: the objective comes from the class config, no x-slo-ttft-ms header


@dataclass
class Session:
    """Requests sent in order: request i + 1 goes `think_s[i]` simulated seconds after request i ends."""
    start_s: float           # simulated seconds after the run starts (open loop); ignored by the closed loop
    requests: list
    think_s: list = field(default_factory=list)
    # True: the requests are turns of one conversation built at send time: each sends the history so far (every
    # earlier turn's new_messages and, after each, the reply the engine actually streamed) plus its own
    # new_messages. For engines whose output cannot be predicted (a real llama-server).
    carry_replies: bool = False


@dataclass
class Workload:
    """A generated workload and how to run it."""
    name: str
    title: str
    description: str         # Markdown paragraph for the report: what was sent, and how it was scaled
    sessions: list
    mode: str = "open"       # "open": sessions start at start_s (Poisson or trace); "closed": `concurrency` users
    concurrency: int = 0
    kv_capacity_tokens: int = 400000   # per simulated pod, in the workload's (scaled) tokens
    sim_args: list = field(default_factory=list)   # extra prefixgate-engine-sim flags (scaled engine rates)
    params: dict = field(default_factory=dict)     # the parameters, printed in the report
    stages: list = field(default_factory=list)     # [(rate req/s, duration s)] for stepped-rate workloads
    seed_note: str = "each seed draws its own arrivals and texts"   # what the seed changes, for the report
    time_scale: float = 0.5  # the simulator's --time-scale for this workload (wall = simulated x this)
    # A flow-control workload (issue 27, bench/flow_workloads.py): the gateway's flow_control settings it needs when a
    # strategy turns flow control on (classes, max_in_flight_per_pod); None for every other workload.
    flow_control: dict = None

    def requests(self):
        return [r for s in self.sessions for r in s.requests]


@dataclass
class Record:
    """What the load generator measured for one request. Times are simulated seconds (wall / time_scale)."""
    rid: int
    group: int
    stage: int
    send_s: float            # since the run started
    status: int = 0          # HTTP status; 0 = no response (connection error, timeout, run deadline)
    error: str = ""
    pod: str = ""            # the gateway's target-pod header (a disaggregated request's decode pod)
    prefill_pod: str = ""    # the gateway's prefill-pod header: a disaggregated request's prefill pod, else ""
    match_percent: int = -1  # the gateway's x-prefix-match-percent header (the chosen pod's match), -1 = none
    replica: int = 0         # the gateway replica it was sent to (LoadGenerator's replicas), else 0
    ttft_s: float = -1.0     # send -> first content chunk
    e2e_s: float = -1.0      # send -> last byte
    itl_s: list = field(default_factory=list)   # gaps between consecutive content chunks
    prompt_tokens: int = 0   # from the final usage chunk
    cached_tokens: int = 0   # usage.prompt_tokens_details.cached_tokens
    completion_tokens: int = 0
    expected_prompt_tokens: int = 0
    lag_ms: float = 0.0      # wall milliseconds between the scheduled send and the actual one (see loadgen)
    # With the load generator's capture=True (real engines): the body sent, the streamed reply text, and the
    # engine's llama.cpp `timings` object from the last chunk that carried one (None without).
    body: bytes = b""
    reply: str = ""
    timings: dict = None
    # An error response's OpenAI-shaped body: error.code (prefixgate's is the HTTP status), error.type and the
    # first 200 characters of error.message ("" when absent or not JSON), and its retry-after header ("" when absent).
    error_code: str = ""
    error_type: str = ""
    error_message: str = ""
    retry_after: str = ""

    @property
    def ok(self):
        return self.status == 200 and not self.error

    @property
    def end_s(self):
        return self.send_s + max(self.e2e_s, 0.0)
