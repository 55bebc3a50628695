#include "tokenize/tokenizer.h"

#include "tokenize/bpe_ranks.h"

namespace prefixgate::tokenize {

Tokenizer::~Tokenizer() = default;

void CharacterTokenizer::encode(std::string_view text, std::vector<uint8_t>& out) const {
  out.insert(out.end(), text.begin(), text.end());
}

void packTokenIds(std::span<const uint32_t> ids, std::vector<uint8_t>& out) {
  out.reserve(out.size() + ids.size() * kTokenIdBytes);
  for (uint32_t id : ids) appendTokenId(id, out);
}

}  // namespace prefixgate::tokenize
