"""cache_salt (vLLM's cache namespaces) through the real gateway: a salted prompt shares no cached block with the
same prompt unsalted or under another salt, in the engine (the simulator folds the salt into its first block's
hash as vLLM does) and in the gateway's index, in standard mode (its own records) and in KV event mode (the
engine's BlockStored events carry the salt as the first block's extra keys). Each check fails when the salt is
ignored: the salted prompt would match the unsalted one's pod in full."""
import json

from harness import Sim, request, wait_until
from prefix_helpers import KV_MODE, chat, route, send, words

STANDARD = {"routing": {"strategy": "prefix-cache", "prefix_cache": {"block_size": 64}}}


def salted(body, salt):
    return {**body, "cache_salt": salt}


def cached_tokens(sim, body):
    status, _, raw = request("127.0.0.1", sim.port, "POST", "/v1/chat/completions", json.dumps(body))
    assert status == 200, raw
    return json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_the_engine_keeps_salted_prompts_apart(tmp_path):
    sim = Sim(tmp_path, "engine")
    try:
        prompt = chat(words("p", 200))
        assert cached_tokens(sim, prompt) == 0
        assert cached_tokens(sim, prompt) > 200
        assert cached_tokens(sim, salted(prompt, "tenant-a")) == 0   # not the unsalted prompt's blocks
        assert cached_tokens(sim, salted(prompt, "tenant-a")) > 200
        assert cached_tokens(sim, salted(prompt, "tenant-b")) == 0
        status, _, raw = request("127.0.0.1", sim.port, "POST", "/v1/chat/completions",
                                 json.dumps(salted(prompt, "")))
        assert status == 400 and "cache_salt" in raw.decode(), raw   # vLLM refuses an empty salt
    finally:
        sim.stop()


def test_standard_mode_matches_a_salted_prompt_only_under_its_salt(sims, gateway_factory):
    gw = gateway_factory(sims, config=STANDARD)
    prompt = chat(words("s", 300))
    holder = send(gw, prompt)
    assert route(gw, prompt)[holder] >= 90
    assert max(route(gw, salted(prompt, "tenant-a")).values()) == 0
    salted_holder = send(gw, salted(prompt, "tenant-a"))
    assert route(gw, salted(prompt, "tenant-a"))[salted_holder] >= 90
    assert max(route(gw, salted(prompt, "tenant-b")).values()) == 0
    assert route(gw, prompt)[holder] >= 90   # the unsalted record is untouched


def test_kv_event_mode_matches_the_blocks_an_engine_stored_under_the_salt(tmp_path, gateway_factory):
    sims = [Sim(tmp_path, f"kv-engine-{i}", "--kv-capacity-tokens", "4096", kv_events=True, time_scale="0.01")
            for i in range(2)]
    try:
        gw = gateway_factory(sims, config=KV_MODE)
        prompt = chat(words("k", 200))
        target = sims[0].name
        # Sent to the engine itself: only its events tell the gateway it holds the salted blocks.
        assert cached_tokens(sims[0], salted(prompt, "tenant-a")) == 0
        wait_until(lambda: route(gw, salted(prompt, "tenant-a"))[target] >= 80,
                   what="the salted blocks matched from the engine's events")
        assert route(gw, prompt)[target] == 0
        assert route(gw, salted(prompt, "tenant-b"))[target] == 0
        assert cached_tokens(sims[0], prompt) == 0
        wait_until(lambda: route(gw, prompt)[target] >= 80, what="the unsalted blocks matched")
        assert route(gw, salted(prompt, "tenant-a"))[target] >= 80
    finally:
        for s in sims:
            s.stop()
