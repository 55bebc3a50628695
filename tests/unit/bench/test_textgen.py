"""textgen: the simulator's tokenization and output, replicated; checked against published FNV-1a and SplitMix64
values and against a second, independent implementation written here."""
import functools
import json
import struct

from bench import textgen
from bench.textgen import (cacheable_tokens, cached_sequence, engine_block_keys, engine_token_count, engine_tokens, fnv1a32, fnv1a64,
                           predicted_reply, predicted_reply_tokens, reply_seed, splitmix64, text_tokens, token_id)

M64 = 2 ** 64


def ref_fnv(data, offset, prime, bits):
    """FNV-1a written as a fold, modulo 2**bits (independent of textgen's loop)."""
    return functools.reduce(lambda h, b: ((h ^ b) * prime) % (2 ** bits), data, offset)


def ref_id(piece):
    return ref_fnv(piece.encode(), 0x811C9DC5, 0x01000193, 32)


def ref_splitmix(x):
    z = (x + 0x9E3779B97F4A7C15) % M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % M64
    return z ^ (z >> 31)


WORDS = ("the and for are but not you all any can had her was one our out day get has him his how man new now old "
         "see two way who boy did its let put say she too use gpu llm row key map set bit log run top end sum max "
         "min net web sky sea sun red big low far hot cup").split()


def ref_reply(prompt_ids, n):
    seed = ref_fnv(b"".join(struct.pack("<I", t) for t in prompt_ids), 0xCBF29CE484222325, 0x100000001B3, 64)
    return "".join(" " + WORDS[ref_splitmix(seed ^ ref_splitmix(i)) % 64] for i in range(n))


def test_fnv1a_matches_the_published_test_vectors():
    """Ensures both FNV-1a widths give the reference values of the FNV specification."""
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"foobar") == 0xBF9CF968
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_splitmix64_matches_the_reference_generator():
    """Ensures splitmix64(x) is SplitMix64's output for state x: seeded with 0, the generator yields these three."""
    golden = 0x9E3779B97F4A7C15
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert splitmix64(golden) == 0x6E789E6AA1B965F4
    assert splitmix64(2 * golden % M64) == 0x06C45D188009454F


def test_token_id_is_fnv1a32_of_the_piece():
    """Ensures a token id is the 32-bit FNV-1a of the piece's bytes, for text and marker pieces alike."""
    assert token_id("a") == 0xE40C292C
    for piece in ["hell", "o", "<|user|>", "<|end|>", " the", "é"]:
        assert token_id(piece) == ref_id(piece)


def test_plain_text_is_cut_into_4_byte_pieces():
    """Ensures plain text becomes 4-byte pieces of its UTF-8 bytes, the last one shorter."""
    assert text_tokens("hello world") == [ref_id("hell"), ref_id("o wo"), ref_id("rld")]
    assert text_tokens("") == []
    assert text_tokens("ééé") == [ref_fnv("éé".encode(), 0x811C9DC5, 0x01000193, 32),
                                  ref_fnv("é".encode(), 0x811C9DC5, 0x01000193, 32)]   # 6 bytes: 4 + 2


def test_chat_prompt_tokens_are_built_per_message():
    """Ensures a chat prompt is [<|role|>] + its own pieces + [<|end|>] per message, then [<|assistant|>]: pieces
    restart at every message."""
    messages = [{"role": "system", "content": "abcde"}, {"role": "user", "content": "fgh"}]
    assert engine_tokens(messages) == [ref_id("<|system|>"), ref_id("abcd"), ref_id("e"), ref_id("<|end|>"),
                                       ref_id("<|user|>"), ref_id("fgh"), ref_id("<|end|>"), ref_id("<|assistant|>")]
    # (2 + ceil(5/4)) + (2 + ceil(3/4)) + 1 = 4 + 3 + 1
    assert engine_token_count(messages) == 8


def test_chat_content_parts_null_content_and_tools():
    """Ensures content arrays join their text parts, null content is empty, and tools come first as compact JSON."""
    tools = [{"type": "function", "function": {"name": "f"}}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]},
                {"role": "assistant", "content": None}]
    dumped = '[{"function":{"name":"f"},"type":"function"}]'   # keys sorted, no spaces
    assert textgen.tools_json(tools) == dumped
    pieces = [dumped[i:i + 4] for i in range(0, len(dumped), 4)]
    expected = ([ref_id("<|tools|>")] + [ref_id(p) for p in pieces] + [ref_id("<|end|>")]
                + [ref_id("<|user|>"), ref_id("abcd"), ref_id("<|end|>"), ref_id("<|assistant|>"), ref_id("<|end|>"),
                   ref_id("<|assistant|>")])
    assert engine_tokens(messages, tools) == expected
    assert engine_token_count(messages, tools) == len(expected) == 2 + len(pieces) + 3 + 2 + 1


def test_token_count_formula_agrees_with_the_tokens_for_multibyte_text():
    """Ensures the closed-form count and the token list agree, UTF-8 bytes (not characters) counted."""
    messages = [{"role": "system", "content": "añb€" * 7}, {"role": "user", "content": "x" * 17}]
    assert engine_token_count(messages) == len(engine_tokens(messages)) == (2 + 49 // 4 + 1) + (2 + 5) + 1


def test_reply_seed_feeds_each_id_as_4_little_endian_bytes():
    """Ensures the output seed is FNV-1a 64 over the ids' little-endian bytes (empty prompt: the offset basis)."""
    assert reply_seed([]) == 0xCBF29CE484222325
    assert reply_seed([0x61]) == fnv1a64(b"a\x00\x00\x00")
    assert reply_seed([1, 0x01020304]) == fnv1a64(bytes([1, 0, 0, 0, 4, 3, 2, 1]))


def test_predicted_reply_matches_an_independent_derivation():
    """Ensures the predicted output is " " + WORDS[splitmix64(seed ^ splitmix64(i)) % 64] per token."""
    for prompt in ([], [1, 2, 3], engine_tokens([{"role": "user", "content": "hi there"}])):
        assert predicted_reply(prompt, 12) == ref_reply(prompt, 12)
    # By hand for the empty prompt's first token: seed = the offset basis.
    first = WORDS[ref_splitmix(0xCBF29CE484222325 ^ 0xE220A8397B1DCDAF) % 64]
    assert predicted_reply([], 1) == " " + first
    assert textgen.OUTPUT_WORDS == WORDS


def test_a_reply_is_one_token_per_word_and_continues_the_cached_sequence():
    """Ensures a reply's 4-byte pieces are its token ids, and that the next turn's prompt starts with prompt +
    reply (so the engine's cached output blocks can hit)."""
    first = [{"role": "system", "content": "abc " * 30}, {"role": "user", "content": "question"}]
    prompt = engine_tokens(first)
    reply = predicted_reply(prompt, 20)
    assert len(reply.encode()) == 80 and all(len(w) == 3 for w in reply.split(" ")[1:])
    reply_ids = predicted_reply_tokens(prompt, 20)
    assert reply_ids == [ref_id(reply[i:i + 4]) for i in range(0, 80, 4)]
    second = engine_tokens(first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "more"}])
    assert second[:len(prompt) + 20] == prompt + reply_ids
    assert prompt[-1] == ref_id("<|assistant|>")


def test_block_keys_identify_whole_prefixes():
    """Ensures block keys cover full 16-token blocks only, and two sequences share exactly the keys of the blocks
    before their first difference (chained keys)."""
    a = list(range(100, 140))            # 40 tokens: 2 full blocks
    b = a[:35] + [7, 8, 9, 10, 11]       # differs in block 2 (tokens 32..47) only
    c = [0] + a[1:]                      # differs in token 0
    ka, kb, kc = engine_block_keys(a), engine_block_keys(b), engine_block_keys(c)
    assert len(ka) == 2 and len(engine_block_keys(a[:15])) == 0 and len(engine_block_keys(a[:32])) == 2
    assert ka == kb                      # the difference is in the partial third block
    assert engine_block_keys(a + [1] * 8)[:2] == ka
    assert kc[0] != ka[0] and kc[1] != ka[1]   # chained: block 1 is identical but its key is not
    assert engine_block_keys(a[:16] + [5] * 16)[0] == ka[0] and engine_block_keys(a[:16] + [5] * 16)[1] != ka[1]


def test_cacheable_tokens_counts_full_blocks_within_prompt_minus_one():
    """Ensures the engine's cached_tokens rule: matched full blocks within the first prompt - 1 tokens."""
    assert cacheable_tokens(3, 33) == 32    # (33 - 1) // 16 = 2 blocks usable
    assert cacheable_tokens(2, 32) == 16    # (32 - 1) // 16 = 1: the last prompt token is always computed
    assert cacheable_tokens(1, 17) == 16
    assert cacheable_tokens(1, 16) == 0
    assert cacheable_tokens(5, 1000) == 80
    assert cacheable_tokens(0, 100) == 0 and cacheable_tokens(3, 0) == 0


def test_words_are_seeded_single_tokens():
    """Ensures words() is deterministic per seed and yields exactly one token per word."""
    text = textgen.words(("x", 1), 25)
    assert text == textgen.words(("x", 1), 25) != textgen.words(("x", 2), 25)
    assert len(text_tokens(text)) == 25 and len(text) == 100
    assert json.loads(json.dumps(text)) == text


def test_the_engine_caches_every_token_but_the_last_generated_one():
    """Ensures the cached sequence is prompt + reply without its last token (sampled, never fed back, so it has no
    KV): 49 + 15 tokens leave 3 full blocks, as the simulator answers, and 49 + 16 leave 4."""
    prompt = list(range(49))
    assert len(engine_block_keys(cached_sequence(prompt, list(range(100, 115))))) == 3
    assert len(engine_block_keys(cached_sequence(prompt, list(range(100, 116))))) == 4
    assert cached_sequence(prompt, []) == prompt and cached_sequence([1], [2, 3]) == [1, 2]
