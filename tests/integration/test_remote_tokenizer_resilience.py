"""The remote tokenizer when a pod's /tokenize is slow (issue 24): a per-pod breaker skips a pod that timed out or
lost to a hedge, a hedge asks a second pod when the first is slow, and the skipped pod is probed again after its
backoff. Measured by the gateway's own counts (timeouts, breaker openings, hedges), not by wall-clock targets."""
import json

from harness import wait_until

SLOW_MS = 5000  # the slow pod's /tokenize: ten times the default timeout


def remote_config(**extra):
    prefix_cache = {"block_size": 64, "use_remote_tokenizer": True, **extra}
    return {"routing": {"strategy": "prefix-cache", "prefix_cache": prefix_cache}}


def chat_body(tag):
    system = f"[{tag}] You are a careful assistant. " + " ".join(f"clause-{tag}-{i}" for i in range(40))
    return json.dumps({"model": "sim-model", "max_tokens": 4,
                       "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hello"}]})


def send(gw, body):
    status, _, raw = gw.call("POST", "/v1/chat/completions", body)
    assert status == 200, raw


def tokenize_calls(sim):
    return sum(1 for r in sim.requests() if r["path"] == "/tokenize")


def outcomes(gw, name):
    return gw.metric("prefixgate_remote_tokenizer_requests_total", outcome=name)


def breaker_of(gw, sim):
    return next(p for p in gw.debug_pods() if p["name"] == sim.name)["tokenizer_breaker"]


def test_slow_tokenizer_pod_is_skipped_not_waited_for(sims, gateway_factory):
    """One pod whose /tokenize takes 5 s (its health check fine) beside two healthy ones, with the default timeout
    (500 ms): before the fix every third request paid the whole timeout, forever (about 10 timeouts in 30 requests).
    Now the first slow call is answered by a hedge to another pod and opens the slow pod's breaker: no request times
    out, the slow pod is asked a few times at most (its half-open probes), every request gets the engine's tokens,
    and once the pod is quick again a probe after the backoff closes its breaker."""
    gw = gateway_factory(sims, config=remote_config())
    slow = sims[0]
    slow.fault(tokenize_delay_ms=SLOW_MS)
    requests = 30
    for i in range(requests):
        send(gw, chat_body(f"slow-{i}"))
    assert outcomes(gw, "timeout") <= 1, "requests kept paying the slow pod's timeout"
    assert tokenize_calls(slow) <= 3, "the slow pod kept being asked"
    assert outcomes(gw, "miss") == requests
    assert gw.metric("prefixgate_remote_tokenizer_breaker_opens_total", reason="slow") >= 1
    assert gw.metric("prefixgate_remote_tokenizer_hedges_total", outcome="won") >= 1
    assert breaker_of(gw, slow)["state"] in ("open", "half_open")
    assert all(breaker_of(gw, s)["state"] == "closed" for s in sims[1:])

    slow.fault(tokenize_delay_ms=0)
    asked = tokenize_calls(slow)
    sent = iter(range(10_000))

    def probed_and_closed():
        send(gw, chat_body(f"after-{next(sent)}"))
        return tokenize_calls(slow) > asked and breaker_of(gw, slow)["state"] == "closed"

    # The breaker's backoff (1 s, doubling while probes fail: at most a few seconds here) bounds the wait.
    wait_until(probed_and_closed, timeout=20, interval=0.05, what="the slow pod probed again and its breaker closed")
    assert outcomes(gw, "timeout") <= 1
