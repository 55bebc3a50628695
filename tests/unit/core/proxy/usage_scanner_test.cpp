#include "proxy/usage_scanner.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine_load.h"

namespace prefixgate::proxy {
namespace {

// Feeds `text` cut at `cut` (and, when `second` is given, at that second cut too).
UsageScanner scanned(std::string_view text, size_t cut, size_t second = std::string_view::npos,
                     bool responses = false) {
  UsageScanner s(responses);
  second = std::min(second, text.size());
  s.feed(text.substr(0, cut));
  s.feed(text.substr(cut, second - cut));
  s.feed(text.substr(second));
  return s;
}

UsageScanner bytewise(std::string_view text, bool responses = false) {
  UsageScanner s(responses);
  for (char ch : text) s.feed(std::string_view(&ch, 1));
  return s;
}

// A vLLM-shaped non-streamed body with usage and prompt_tokens_details.
const std::string kBody =
    R"({"id":"cmpl-1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":98765,"total_tokens":100000,)"
    R"("completion_tokens": 1234,"prompt_tokens_details":{"cached_tokens":98304}}})";

// A non-streamed body: completion, prompt and cached tokens are read wherever the body is split (one or two cuts).
TEST(UsageScanner, ReadsUsageAcrossAnySplit) {
  for (size_t cut = 0; cut <= kBody.size(); ++cut) {
    for (size_t second : {std::string_view::npos, cut + 1, cut + 5, cut + 17}) {
      UsageScanner s = scanned(kBody, cut, second);
      EXPECT_EQ(s.outputTokens(), 1234u) << cut << " " << second;
      EXPECT_EQ(s.promptTokens(), 98765u) << cut << " " << second;
      EXPECT_EQ(s.cachedTokens(), 98304u) << cut << " " << second;
    }
  }
  UsageScanner s = bytewise(kBody);
  EXPECT_EQ(s.outputTokens(), 1234u);
  EXPECT_EQ(s.promptTokens(), 98765u);
  EXPECT_EQ(s.cachedTokens(), 98304u);
}

// A stream without usage: one token per `data: {` event, [DONE] not counted, even when split byte by byte; no
// prompt or cached tokens.
TEST(UsageScanner, CountsStreamEvents) {
  std::string stream;
  for (int i = 0; i < 7; ++i) stream += "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
  stream += "data: [DONE]\n\n";
  UsageScanner whole;
  whole.feed(stream);
  EXPECT_EQ(whole.outputTokens(), 7u);
  EXPECT_EQ(bytewise(stream).outputTokens(), 7u);
  EXPECT_FALSE(whole.promptTokens());
  EXPECT_FALSE(whole.cachedTokens());
}

// A JSON answer (Content-Type application/json) is one document: "data: {" inside one of its strings is text, not
// an event, so it counts no output token; its usage is read as from any body.
TEST(UsageScanner, AJsonBodyCountsNoEvents) {
  const std::string body = R"({"choices":[{"message":{"content":"data: {"a":1}

data: {"b":2}"}}]})";
  UsageScanner as_stream;
  as_stream.feed(body);
  EXPECT_EQ(as_stream.outputTokens(), 2u);  // what the scan finds when the body may be a stream
  UsageScanner as_json(false, false);
  as_json.feed(body);
  EXPECT_EQ(as_json.outputTokens(), 0u);
  UsageScanner with_usage(false, false);
  with_usage.feed(kBody);
  EXPECT_EQ(with_usage.outputTokens(), 1234u);
  EXPECT_EQ(with_usage.promptTokens(), 98765u);
}

TEST(UsageScanner, JsonMediaTypes) {
  EXPECT_TRUE(isJsonMediaType("application/json"));
  EXPECT_TRUE(isJsonMediaType("Application/JSON; charset=utf-8"));
  EXPECT_TRUE(isJsonMediaType("APPLICATION/JSON"));
  EXPECT_FALSE(isJsonMediaType("application/jsom"));
  EXPECT_FALSE(isJsonMediaType("application.json"));
  EXPECT_FALSE(isJsonMediaType("bpplication/json"));
  EXPECT_TRUE(isJsonMediaType(" application/json ;charset=utf-8"));
  EXPECT_FALSE(isJsonMediaType(""));
  EXPECT_FALSE(isJsonMediaType("text/event-stream"));
  EXPECT_FALSE(isJsonMediaType("text/event-stream; charset=utf-8"));
  EXPECT_FALSE(isJsonMediaType("application/jsonl"));
  EXPECT_FALSE(isJsonMediaType("application/x-ndjson"));
}

// A stream with include_usage: the usage chunk's numbers are read at any split, and its completion count wins
// over the event count.
TEST(UsageScanner, ReadsTheStreamUsageChunkAcrossAnySplit) {
  std::string stream;
  for (int i = 0; i < 3; ++i) stream += "data: {\"choices\":[{\"delta\":{\"content\":\" xyz\"}}]}\n\n";
  stream += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":517,\"total_tokens\":520,\"completion_tokens\":3,"
            "\"prompt_tokens_details\":{\"cached_tokens\":512}}}\n\ndata: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    UsageScanner s = scanned(stream, cut);
    EXPECT_EQ(s.outputTokens(), 3u) << cut;
    EXPECT_EQ(s.promptTokens(), 517u) << cut;
    EXPECT_EQ(s.cachedTokens(), 512u) << cut;
  }
  UsageScanner s = bytewise(stream);
  EXPECT_EQ(s.promptTokens(), 517u);
  EXPECT_EQ(s.cachedTokens(), 512u);
}

// No prompt_tokens_details (or a null one, as vLLM without prefix caching sends): no cached tokens, but the
// prompt tokens are read; keys that merely contain a key's name do not count.
TEST(UsageScanner, AbsentCachedTokens) {
  for (std::string body :
       {std::string(R"({"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42}})"),
        std::string(R"({"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":null}})"),
        std::string(R"({"usage":{"prompt_tokens":40,"num_cached_tokens":9,"xcached_tokens":8,)"
                    R"("completion_tokens":2}})")}) {
    for (size_t cut = 0; cut <= body.size(); ++cut) {
      UsageScanner s = scanned(body, cut);
      EXPECT_EQ(s.promptTokens(), 40u) << body << " " << cut;
      EXPECT_FALSE(s.cachedTokens()) << body << " " << cut;
      EXPECT_EQ(s.outputTokens(), 2u) << body << " " << cut;
    }
  }
  UsageScanner none;
  none.feed(R"({"object":"list","data":[{"embedding":[0.1]}]})");
  EXPECT_FALSE(none.promptTokens());
  EXPECT_FALSE(none.cachedTokens());
  // Key names inside generated text arrive escaped (\"cached_tokens\"), so they never match.
  UsageScanner text;
  text.feed(R"({"choices":[{"message":{"content":"say \"cached_tokens\": 5, and \"prompt_tokens\": 6"}}]})");
  EXPECT_FALSE(text.promptTokens());
  EXPECT_FALSE(text.cachedTokens());
}

// Ensures llama.cpp's streams, whose usage comes only with stream_options.include_usage, still give the prompt and
// cached tokens from the `timings` of their last chunk (cache_n cached, prompt_n computed), at any split; and
// usage wins over timings when both are there.
TEST(UsageScanner, ReadsLlamaCppTimingsAcrossAnySplit) {
  std::string stream;
  for (int i = 0; i < 3; ++i) stream += "data: {\"choices\":[{\"delta\":{\"content\":\" w\"}}]}\n\n";
  stream += "data: {\"choices\":[{\"finish_reason\":\"length\",\"delta\":{}}],\"timings\":{\"cache_n\":1536,"
            "\"prompt_n\":23,\"prompt_ms\":40.5,\"predicted_n\":3,\"predicted_ms\":9.1}}\n\ndata: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    UsageScanner s = scanned(stream, cut);
    EXPECT_EQ(s.cachedTokens(), 1536u) << cut;
    EXPECT_EQ(s.promptTokens(), 1559u) << cut;
    EXPECT_EQ(s.outputTokens(), 4u) << cut;  // the SSE events: no completion_tokens without usage
  }
  const std::string both = R"({"usage":{"prompt_tokens":100,"completion_tokens":2,)"
                           R"("prompt_tokens_details":{"cached_tokens":64}},"timings":{"cache_n":60,"prompt_n":30}})";
  UsageScanner s = bytewise(both);
  EXPECT_EQ(s.promptTokens(), 100u);
  EXPECT_EQ(s.cachedTokens(), 64u);
  UsageScanner half;
  half.feed(R"({"timings":{"cache_n":60,"predicted_n":3}})");  // no prompt_n: the prompt's size is unknown
  EXPECT_EQ(half.cachedTokens(), 60u);
  EXPECT_FALSE(half.promptTokens());
}

// Continuous usage stats (a usage object on every chunk): the last values win, at any split.
TEST(UsageScanner, TheLastValueWins) {
  std::string stream;
  for (int i = 1; i <= 4; ++i)
    stream += "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":" +
              std::to_string(100 + i) + ",\"completion_tokens\":" + std::to_string(i) +
              ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(16 * i) + "}}}\n\n";
  stream += "data: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    UsageScanner s = scanned(stream, cut);
    EXPECT_EQ(s.promptTokens(), 104u) << cut;
    EXPECT_EQ(s.cachedTokens(), 64u) << cut;
    EXPECT_EQ(s.outputTokens(), 4u) << cut;
  }
  UsageScanner s = bytewise(stream);
  EXPECT_EQ(s.promptTokens(), 104u);
  EXPECT_EQ(s.cachedTokens(), 64u);
}

// A number cut at the very end of the body (no delimiter after it) is never taken as complete.
TEST(UsageScanner, IncompleteNumberIsNotRead) {
  UsageScanner s;
  s.feed(R"({"usage":{"cached_tokens":12)");
  EXPECT_FALSE(s.cachedTokens());
  s.feed("3}");
  EXPECT_EQ(s.cachedTokens(), 123u);
}

// A match too long to be found across a split (a key padded with spaces, a number of more than 20 digits) is
// ignored however the body is cut, and a number beyond 64 bits is never taken (found by upstream_response_fuzz:
// read whole it was taken, wrapped; cut, it was missed).
TEST(UsageScanner, OverlongMatchesAreIgnoredWhateverTheSplit) {
  const std::string body = R"({"usage":{"prompt_tokens":)" + std::string(40, ' ') + R"(12,"cached_tokens":)" +
                           std::string(40, '1') + R"(,"completion_tokens":18446744073709551616,"x":1}})";
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    UsageScanner s = scanned(body, cut);
    EXPECT_FALSE(s.promptTokens()) << cut;
    EXPECT_FALSE(s.cachedTokens()) << cut;
    EXPECT_EQ(s.outputTokens(), 0u) << cut;
  }
  UsageScanner s = bytewise(body);
  EXPECT_FALSE(s.promptTokens());
  EXPECT_FALSE(s.cachedTokens());
  // The largest 64-bit value still reads.
  s.feed(R"({"completion_tokens":18446744073709551615})");
  EXPECT_EQ(s.outputTokens(), 18446744073709551615u);
}

// Anthropic's stream: message_start's usage (input tokens, one output token), then message_delta's final output
// count; read wherever the stream is split, and cache_read_input_tokens is not taken for input_tokens.
TEST(UsageScanner, ReadsAnthropicUsageAcrossAnySplit) {
  const std::string stream =
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":321,"
      "\"cache_read_input_tokens\":77,\"output_tokens\":1}}}\n\n"
      "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\" ab\"}}\n\n"
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    UsageScanner s = scanned(stream, cut);
    EXPECT_EQ(s.outputTokens(), 42u) << cut;
    EXPECT_EQ(s.promptTokens(), 321u) << cut;
    EXPECT_FALSE(s.cachedTokens()) << cut;
  }
  EXPECT_EQ(bytewise(stream).outputTokens(), 42u);
}

// A Responses stream (a scanner told so): the last event's sequence_number is read across any split (the number a gateway-written error
// event follows); a body without one has none, and a longer key ending the same way is not it.
TEST(UsageScanner, ReadsTheLastResponsesSequenceNumberAcrossAnySplit) {
  const std::string stream =
      "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{}}\n\n"
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\","
      "\"sequence_number\": 17}\n\n"
      "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":18,"
      "\"delta\":\"y\"}\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut)
    EXPECT_EQ(scanned(stream, cut, std::string_view::npos, true).lastSequenceNumber(), 18u) << cut;
  EXPECT_EQ(bytewise(stream, true).lastSequenceNumber(), 18u);
  EXPECT_FALSE(bytewise(kBody, true).lastSequenceNumber());
  EXPECT_FALSE(bytewise(R"({"max_sequence_number":5})", true).lastSequenceNumber());
  // Another endpoint's body is never searched for them.
  EXPECT_FALSE(bytewise(stream).lastSequenceNumber());
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
