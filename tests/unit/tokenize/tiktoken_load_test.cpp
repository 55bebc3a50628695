// Loading a tiktoken encoder file (errors name the file and the problem) and the byte-pair merge itself, on small
// made-up vocabularies so these run without the fetched cl100k data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "tiktoken_test_support.h"
#include "tokenize/bpe_ranks.h"
#include "tokenize/cl100k_splitter.h"

namespace prefixgate::tokenize {
namespace {

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], '=', '='};
  } else if (bytes.size() - i == 2) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], '='};
  }
  return out;
}

// The 256 single bytes at ranks 0-255 (as in every tiktoken vocabulary), then merges from rank 256 on, in the
// npm package's compact layout.
std::string compactRanks(const std::vector<std::string>& merges) {
  std::string line = "! 0";
  for (int b = 0; b < 256; ++b) line += " " + base64(std::string(1, static_cast<char>(b)));
  for (const std::string& m : merges) line += " " + base64(m);
  return line;
}

std::string encoderJson(const std::string& bpe_ranks) {
  return nlohmann::json{{"pat_str", std::string(kCl100kPattern)},
                        {"special_tokens", {{"<|endoftext|>", 100257}}},
                        {"bpe_ranks", bpe_ranks}}
      .dump();
}

std::unique_ptr<TiktokenTokenizer> tokenizerWith(const std::vector<std::string>& merges) {
  auto loaded = TiktokenTokenizer::parse(encoderJson(compactRanks(merges)), "test.json");
  EXPECT_EQ(loaded.error, "");
  return std::move(loaded.tokenizer);
}

std::string loadError(std::string_view json) { return TiktokenTokenizer::parse(json, "enc.json").error; }

TEST(TiktokenLoad, MissingFileNamesThePath) {
  // Ensures a missing file is an error that names the path, not a crash or an empty vocabulary.
  const auto loaded = TiktokenTokenizer::load("/nonexistent/dir/cl100k_base.json");
  EXPECT_EQ(loaded.tokenizer, nullptr);
  EXPECT_NE(loaded.error.find("/nonexistent/dir/cl100k_base.json: cannot open"), std::string::npos) << loaded.error;
}

TEST(TiktokenLoad, BadJsonNamesTheFileAndWhereItBreaks) {
  // Ensures a truncated or non-JSON file is reported as such, naming the file.
  const std::string path = ::testing::TempDir() + "prefixgate_bad_cl100k.json";
  std::ofstream(path) << "{\"pat_str\": \"x\", \"bpe_ranks\": ";
  const auto loaded = TiktokenTokenizer::load(path);
  std::remove(path.c_str());
  EXPECT_EQ(loaded.tokenizer, nullptr);
  EXPECT_EQ(loaded.error.rfind(path + ": not valid JSON", 0), 0u) << loaded.error;
}

TEST(TiktokenLoad, WrongShapeOrContentIsRefusedWithTheReason) {
  // Ensures each kind of malformed encoder file gets an error saying what is wrong.
  auto has = [](const std::string& error, std::string_view what) {
    return error.rfind("enc.json: ", 0) == 0 && error.find(what) != std::string::npos;
  };
  EXPECT_TRUE(has(loadError("[1, 2]"), "expected a JSON object"));
  EXPECT_TRUE(has(loadError(R"({"bpe_ranks": ""})"), "pat_str is missing"));
  EXPECT_TRUE(has(loadError(R"({"pat_str": "\\s+", "bpe_ranks": ""})"), "not cl100k_base's split pattern"));
  const std::string pat = nlohmann::json(std::string(kCl100kPattern)).dump();
  EXPECT_TRUE(has(loadError(R"({"pat_str": )" + pat + "}"), "bpe_ranks is missing"));
  EXPECT_TRUE(has(loadError(encoderJson("")), "holds no tokens"));
  EXPECT_TRUE(has(loadError(encoderJson("! 0 IQ== !!!")), "field 4: \"!!!\" is not base64"));
  EXPECT_TRUE(has(loadError(encoderJson("! x IQ==")), "rank \"x\" is not a number"));
  EXPECT_TRUE(has(loadError(encoderJson("IQ== 0 1")), "line 1: expected"));
  EXPECT_TRUE(has(loadError(encoderJson("! 0 IQ==")), "no token for the single byte 0x00"));
  EXPECT_TRUE(has(loadError(encoderJson(compactRanks({"ab", "ab"}))), "rank 257 repeats the bytes"));
  EXPECT_TRUE(has(loadError(encoderJson(compactRanks({}) + "\n" + base64("ab") + " 3")), "rank 3 to two tokens"));
  EXPECT_TRUE(has(loadError(encoderJson(compactRanks({"ab"}) + "\n" + base64("cd") + " 4294967295")),
                  "out of range"));
}

TEST(TiktokenLoad, AcceptsBothRankLayouts) {
  // Ensures the .tiktoken layout ("<token> <rank>" lines) loads like the npm package's compact one.
  std::string plain;
  for (int b = 0; b < 256; ++b) plain += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  plain += base64("ab") + " 256\n";
  auto loaded = TiktokenTokenizer::parse(encoderJson(plain), "plain.json");
  ASSERT_NE(loaded.tokenizer, nullptr) << loaded.error;
  EXPECT_EQ(testing::encodeIds(*loaded.tokenizer, "ab"), (std::vector<uint32_t>{256}));
  EXPECT_EQ(loaded.tokenizer->vocabularySize(), 257u);
}

TEST(BytePairMerge, LowestRankFirstThenLeftmost) {
  // Ensures merges follow rank order, ties go to the leftmost pair, and unmergeable bytes stay single.
  auto t = tokenizerWith({"ab", "bc", "abc", "aa"});  // ranks 256, 257, 258, 259
  EXPECT_EQ(testing::encodeIds(*t, "abcd"), (std::vector<uint32_t>{258, 'd'}));  // ab, then ab+c
  EXPECT_EQ(testing::encodeIds(*t, "xbc"), (std::vector<uint32_t>{'x', 257}));
  EXPECT_EQ(testing::encodeIds(*t, "aaaa"), (std::vector<uint32_t>{259, 259}));
  EXPECT_EQ(testing::encodeIds(*t, "aaa"), (std::vector<uint32_t>{259, 'a'}));
  EXPECT_EQ(testing::encodeIds(*t, "abc"), (std::vector<uint32_t>{258}));  // whole-piece hit
}

// Textbook BPE, as slow and plain as possible: the oracle for the fast merges.
std::vector<uint32_t> naiveEncodePiece(const std::map<std::string, uint32_t>& ranks, const std::string& piece) {
  if (auto it = ranks.find(piece); it != ranks.end()) return {it->second};
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == kNoRank) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + static_cast<ptrdiff_t>(at) + 1);
  }
  std::vector<uint32_t> ids;
  for (const std::string& p : parts) ids.push_back(ranks.at(p));
  return ids;
}

TEST(BytePairMerge, ShortAndLongPiecesAgreeWithTextbookBpe) {
  // Ensures both merge paths (stack scan up to 64 bytes, heap beyond) equal textbook BPE on random letter runs
  // (one piece each) over random vocabularies, including vocabularies with unreachable tokens.
  std::mt19937 rng(12345);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string> merges;
    std::map<std::string, uint32_t> ranks;
    for (int b = 0; b < 256; ++b) ranks[std::string(1, static_cast<char>(b))] = static_cast<uint32_t>(b);
    while (merges.size() < 60) {
      std::string m;
      const size_t length = 2 + rng() % 5;
      for (size_t i = 0; i < length; ++i) m += static_cast<char>('a' + rng() % 3);
      if (ranks.emplace(m, static_cast<uint32_t>(256 + merges.size())).second) merges.push_back(m);
    }
    auto t = tokenizerWith(merges);
    for (size_t length : {2u, 5u, 17u, 63u, 64u, 65u, 100u, 300u, 700u}) {
      std::string piece;
      for (size_t i = 0; i < length; ++i) piece += static_cast<char>('a' + rng() % 3);
      ASSERT_EQ(testing::encodeIds(*t, piece), naiveEncodePiece(ranks, piece)) << "round " << round << " " << piece;
    }
  }
}

BpeRanks ranksWith(const std::vector<std::string>& merges) {
  std::vector<BpeRanks::Entry> entries;
  for (int b = 0; b < 256; ++b) entries.push_back({std::string(1, static_cast<char>(b)), static_cast<Rank>(b)});
  for (const std::string& m : merges) entries.push_back({m, static_cast<Rank>(entries.size())});
  BpeRanks ranks;
  std::string error;
  EXPECT_TRUE(ranks.build(entries, error)) << error;
  return ranks;
}

// The boundaries of text where mayJoinAcross says a token may span: '|' where it may not, '.' where it may.
std::string joinMap(const BpeRanks& ranks, std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  std::string map;
  for (size_t x = 0; x + 1 < text.size(); ++x) map += ranks.mayJoinAcross(p, x, text.size()) ? '.' : '|';
  return map;
}

TEST(BytePairMerge, CutsOnlyWhereNoTokenCanSpanTheBoundary) {
  // Ensures each clause of mayJoinAcross: a pair found in no token is a cut (b|c, e|x, w|q); a pair that is a token
  // is not (a.b) even with no triple around it; a pair inside a longer token is not a cut when the triple to its
  // right (c.d in "cde", x.y) or only the one to its left (q.r in "pqr", at the end of the text) is in a token.
  const BpeRanks ranks = ranksWith({"ab", "cde", "xyzw", "pqr"});
  EXPECT_EQ(joinMap(ranks, "abcdexyzwq"), ".|..|...|");
  EXPECT_EQ(joinMap(ranks, "zabz"), "|.|");
  EXPECT_EQ(joinMap(ranks, "pqr"), "..");
  EXPECT_EQ(joinMap(ranks, "spqr"), "|..");
  EXPECT_EQ(joinMap(ranks, "cdx"), "||");  // "cd" is inside "cde", but is no token and "cdx" is in none
}

TEST(BytePairMerge, PiecesCutWhereNoTokenCanSpanAgreeWithTextbookBpe) {
  // Ensures that pieces merged span by span between the boundaries no token can span (spans of one, two, three,
  // up to 64 and over 64 bytes, each merged its own way) give textbook BPE's tokens, on vocabularies built like real ones (each token two earlier ones joined, plus a few
  // unreachable ones) over 16 letters, so that some boundaries are cut by the pair test, some by the triple test,
  // and merges run right up to the cuts. Checks that both cuts and uncut boundaries occur, so it cannot pass empty.
  std::mt19937 rng(2929);
  size_t cuts = 0;
  size_t joins = 0;
  for (int round = 0; round < 30; ++round) {
    std::vector<std::string> merges;
    std::map<std::string, uint32_t> ranks;
    for (int b = 0; b < 256; ++b) ranks[std::string(1, static_cast<char>(b))] = static_cast<uint32_t>(b);
    std::vector<std::string> pool;
    for (char c = 'a'; c < 'a' + 16; ++c) pool.emplace_back(1, c);
    while (merges.size() < 120) {
      std::string m;
      if (rng() % 8 == 0) {
        for (size_t i = 2 + rng() % 4; i > 0; --i) m += static_cast<char>('a' + rng() % 16);
      } else {
        m = pool[rng() % pool.size()] + pool[rng() % pool.size()];
      }
      if (m.size() > 6 || !ranks.emplace(m, static_cast<uint32_t>(256 + merges.size())).second) continue;
      merges.push_back(m);
      pool.push_back(m);
    }
    auto t = tokenizerWith(merges);
    const BpeRanks cut_ranks = ranksWith(merges);
    for (size_t length : {4u, 5u, 9u, 17u, 40u, 65u, 90u, 200u, 500u}) {
      std::string piece;
      // Repeating earlier stretches makes longer tokens occur, so merges also run up to and past the triples.
      while (piece.size() < length) {
        if (piece.size() > 8 && rng() % 3 == 0) {
          piece += piece.substr(rng() % (piece.size() - 6), 2 + rng() % 5);
        } else {
          piece += pool[rng() % pool.size()];
        }
      }
      piece.resize(length);
      const std::string map = joinMap(cut_ranks, piece);
      cuts += static_cast<size_t>(std::count(map.begin(), map.end(), '|'));
      joins += static_cast<size_t>(std::count(map.begin(), map.end(), '.'));
      ASSERT_EQ(testing::encodeIds(*t, piece), naiveEncodePiece(ranks, piece)) << "round " << round << " " << piece;
    }
  }
  EXPECT_GT(cuts, 1000u);
  EXPECT_GT(joins, 1000u);
}

}  // namespace
}  // namespace prefixgate::tokenize
