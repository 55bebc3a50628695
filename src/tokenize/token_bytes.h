#pragma once
// The gateway's one "4 bytes per token": how many bytes a token takes in the index's encoding of a prompt, where
// block sizes, capacities and prefill estimates turn tokens into bytes and back.
#include <cstddef>

namespace prefixgate::tokenize {

// Bytes per token id in the buffers of every token-id tokenizer (tiktoken, the engine's remote tokenizer, prompts
// that arrive as ids): a big-endian uint32 each (AIBrix's packing). A block of block_size tokens is block_size x
// this many bytes, so a block size in bytes must be a multiple of it.
inline constexpr size_t kTokenIdBytes = 4;

// Bytes of the index's encoding per ENGINE token until a model's engines report usage (routing::BytesPerToken then
// learns the real ratio): exact for the ids of the engine's own vocabulary, and about what English text averages
// per token with the character tokenizer.
inline constexpr double kDefaultBytesPerToken = static_cast<double>(kTokenIdBytes);

}  // namespace prefixgate::tokenize
