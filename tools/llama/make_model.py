#!/usr/bin/python3
"""Writes a small llama-architecture GGUF model with random weights for llama-server (tools/llama/README.md).

The weights are seeded random numbers (the same arguments give the same file, byte for byte), so the text the model
generates is noise (but valid UTF-8 of ordinary tokens, never EOS: answers run to max_tokens); what it is for is a
real engine's prefill, decode, prefix cache, tokenizer and HTTP API at a cost a 2-core machine can carry. The
tokenizer is real: every tokenizer.* key of llama.cpp's models/ggml-vocab-llama-spm.gguf (the 32,000-token Llama
SentencePiece vocabulary, BOS added), plus a ChatML chat template so that /apply-template and /v1/chat/completions
work.

Needs Debian's python3-numpy and the gguf-py package of the llama.cpp source that scripts/fetch_llama.sh clones
into tools/llama/src (or --llama-src). Usage: tools/llama/make_model.py --out model.gguf [--seed N] [--embd N] ...
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_SRC = HERE / "src"
VOCAB = Path("models") / "ggml-vocab-llama-spm.gguf"

# ChatML, as Qwen and many others use it; a generation prompt opens the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

WEIGHT_STD = 0.02   # as transformers initialises a llama: activations stay small, nothing overflows in F16
# Random weights would sample every token alike, byte tokens included, and a lone byte token (<0xDF> then "p") is
# invalid UTF-8, which llama-server's chat output parser rejects with a 500 ("does not match the expected
# peg-native format"); EOS would end answers at random lengths. So the model never samples those: every input
# embedding has STEER in dimension 0, a component the small layers cannot cancel, so the final normed hidden state
# is large and positive there (about sqrt(embd)), and the output rows of the tokens it must not sample (unknown,
# control and byte tokens) have -AVOID there, which takes about AVOID * sqrt(embd) (about 30 at embd 256) off their
# logits. The output projection is therefore its own tensor, not tied to token_embd.
STEER = 1.0
AVOID = 2.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the GGUF file to write")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: %(default)s)")
    p.add_argument("--embd", type=int, default=256, help="embedding width (default: %(default)s)")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default: %(default)s)")
    p.add_argument("--heads", type=int, default=4, help="attention heads, also the KV heads (default: %(default)s)")
    p.add_argument("--ff", type=int, default=704, help="feed-forward width (default: %(default)s)")
    p.add_argument("--ctx", type=int, default=8192, help="the model's trained context length (default: %(default)s)")
    p.add_argument("--llama-src", default=str(DEFAULT_SRC),
                   help="llama.cpp source with gguf-py/ and models/ (default: %(default)s)")
    args = p.parse_args(argv)
    if args.embd % args.heads or (args.embd // args.heads) % 2:
        p.error(f"--embd {args.embd} must be a multiple of --heads {args.heads} with an even head size (RoPE)")
    for name in ("embd", "layers", "heads", "ff", "ctx"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive")
    return args


def import_gguf(llama_src):
    gguf_py = Path(llama_src) / "gguf-py"
    if not (gguf_py / "gguf" / "__init__.py").is_file():
        sys.exit(f"make_model: no gguf-py in {llama_src}: run scripts/fetch_llama.sh first")
    sys.path.insert(0, str(gguf_py))
    import gguf
    return gguf


def copy_tokenizer(gguf, reader, writer):
    """Every tokenizer.* key of the vocabulary file, with its own value types."""
    count = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type)
        count += 1
    return count


def write_model(args):
    gguf = import_gguf(args.llama_src)
    vocab_path = Path(args.llama_src) / VOCAB
    reader = gguf.GGUFReader(vocab_path)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    token_types = np.asarray(reader.fields["tokenizer.ggml.token_type"].contents())
    head_dim = args.embd // args.heads
    rng = np.random.default_rng(args.seed)

    def weight(rows, cols):
        # numpy (rows, cols) is ggml's ne = [cols, rows]: `cols` inputs to `rows` outputs.
        return (rng.standard_normal((rows, cols), dtype=np.float32) * WEIGHT_STD).astype(np.float16)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(tmp, "llama")
    writer.add_name(f"prefixgate-random-llama-e{args.embd}-l{args.layers}-h{args.heads}-f{args.ff}-s{args.seed}")
    writer.add_context_length(args.ctx)
    writer.add_embedding_length(args.embd)
    writer.add_block_count(args.layers)
    writer.add_feed_forward_length(args.ff)
    writer.add_head_count(args.heads)
    writer.add_head_count_kv(args.heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if copy_tokenizer(gguf, reader, writer) == 0:
        sys.exit(f"make_model: no tokenizer.* keys in {vocab_path}")
    writer.add_chat_template(CHAT_TEMPLATE)

    token_embd = weight(n_vocab, args.embd)
    token_embd[:, 0] = STEER
    output = weight(n_vocab, args.embd)
    output[:, 0] = np.where(token_types == gguf.TokenType.NORMAL, 0.0, -AVOID)
    writer.add_tensor("token_embd.weight", token_embd)
    writer.add_tensor("output_norm.weight", np.ones(args.embd, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for i in range(args.layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(args.embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(args.embd, args.embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(args.embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(args.ff, args.embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(args.ff, args.embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(args.embd, args.ff))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out)   # atomic: a concurrent reader sees no file or a whole one
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main(argv=None):
    print(write_model(parse_args(argv)).resolve())


if __name__ == "__main__":
    main()
