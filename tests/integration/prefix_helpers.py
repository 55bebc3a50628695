"""Requests and dry-run decisions shared by the prefix-routing tests (KV events, capacity-aware mode, pods-file
edits): a chat body, prompts of distinct words, the gateway's match per pod, and a routed request's pod."""
import json

MODEL = "sim-model"
# Prefix routing by the engines' KV events, nothing predicted from the gateway's own routing.
KV_MODE = {"routing": {"strategy": "prefix-cache",
                       "prefix_cache": {"kv_event_sync": True, "speculative_ttl_ms": 0}}}


def chat(content, max_tokens=2):
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}


def words(tag, n):
    return "".join(f"{tag}{i:03d} " for i in range(n))   # 5-char words (with a 3-char tag): n * 5 bytes


def route(gw, body):
    """{pod name: match percent} of the gateway's dry-run decision for `body`."""
    status, _, raw = gw.admin("POST", "/debug/route", json.dumps(body))
    assert status == 200, raw
    return {p["name"]: p["match_percent"] for p in json.loads(raw)["pods"]}


def send(gw, body):
    """Sends `body` through the gateway; returns the pod that served it."""
    status, headers, raw = gw.call("POST", "/v1/chat/completions", json.dumps(body))
    assert status == 200, raw
    return headers["target-pod"]
