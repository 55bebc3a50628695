#include "proxy/output_tokens.h"

#include <gtest/gtest.h>

#include "engine/engine_load.h"

namespace prefixgate::proxy {
namespace {

// A non-streamed body: usage.completion_tokens is the count, wherever the body is split.
TEST(OutputTokenCounter, ReadsUsageAcrossAnySplit) {
  const std::string body = R"({"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens": 1234,"prompt_tokens":5}})";
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    OutputTokenCounter c;
    c.feed(body.substr(0, cut));
    c.feed(body.substr(cut));
    EXPECT_EQ(c.tokens(), 1234u) << cut;
  }
}

// A stream without usage: one token per `data: {` event, [DONE] not counted, even when split byte by byte.
TEST(OutputTokenCounter, CountsStreamEvents) {
  std::string stream;
  for (int i = 0; i < 7; ++i) stream += "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
  stream += "data: [DONE]\n\n";
  OutputTokenCounter whole, bytewise;
  whole.feed(stream);
  for (char ch : stream) bytewise.feed(std::string_view(&ch, 1));
  EXPECT_EQ(whole.tokens(), 7u);
  EXPECT_EQ(bytewise.tokens(), 7u);
}

// A stream with include_usage: the usage chunk's count wins over the event count.
TEST(OutputTokenCounter, UsageChunkWinsInStreams) {
  OutputTokenCounter c;
  c.feed("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
  c.feed("data: {\"choices\":[],\"usage\":{\"completion_tokens\":42}}\n\ndata: [DONE]\n\n");
  EXPECT_EQ(c.tokens(), 42u);
}

// The capacity EWMA: a steady 100 tokens per 100 ms converges to ~1000 tokens/s.
TEST(EngineLoad, CapacityEwma) {
  engine::EngineLoad load;
  EXPECT_EQ(load.capacityTokensPerSecond(0), 0);
  for (int64_t t = 1000; t <= 61000; t += 100) load.addOutputTokens(100, t);
  EXPECT_NEAR(load.capacityTokensPerSecond(61000), 1000, 50);
}

}  // namespace
}  // namespace prefixgate::proxy
