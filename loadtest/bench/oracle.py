"""The finite-cache oracle: a benchmark reference, not a strategy a user can pick.

No gateway: before each request the load generator asks every simulated pod what the prompt would find in its
real prefix cache now (`POST /sim/cache/match`, the request's own body, read only), all pods at once over
persistent keep-alive connections, and sends the request straight to the pod with the best blend score, load
weighed as prefixgate's blend weighs it:

    score = 5 x cached_tokens / prompt_tokens + 4 x (hi - load) / (hi - lo)      (all loads equal: 1)
    load  = requests the runner has in flight at that pod x (1 + 2.0 x kv_cache_usage_perc ^ 2)

lo and hi being the smallest and largest load among the candidates; a pod whose KV cache usage is above 0.90 is
no candidate unless all are; ties go to fewer requests in flight, then to a seeded random pick. It sees the
engines' evictions, which the gateway's index cannot, so strategies are reported as a percentage of its hit ratio
as well as of the infinite-cache upper bound. Its cache queries happen before the send and count in the send lag.
"""
import asyncio
import json
import random
from dataclasses import dataclass

from bench.loadgen import ConnectionPool, parse_head, read_chunked

PREFIX_WEIGHT = 5.0
LOAD_WEIGHT = 4.0
KV_ALPHA = 2.0
KV_EXCLUDE_ABOVE = 0.90
TIE_EPSILON = 1e-12
MATCH_PATH = "/sim/cache/match"


@dataclass
class PodView:
    """What the oracle knows of one pod for one request."""
    name: str
    cached_tokens: int
    prompt_tokens: int
    in_flight: int          # the runner's own count of requests sent there and not finished
    kv_usage: float         # kv_cache_usage_perc, 0..1


def load_score(pod):
    return pod.in_flight * (1.0 + KV_ALPHA * pod.kv_usage * pod.kv_usage)


def blend_scores(pods):
    """{name: score} of the candidates (the pods left after the KV exclusion)."""
    loads = {p.name: load_score(p) for p in pods}
    lo, hi = min(loads.values()), max(loads.values())
    scores = {}
    for p in pods:
        prefix = p.cached_tokens / p.prompt_tokens if p.prompt_tokens > 0 else 0.0
        load = (hi - loads[p.name]) / (hi - lo) if hi > lo else 1.0
        scores[p.name] = PREFIX_WEIGHT * prefix + LOAD_WEIGHT * load
    return scores


def choose(pods, rng):
    """The pod the oracle sends to (its name): best blend score, then fewer in flight, then rng.choice."""
    if not pods:
        raise ValueError("no pod to choose from")
    candidates = [p for p in pods if p.kv_usage <= KV_EXCLUDE_ABOVE] or list(pods)
    scores = blend_scores(candidates)
    best = max(scores.values())
    top = [p for p in candidates if scores[p.name] >= best - TIE_EPSILON]
    fewest = min(p.in_flight for p in top)
    top = [p for p in top if p.in_flight == fewest]
    return top[0].name if len(top) == 1 else rng.choice(top).name


class OracleRouter:
    """The load generator's router for the oracle run: `route(req)` queries every pod, picks one and counts the
    request in flight there until `done(name)`."""

    def __init__(self, pods, seed, timeout_s=10.0):
        """pods: [(name, host, port)]."""
        self.names = [name for name, _, _ in pods]
        self.match_pools = {name: ConnectionPool(host, port) for name, host, port in pods}
        self.send_pools = {name: ConnectionPool(host, port) for name, host, port in pods}
        self.in_flight = {name: 0 for name in self.names}
        self.rng = random.Random(f"oracle-{seed}")
        self.timeout_s = timeout_s
        self.queries = 0

    def pools(self):
        return [*self.match_pools.values(), *self.send_pools.values()]

    async def route(self, req):
        answers = await asyncio.gather(*(self._match(name, req.body) for name in self.names))
        views = [PodView(name, int(a.get("cached_tokens", 0)), int(a.get("prompt_tokens", 0)), self.in_flight[name],
                         float(a.get("kv_cache_usage_perc", 0.0))) for name, a in zip(self.names, answers)]
        name = choose(views, self.rng)
        self.in_flight[name] += 1
        return name, self.send_pools[name]

    def done(self, name):
        self.in_flight[name] -= 1

    async def _match(self, name, body):
        pool = self.match_pools[name]
        self.queries += 1
        async with asyncio.timeout(self.timeout_s):
            conn, reused = await pool.acquire()
            ok = False
            try:
                try:
                    answer = await self._exchange(conn, pool, body)
                except (OSError, asyncio.IncompleteReadError):
                    if not reused:
                        raise
                    pool.release(conn, False)   # an idle connection the pod had closed: once more on a new one
                    conn = None
                    conn, _ = await pool.acquire(fresh=True)
                    answer = await self._exchange(conn, pool, body)
                ok = True
                return answer
            finally:
                if conn is not None:
                    pool.release(conn, ok)

    @staticmethod
    async def _exchange(conn, pool, body):
        reader, writer = conn
        writer.write((f"POST {MATCH_PATH} HTTP/1.1\r\nHost: {pool.host_header}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        await writer.drain()
        status, headers = parse_head(await reader.readuntil(b"\r\n\r\n"))
        if "chunked" in headers.get("transfer-encoding", ""):
            parts = []
            await read_chunked(reader, lambda data, now: parts.append(data))
            data = b"".join(parts)
        else:
            data = await reader.readexactly(int(headers.get("content-length", "0")))
        if status != 200:
            raise ValueError(f"{MATCH_PATH} answered {status}: {data[:120].decode(errors='replace')}")
        return json.loads(data)
