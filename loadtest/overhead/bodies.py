"""The request bodies of the proxy-overhead benchmark, all deterministic (same arguments, same bytes):

- `chat_body(n)`: one chat completion whose single user message is n bytes: the fixed body, sent again and again;
- `family_bodies(...)`: a rotating set of conversation families. Every body of a family shares the family's
  system prompt and earlier turns (about 90 % of its bytes) and ends in its own last user message; families
  differ from their first byte. Sent in a seeded order that interleaves the families, so a prefix-aware router
  has real prefixes to match and record, and as many distinct conversations to place on its pods.

wrk_post.lua reads a bodies file (one JSON body per line; JSON text has no raw newline) and sends its lines in turn.
"""
import json
import random

MODEL = "sim-model"
# Shares of a family body's bytes: the system prompt and each of the two earlier turns; the rest is the last user
# message, the part that differs between the family's bodies.
SYSTEM_SHARE, TURN_SHARE = 0.7, 0.1
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "de", "pa", "gu", "zi", "bo", "fe", "ho", "ja")


def chat_body(prompt_bytes, stream=False, max_tokens=16):
    """A chat completion whose prompt (one user message) is `prompt_bytes` long, as JSON bytes."""
    words = ("route", "cache", "prefix", "token", "model", "engine", "block", "query")
    text, i = [], 0
    while sum(len(w) + 1 for w in text) < prompt_bytes:
        text.append(words[i % len(words)] + str(i % 97))
        i += 1
    content = " ".join(text)[:prompt_bytes]
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def _text(rng, length):
    """`length` bytes of made-up words drawn from `rng`."""
    words, size = [], 0
    while size < length:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def family_bodies(families, variants, body_bytes, seed=1):
    """`families` x `variants` chat bodies of about `body_bytes` each, as JSON bytes, in the order to send them (a
    seeded shuffle). Body (f, v): family f's system prompt and two earlier turns, then a last user message of its
    own."""
    content_bytes = body_bytes - 192   # the JSON around the four messages
    bodies = []
    for f in range(families):
        rng = random.Random(seed * 1_000_003 + f)
        shared = [{"role": "system", "content": _text(rng, int(content_bytes * SYSTEM_SHARE))},
                  {"role": "user", "content": _text(rng, int(content_bytes * TURN_SHARE))},
                  {"role": "assistant", "content": _text(rng, int(content_bytes * TURN_SHARE))}]
        last = content_bytes - sum(len(m["content"]) for m in shared)
        for _ in range(variants):
            messages = shared + [{"role": "user", "content": _text(rng, last)}]
            bodies.append(json.dumps({"model": MODEL, "messages": messages, "max_tokens": 16}).encode())
    random.Random(seed).shuffle(bodies)
    return bodies


def write_bodies(path, bodies):
    """The bodies file wrk_post.lua reads: one body per line."""
    assert all(b"\n" not in body for body in bodies)
    with open(path, "wb") as f:
        f.write(b"\n".join(bodies) + b"\n")
