#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

constexpr uint32_t kFnv32Offset = 2166136261u;
constexpr uint32_t kFnv32Prime = 16777619u;
constexpr uint64_t kFnv64Offset = 14695981039346656037ull;
constexpr uint64_t kFnv64Prime = 1099511628211ull;

}  // namespace

uint32_t tokenId(std::string_view piece) {
  uint32_t hash = kFnv32Offset;
  for (unsigned char byte : piece) {
    hash ^= byte;
    hash *= kFnv32Prime;
  }
  return hash;
}

std::vector<uint32_t> tokenize(std::string_view text) {
  std::vector<uint32_t> tokens;
  appendTokens(text, tokens);
  return tokens;
}

void appendTokens(std::string_view text, std::vector<uint32_t>& tokens) {
  tokens.reserve(tokens.size() + (text.size() + kBytesPerToken - 1) / kBytesPerToken);
  for (size_t offset = 0; offset < text.size(); offset += kBytesPerToken)
    tokens.push_back(tokenId(text.substr(offset, kBytesPerToken)));
}

size_t specialMarkerLength(std::string_view text) {
  if (text.size() < 5 || text.substr(0, 2) != "<|") return 0;
  size_t end = text.find("|>", 2);
  if (end == std::string_view::npos || end == 2 || end - 2 > kMaxSpecialNameBytes) return 0;
  for (char c : text.substr(2, end - 2)) {
    bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                   c == '.' || c == '-';
    if (!allowed) return 0;
  }
  return end + 2;
}

std::vector<TokenPiece> tokenizePieces(std::string_view text, bool add_bos, bool parse_special) {
  std::vector<TokenPiece> pieces;
  if (add_bos) pieces.push_back({specialTokenId(kBosMarker), std::string(kBosMarker)});
  auto plain = [&pieces](std::string_view run) {
    for (size_t offset = 0; offset < run.size(); offset += kBytesPerToken) {
      std::string_view piece = run.substr(offset, kBytesPerToken);
      pieces.push_back({tokenId(piece), std::string(piece)});
    }
  };
  size_t run_start = 0;
  for (size_t at = parse_special ? text.find("<|") : std::string_view::npos; at != std::string_view::npos;
       at = text.find("<|", at)) {
    size_t length = specialMarkerLength(text.substr(at));
    if (length == 0) {
      ++at;
      continue;
    }
    plain(text.substr(run_start, at - run_start));
    std::string_view marker = text.substr(at, length);
    pieces.push_back({specialTokenId(marker), std::string(marker)});
    at += length;
    run_start = at;
  }
  plain(text.substr(run_start));
  return pieces;
}

std::vector<uint32_t> tokenizeSpecial(std::string_view text, bool add_bos, bool parse_special) {
  std::vector<uint32_t> ids;
  for (const TokenPiece& piece : tokenizePieces(text, add_bos, parse_special)) ids.push_back(piece.id);
  return ids;
}

uint64_t tokensDigest(std::span<const uint32_t> tokens) {
  uint64_t hash = kFnv64Offset;
  for (uint32_t token : tokens) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash ^= (token >> shift) & 0xffu;
      hash *= kFnv64Prime;
    }
  }
  return hash;
}

}  // namespace prefixgate::sim
