"""Capacity-aware standard mode: the gateway keeps per pod no more routed blocks than the pod's KV cache holds, so it
stops promising prefixes the engine must have evicted."""
import json

from harness import Sim, request, wait_until
from prefix_helpers import chat, route, words

CAPACITY_TOKENS = 2048   # 128 engine blocks of 16 tokens


def fill(gw, sim):
    """Routes one prompt, then enough other prompts to the same (only) pod to push it out of its engine."""
    first = chat(words("first", 200))                 # ~1,000 bytes: ~250 tokens
    for body in [first] + [chat(words(f"more{i}", 200)) for i in range(12)]:
        status, headers, raw = gw.call("POST", "/v1/chat/completions", json.dumps(body))
        assert status == 200, raw
    return first


def test_capacity_aware_mode_forgets_what_the_engine_evicted(tmp_path, gateway_factory):
    """Ensures that with capacity_aware on (the default), a prefix followed by more than a KV cache's worth of other prompts to the
    same pod no longer matches there (the engine evicted it, as its own cache lookup confirms), while the plain
    standard mode still predicts a full hit."""
    sim = Sim(tmp_path, "small", "--kv-capacity-tokens", str(CAPACITY_TOKENS), time_scale="0.01")
    try:
        aware = gateway_factory([sim], config={"routing": {"strategy": "prefix-cache"}})   # on by default
        plain = gateway_factory([sim], config={"routing": {"strategy": "prefix-cache",
                                                           "prefix_cache": {"capacity_aware": False}}})
        # The capacity comes from the engine's vllm:cache_config_info.
        wait_until(lambda: all(p["kv_capacity_tokens"] == CAPACITY_TOKENS for p in aware.debug_pods()),
                   what="the KV capacity scraped")
        first = fill(aware, sim)
        for i in range(13):
            plain.call("POST", "/v1/chat/completions", json.dumps(chat(words("first", 200) if i == 0 else
                                                                       words(f"more{i - 1}", 200))))
        status, _, raw = request("127.0.0.1", sim.port, "POST", "/sim/cache/match", json.dumps(first))
        assert json.loads(raw)["cached_tokens"] == 0      # the engine really evicted it
        assert route(aware, first)["small"] == 0
        assert route(plain, first)["small"] >= 90
        latest = chat(words("more11", 200))
        assert route(aware, latest)["small"] >= 90        # what the engine still holds is still predicted
    finally:
        sim.stop()
