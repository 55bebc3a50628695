// Token-for-token equality with the reference encoder (npm tiktoken's cl100k_base encode_ordinary), on the
// committed corpus and, when a file is given, on a randomized differential corpus.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tiktoken_test_support.h"

namespace prefixgate::tokenize {
namespace {

using testing::countDifferences;
using testing::encodeIds;

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<nlohmann::json> readJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(readFile(path));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

// A failure message that shows where the sequences part, with a few ids either side.
std::string describeDifference(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want, size_t first) {
  auto window = [&](const std::vector<uint32_t>& ids) {
    const size_t from = first >= 3 ? first - 3 : 0;
    const size_t to = std::min(ids.size(), first + 4);
    return from < to ? std::vector<uint32_t>(ids.begin() + from, ids.begin() + to) : std::vector<uint32_t>{};
  };
  return fmt::format("first difference at token {} (of {} expected, {} got); expected near it {}, got {}", first,
                     want.size(), got.size(), window(want), window(got));
}

TEST(TiktokenExactness, CorpusMatchesReferenceIds) {
  // Ensures zero differing tokens against the reference on every text of the committed corpus.
  std::string error;
  const TiktokenTokenizer* tokenizer = testing::sharedCl100k(error);
  if (tokenizer == nullptr) GTEST_SKIP() << error;

  const std::string data = std::string(PREFIXGATE_SOURCE_DIR) + "/tests/unit/tokenize/data/";
  const std::vector<nlohmann::json> corpus = readJsonLines(data + "corpus.jsonl");
  const nlohmann::json expected = nlohmann::json::parse(readFile(data + "corpus.cl100k.json"));
  ASSERT_EQ(corpus.size(), expected.at("texts").size()) << "regenerate with tools/tiktoken/encode_corpus.mjs";

  size_t total_tokens = 0;
  size_t total_diffs = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string name = corpus[i].at("name");
    ASSERT_EQ(name, expected["texts"][i].at("name")) << "regenerate with tools/tiktoken/encode_corpus.mjs";
    const std::vector<uint32_t> want = expected["texts"][i].at("ids");
    const std::vector<uint32_t> got = encodeIds(*tokenizer, corpus[i].at("text").get<std::string>());
    size_t first = 0;
    const size_t diffs = countDifferences(got, want, first);
    EXPECT_EQ(diffs, 0u) << name << ": " << describeDifference(got, want, first);
    total_tokens += want.size();
    total_diffs += diffs;
  }
  EXPECT_GT(total_tokens, 1000u);
  EXPECT_EQ(total_diffs, 0u);
}

TEST(TiktokenExactness, TokenCountIsBytesOverFour) {
  // Ensures tokenCount reads the 4-byte packing back and encode appends rather than replaces.
  std::string error;
  const TiktokenTokenizer* tokenizer = testing::sharedCl100k(error);
  if (tokenizer == nullptr) GTEST_SKIP() << error;
  std::vector<uint8_t> out{1, 2, 3, 4};
  tokenizer->encode("Hello world", out);  // "Hello" = 9906 = 0x26B2, " world" = 1917 = 0x077D
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 2, 3, 4, 0, 0, 0x26, 0xB2, 0, 0, 0x07, 0x7D}));
  EXPECT_EQ(tokenizer->tokenCount(out), 3u);
  EXPECT_EQ(tokenizer->name(), "tiktoken");
  EXPECT_EQ(tokenizer->vocabularySize(), 100256u);
}

TEST(TiktokenExactness, SpecialTokensAreOrdinaryText) {
  // Ensures <|endoftext|> is encoded as its characters, never as the special id 100257 (encode_ordinary).
  std::string error;
  const TiktokenTokenizer* tokenizer = testing::sharedCl100k(error);
  if (tokenizer == nullptr) GTEST_SKIP() << error;
  const std::vector<uint32_t> ids = encodeIds(*tokenizer, "<|endoftext|>");
  EXPECT_EQ(ids, (std::vector<uint32_t>{27, 91, 8862, 728, 428, 91, 29}));
}

TEST(TiktokenExactness, InvalidUtf8IsEncodedByteWise) {
  // Ensures bytes that are not UTF-8 neither crash nor vanish: every input byte is covered by some token.
  std::string error;
  const TiktokenTokenizer* tokenizer = testing::sharedCl100k(error);
  if (tokenizer == nullptr) GTEST_SKIP() << error;
  static constexpr char kText[] = "ok \xFF\xFE\xC3 caf\xC3\xA9 \xE2\x82 \xED\xA0\x80 end\xF0\x9F";
  const std::string text(kText, sizeof(kText) - 1);
  std::vector<uint8_t> out;
  tokenizer->encode(text, out);
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(out.size() % 4, 0u);
  EXPECT_LE(tokenizer->tokenCount(out), text.size());
}

TEST(TiktokenExactness, ConcurrentEncodesAgreeWithSerial) {
  // Ensures one shared tokenizer gives every thread the same ids (const encode, thread-local scratch only).
  std::string error;
  const TiktokenTokenizer* tokenizer = testing::sharedCl100k(error);
  if (tokenizer == nullptr) GTEST_SKIP() << error;
  // Long runs take the heap-based merge, whose scratch is per thread.
  const std::vector<std::string> texts = {std::string(5000, ' ') + "x", std::string(3000, '=') + "\n",
                                          "Hello, world! It's 2024.\n\tcode();", std::string(2000, 'q')};
  std::vector<std::vector<uint8_t>> serial(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) tokenizer->encode(texts[i], serial[i]);
  std::vector<size_t> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < mismatches.size(); ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;
      for (int round = 0; round < 50; ++round) {
        const size_t i = (t + static_cast<size_t>(round)) % texts.size();
        out.clear();
        tokenizer->encode(texts[i], out);
        if (out != serial[i]) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<size_t>(4, 0));
}

// Hand-run check (tools/tiktoken/differential.mjs writes the file and runs this): every line of
// PREFIXGATE_TIKTOKEN_DIFF_FILE is {"text": ..., "ids": [...]} from the reference encoder.
TEST(TiktokenExactness, DifferentialFile) {
  const char* path = std::getenv("PREFIXGATE_TIKTOKEN_DIFF_FILE");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "set PREFIXGATE_TIKTOKEN_DIFF_FILE to run";
  std::string error;
  const TiktokenTokenizer* tokenizer = testing::sharedCl100k(error);
  ASSERT_NE(tokenizer, nullptr) << error;

  const std::vector<nlohmann::json> lines = readJsonLines(path);
  ASSERT_FALSE(lines.empty()) << path;
  size_t texts = 0, bytes = 0, tokens = 0, diffs = 0, failing_texts = 0;
  for (const nlohmann::json& line : lines) {
    const std::string text = line.at("text");
    const std::vector<uint32_t> want = line.at("ids");
    const std::vector<uint32_t> got = encodeIds(*tokenizer, text);
    size_t first = 0;
    const size_t d = countDifferences(got, want, first);
    if (d != 0 && ++failing_texts <= 5) {
      ADD_FAILURE() << "text " << texts << ": " << describeDifference(got, want, first)
                    << "\ntext: " << nlohmann::json(text).dump();
    }
    ++texts;
    bytes += text.size();
    tokens += want.size();
    diffs += d;
  }
  std::cout << fmt::format("differential: {} texts, {} bytes, {} reference tokens, {} differing tokens\n", texts,
                           bytes, tokens, diffs);
  EXPECT_EQ(diffs, 0u);
}

}  // namespace
}  // namespace prefixgate::tokenize
