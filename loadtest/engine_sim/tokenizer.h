#pragma once
// The simulator's stand-in for a model tokenizer: text is cut into tokens of kBytesPerToken bytes (the last one
// may be shorter) and each token's id is a 32-bit FNV-1a hash of its bytes. Chat-template markers ("<|user|>")
// are special tokens, one id each, so every message's content starts a fresh run of pieces, as a real tokenizer
// restarts at a special token. Deterministic across runs and processes, so a test, the benchmark's replica
// (loadtest/bench/textgen.py) or the gateway's remote tokenizer sees the same ids as the engine.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::sim {

inline constexpr size_t kBytesPerToken = 4;

// The id of one token: FNV-1a (32-bit) over its bytes.
uint32_t tokenId(std::string_view piece);

// Splits text into ceil(size / kBytesPerToken) tokens and returns their ids.
std::vector<uint32_t> tokenize(std::string_view text);
// The same, appended to `tokens`.
void appendTokens(std::string_view text, std::vector<uint32_t>& tokens);

// The id of a special marker such as "<|user|>": one token, whatever its length.
inline uint32_t specialTokenId(std::string_view marker) { return tokenId(marker); }

// The beginning-of-sequence token a llama.cpp-style tokenizer adds (add_special): one special token.
inline constexpr std::string_view kBosMarker = "<|bos|>";
inline constexpr size_t kMaxSpecialNameBytes = 32;

// The length of the special marker that `text` starts with, 0 when none: "<|" + 1 to kMaxSpecialNameBytes of
// [A-Za-z0-9_.-] + "|>" ("<|user|>", "<|end|>", kBosMarker). What a tokenizer that parses special tokens in text
// (llama.cpp's parse_special) reads as one token.
size_t specialMarkerLength(std::string_view text);

// One token and the text it stands for.
struct TokenPiece {
  uint32_t id = 0;
  std::string piece;
};

// llama-server's tokenizer (llamacpp dialect): kBosMarker first when add_bos, then, with parse_special, every
// special marker in the text is one token (specialTokenId) and the text between markers is cut into pieces on its
// own, as the chat template's tokens are; without parse_special the whole text is plain pieces.
std::vector<TokenPiece> tokenizePieces(std::string_view text, bool add_bos, bool parse_special);
std::vector<uint32_t> tokenizeSpecial(std::string_view text, bool add_bos, bool parse_special);

// A 64-bit digest of a token sequence (FNV-1a over the ids), used to seed the output text and embeddings.
uint64_t tokensDigest(std::span<const uint32_t> tokens);

}  // namespace prefixgate::sim
