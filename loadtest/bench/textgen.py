"""Prompt text with exact token counts, and the engine simulator's tokenization replicated byte for byte.

The simulated engine (loadtest/engine_sim) cuts a prompt's UTF-8 bytes into 4-byte "tokens" and caches full blocks
of 16 tokens (64 bytes) under chained hashes. So text built from 4-byte words ("abc ") has exactly one token per
word, and two prompts share k cached blocks exactly when their engine prompt strings share their first 64 * k bytes.
Everything here is pure and deterministic (seeded), so a workload is reproducible run to run.
"""
import hashlib
import random

BYTES_PER_TOKEN = 4
ENGINE_BLOCK_TOKENS = 16  # the simulator's --block-size default (vLLM's too)

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# 17,576 three-letter words, each followed by a space: every word is exactly one engine token.
VOCABULARY = [a + b + c + " " for a in _LETTERS for b in _LETTERS for c in _LETTERS]


def words(seed, tokens):
    """`tokens` 4-byte words chosen by a generator seeded with `seed` (any str/int): the same seed, the same text."""
    if tokens <= 0:
        return ""
    return "".join(random.Random(repr(seed)).choices(VOCABULARY, k=tokens))


def chat_template(messages):
    """The engine prompt string of a chat request, as the simulator builds it (no tools):
    `<|role|>content<|end|>` per message, then the generation prompt `<|assistant|>`."""
    return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages) + "<|assistant|>"


def engine_token_count(prompt):
    """Prompt tokens the simulator counts for an engine prompt string (the last piece may be shorter than 4)."""
    size = len(prompt.encode())
    return (size + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


def engine_block_keys(prompt, block_tokens=ENGINE_BLOCK_TOKENS):
    """Chained keys of the prompt's full engine blocks (16 tokens each; the prompt's last token may be shorter
    than 4 bytes and still completes a block): key i identifies tokens [0, (i + 1) * block) exactly, so two
    prompts share their first k keys iff they share their first k blocks (what the engine's prefix cache matches)."""
    data = prompt.encode()
    step = block_tokens * BYTES_PER_TOKEN
    full_blocks = engine_token_count(prompt) // block_tokens
    keys, previous = [], b""
    for i in range(full_blocks):
        previous = hashlib.blake2b(previous + data[i * step:(i + 1) * step], digest_size=8).digest()
        keys.append(int.from_bytes(previous, "little"))
    return keys


def cacheable_tokens(matched_blocks, prompt_tokens, block_tokens=ENGINE_BLOCK_TOKENS):
    """Cached tokens the engine reports for a prefix match of `matched_blocks` full blocks: at most prompt - 1,
    because the last prompt token is always computed (vLLM's rule, which the simulator follows)."""
    return max(0, min(matched_blocks * block_tokens, prompt_tokens - 1))
