"""Prompt text with exact token counts, and the engine simulator's tokenization and output replicated exactly.

The simulated engine (loadtest/engine_sim) tokenizes like this:
- a token id is the 32-bit FNV-1a hash of the token's bytes;
- plain text (a /v1/completions prompt) is cut into 4-byte pieces, the last one possibly shorter;
- a chat prompt is built structurally: if `tools` is a non-empty array, [<|tools|>] + pieces(compact JSON of the
  tools) + [<|end|>]; then per message [<|role|>] + pieces(its content) + [<|end|>], each message's content cut
  on its own (pieces restart at every message); then [<|assistant|>]. Markers are single tokens.
- output token i is " " + WORDS[pick % 64] (always 4 bytes), pick = splitmix64(seed ^ splitmix64(i)), seed = the
  64-bit FNV-1a of the prompt's token ids (each as 4 little-endian bytes). A reply's text cut into 4-byte pieces
  is therefore exactly its token ids, and a next turn that carries the reply verbatim as the assistant message
  continues the sequence prompt + reply that the engine cached (vLLM caches generated tokens' blocks too).
- full 16-token blocks of prompt and output are cached, as in vLLM: every token whose KV was computed, which is
  the prompt and every generated token but the last (sampled, never fed back); cached_tokens counts matched full
  blocks within the first prompt_tokens - 1 tokens.

Text built from 4-byte words ("abc ") has exactly one token per word. Everything here is pure and deterministic
(seeded), so a workload is reproducible run to run.
"""
import hashlib
import json
import random
import struct

BYTES_PER_TOKEN = 4
ENGINE_BLOCK_TOKENS = 16  # the simulator's --block-size default (vLLM's too)
MASK32, MASK64 = (1 << 32) - 1, (1 << 64) - 1
FNV32_OFFSET, FNV32_PRIME = 2166136261, 16777619
FNV64_OFFSET, FNV64_PRIME = 14695981039346656037, 1099511628211

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# 17,576 three-letter words, each followed by a space: every word is exactly one engine token.
VOCABULARY = [a + b + c + " " for a in _LETTERS for b in _LETTERS for c in _LETTERS]
# The simulator's output words, in its order: output token i is " " + OUTPUT_WORDS[pick % 64].
OUTPUT_WORDS = ("the and for are but not you all any can had her was one our out day get has him his how man new "
                "now old see two way who boy did its let put say she too use gpu llm row key map set bit log run "
                "top end sum max min net web sky sea sun red big low far hot cup").split()
assert len(OUTPUT_WORDS) == 64 and all(len(w) == 3 for w in OUTPUT_WORDS)


def words(seed, tokens):
    """`tokens` 4-byte words chosen by a generator seeded with `seed` (any str/int): the same seed, the same text."""
    if tokens <= 0:
        return ""
    return "".join(random.Random(repr(seed)).choices(VOCABULARY, k=tokens))


# --- hashes -----------------------------------------------------------------------------------------------------
def fnv1a32(data):
    h = FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV32_PRIME) & MASK32
    return h


def fnv1a64(data):
    h = FNV64_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV64_PRIME) & MASK64
    return h


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


# --- tokenization -----------------------------------------------------------------------------------------------
_IDS = {}   # piece bytes -> token id; pieces repeat a lot (a small vocabulary), so this makes prompts cheap


def token_id(piece):
    """The engine's token id of one piece (bytes or str)."""
    if isinstance(piece, str):
        piece = piece.encode()
    tid = _IDS.get(piece)
    if tid is None:
        tid = _IDS[piece] = fnv1a32(piece)
    return tid


def text_tokens(text):
    """Token ids of plain text: 4-byte pieces of its UTF-8 bytes, the last possibly shorter."""
    data = text.encode() if isinstance(text, str) else text
    return [token_id(data[i:i + BYTES_PER_TOKEN]) for i in range(0, len(data), BYTES_PER_TOKEN)]


def content_text(content):
    """A message's content as the engine reads it: a string, null, or an array of parts whose `text` is joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict)
                   and isinstance(part.get("text"), str))


def tools_json(tools):
    """The tools array as the engine dumps it (compact, keys sorted, UTF-8 unescaped: nlohmann::json::dump())."""
    return json.dumps(tools, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def engine_tokens(messages, tools=None):
    """Token ids of a chat prompt as the engine builds it (see the module docstring)."""
    out = []
    if tools:
        out += [token_id("<|tools|>"), *text_tokens(tools_json(tools)), token_id("<|end|>")]
    for message in messages:
        out.append(token_id(f"<|{message['role']}|>"))
        out += text_tokens(content_text(message.get("content")))
        out.append(token_id("<|end|>"))
    out.append(token_id("<|assistant|>"))
    return out


def engine_token_count(messages, tools=None):
    """Prompt tokens of a chat prompt, by the formula sum(2 + ceil(content bytes / 4)) + 1 (+ the tools' part)."""
    count = 1 + sum(2 + -(-len(content_text(m.get("content")).encode()) // BYTES_PER_TOKEN) for m in messages)
    if tools:
        count += 2 + -(-len(tools_json(tools).encode()) // BYTES_PER_TOKEN)
    return count


# --- output -----------------------------------------------------------------------------------------------------
def reply_seed(prompt_tokens):
    """FNV-1a 64 over the prompt's token ids, each as 4 little-endian bytes: the seed of the engine's output."""
    return fnv1a64(struct.pack(f"<{len(prompt_tokens)}I", *prompt_tokens))


def predicted_reply(prompt_tokens, n):
    """The text the engine generates for a prompt (token ids) in n output tokens: n 4-byte words " xyz"."""
    seed = reply_seed(prompt_tokens)
    return "".join(" " + OUTPUT_WORDS[splitmix64(seed ^ splitmix64(i)) % len(OUTPUT_WORDS)] for i in range(n))


def predicted_reply_tokens(prompt_tokens, n):
    """Token ids of predicted_reply (one per word)."""
    return text_tokens(predicted_reply(prompt_tokens, n))


def cached_sequence(prompt_tokens, reply_tokens):
    """The tokens whose KV the engine computed for a request, so whose full blocks it caches: the prompt and every
    generated token but the last one (sampled, never fed back), as in vLLM."""
    return list(prompt_tokens) + list(reply_tokens[:-1])


# --- prefix-cache blocks ----------------------------------------------------------------------------------------
def engine_block_keys(tokens, block_tokens=ENGINE_BLOCK_TOKENS):
    """Chained keys of the full blocks of a token id sequence: key i identifies tokens [0, (i + 1) * block)
    exactly, so two sequences share their first k keys iff they share their first k blocks (what the engine's
    prefix cache matches). A trailing partial block has no key."""
    keys, previous = [], b""
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        block = struct.pack(f"<{block_tokens}I", *tokens[start:start + block_tokens])
        previous = hashlib.blake2b(previous + block, digest_size=8).digest()
        keys.append(int.from_bytes(previous, "little"))
    return keys


def cacheable_tokens(matched_blocks, prompt_tokens, block_tokens=ENGINE_BLOCK_TOKENS):
    """Cached tokens the engine reports for a prefix match of `matched_blocks` full blocks: only full blocks within
    the first prompt_tokens - 1 tokens (the last prompt token is always computed, vLLM's rule)."""
    usable = max(0, prompt_tokens - 1) // block_tokens
    return min(matched_blocks, usable) * block_tokens
