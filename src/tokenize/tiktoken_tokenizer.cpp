#include "tokenize/tiktoken_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <random>

#include "tokenize/cl100k_splitter.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace prefixgate::tokenize {
namespace {

// Decodes standard base64 (with '=' padding, as tiktoken writes it); false on any other character or length.
bool decodeBase64(std::string_view text, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  if (text.empty() || text.size() % 4 != 0) return false;
  size_t padding = 0;
  while (padding < 2 && text[text.size() - 1 - padding] == '=') ++padding;
  const size_t data_chars = text.size() - padding;
  uint32_t buffer = 0;
  int bits = 0;
  for (size_t i = 0; i < data_chars; ++i) {
    const int v = value(text[i]);
    if (v < 0) return false;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return true;
}

bool parseRank(std::string_view text, uint64_t& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

std::vector<std::string_view> splitOn(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (;;) {
    const size_t at = text.find(sep, begin);
    parts.push_back(text.substr(begin, at == std::string_view::npos ? std::string_view::npos : at - begin));
    if (at == std::string_view::npos) return parts;
    begin = at + 1;
  }
}

// bpe_ranks comes in two layouts: the npm package's compact one, lines of "! <first rank> <token> <token> ..."
// whose tokens take consecutive ranks, and tiktoken's .tiktoken one, lines of "<token> <rank>". Tokens are base64.
bool parseBpeRanks(std::string_view text, std::vector<BpeRanks::Entry>& entries, std::string& error) {
  const std::vector<std::string_view> lines = splitOn(text, '\n');
  std::string bytes;
  for (size_t line_no = 0; line_no < lines.size(); ++line_no) {
    std::string_view line = lines[line_no];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = splitOn(line, ' ');
    const bool compact = fields[0] == "!";
    if (compact ? fields.size() < 2 : fields.size() != 2) {
      error = fmt::format("bpe_ranks line {}: expected \"! <rank> <token>...\" or \"<token> <rank>\"", line_no + 1);
      return false;
    }
    uint64_t rank = 0;
    if (!parseRank(fields[1], rank)) {
      error = fmt::format("bpe_ranks line {}: rank \"{}\" is not a number", line_no + 1, fields[1]);
      return false;
    }
    const size_t first_token = compact ? 2 : 0;
    const size_t last_token = compact ? fields.size() : 1;
    for (size_t f = first_token; f < last_token; ++f, ++rank) {
      if (!decodeBase64(fields[f], bytes)) {
        error = fmt::format("bpe_ranks line {}, field {}: \"{}\" is not base64", line_no + 1, f + 1,
                            fields[f].substr(0, 40));
        return false;
      }
      if (rank >= kNoRank) {
        error = fmt::format("bpe_ranks line {}: rank {} is out of range", line_no + 1, rank);
        return false;
      }
      entries.push_back({bytes, static_cast<Rank>(rank)});
    }
  }
  if (entries.empty()) {
    error = "bpe_ranks holds no tokens";
    return false;
  }
  // tiktoken refuses a vocabulary where two tokens share an id (decoding would be ambiguous); so do we.
  std::vector<Rank> ranks;
  ranks.reserve(entries.size());
  for (const auto& e : entries) ranks.push_back(e.rank);
  std::sort(ranks.begin(), ranks.end());
  const auto dup = std::adjacent_find(ranks.begin(), ranks.end());
  if (dup != ranks.end()) {
    error = fmt::format("bpe_ranks gives rank {} to two tokens", *dup);
    return false;
  }
  return true;
}

}  // namespace

TiktokenTokenizer::LoadResult TiktokenTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {nullptr, fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return {nullptr, fmt::format("{}: cannot read: {}", path, std::strerror(errno))};
  return parse(text.str(), path);
}

TiktokenTokenizer::LoadResult TiktokenTokenizer::parse(std::string_view json_text, std::string_view source) {
  auto fail = [&](std::string_view what) { return LoadResult{nullptr, fmt::format("{}: {}", source, what)}; };
  nlohmann::json doc;
  try {  // start-up only: the parser's message says where the JSON breaks
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    return fail(fmt::format("not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) return fail("expected a JSON object with pat_str, special_tokens and bpe_ranks");

  const auto pat = doc.find("pat_str");
  if (pat == doc.end() || !pat->is_string()) return fail("pat_str is missing or not a string");
  // The split pattern is implemented by hand, so a file for another encoding (p50k, o200k) must be refused
  // rather than silently split the cl100k way.
  if (pat->get_ref<const std::string&>() != kCl100kPattern) {
    return fail("pat_str is not cl100k_base's split pattern (only cl100k_base is supported)");
  }
  const auto special = doc.find("special_tokens");
  if (special != doc.end() && !special->is_object()) return fail("special_tokens is not an object");

  const auto bpe = doc.find("bpe_ranks");
  if (bpe == doc.end() || !bpe->is_string()) return fail("bpe_ranks is missing or not a string");
  std::vector<BpeRanks::Entry> entries;
  std::string error;
  if (!parseBpeRanks(bpe->get_ref<const std::string&>(), entries, error)) return fail(error);

  std::unique_ptr<TiktokenTokenizer> tokenizer(new TiktokenTokenizer());
  if (!tokenizer->ranks_.build(entries, error)) return fail(fmt::format("bpe_ranks: {}", error));
  return {std::move(tokenizer), {}};
}

void TiktokenTokenizer::encode(std::string_view text, std::vector<uint8_t>& out) const {
  // Prose averages about 4 bytes per token, i.e. one output byte per input byte; reserving that up front
  // saves the vector's repeated doubling on long prompts.
  out.reserve(out.size() + text.size());
  if (segments_ && text.size() > kSegmentBytes) {
    encodeSegments(text, out);
  } else {
    encodeText(text, out);
  }
}

void TiktokenTokenizer::encodeText(std::string_view text, std::vector<uint8_t>& out) const {
  Cl100kSplitter splitter(text);
  std::string_view piece;
  while (splitter.next(piece)) bytePairEncode(ranks_, piece, out);
}

void TiktokenTokenizer::enableSegmentCache(size_t max_tokens) {
  if (max_tokens == 0) {
    segments_.reset();
    return;
  }
  // A segment of kSegmentBytes holds at least kSegmentBytes / 128 tokens (cl100k's longest token), so this entry
  // bound never binds before the byte bound does; it only sizes the tables.
  segments_ = std::make_unique<TokenCache>(std::max<size_t>(1, max_tokens / (kSegmentBytes / 128)),
                                           TokenCache::kDefaultShards, max_tokens * kTokenIdBytes);
  segment_seed_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
}

void TiktokenTokenizer::encodeSegments(std::string_view text, std::vector<uint8_t>& out) const {
  uint64_t chain = segment_seed_;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = nextSafeCut(text, begin + kSegmentBytes);
    const std::string_view segment = text.substr(begin, end - begin);
    begin = end;
    chain = XXH3_64bits_withSeed(segment.data(), segment.size(), chain);
    if (const TokenCache::Tokens hit = segments_->find(chain)) {
      segment_hits_.fetch_add(1, std::memory_order_relaxed);
      packTokenIds(*hit, out);
      continue;
    }
    segment_misses_.fetch_add(1, std::memory_order_relaxed);
    const size_t first = out.size();
    encodeText(segment, out);
    auto ids = std::make_shared<std::vector<uint32_t>>();
    ids->reserve((out.size() - first) / kTokenIdBytes);
    for (size_t i = first; i < out.size(); i += kTokenIdBytes) {
      ids->push_back((uint32_t{out[i]} << 24) | (uint32_t{out[i + 1]} << 16) | (uint32_t{out[i + 2]} << 8) |
                     uint32_t{out[i + 3]});
    }
    segments_->insert(chain, std::move(ids));
  }
}

}  // namespace prefixgate::tokenize
