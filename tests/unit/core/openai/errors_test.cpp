#include "openai/errors.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

namespace prefixgate::openai {
namespace {

// Ensures every kind has a distinct metric label and a status that matches its OpenAI type family.
TEST(GatewayErrorTable, EveryKindHasAStatusTypeAndDistinctLabel) {
  std::set<std::string_view> labels;
  for (int i = 0; i <= static_cast<int>(GatewayError::kUpstreamResponseTooLarge); ++i) {
    const ErrorInfo& info = errorInfo(static_cast<GatewayError>(i));
    EXPECT_TRUE(info.status >= 400 && info.status < 600) << i;
    EXPECT_FALSE(info.type.empty()) << i;
    EXPECT_TRUE(labels.insert(info.label).second) << "duplicate label " << info.label;
  }
  EXPECT_EQ(errorInfo(GatewayError::kNoReadyPod).status, 503);
  EXPECT_TRUE(errorInfo(GatewayError::kNoReadyPod).retry_after);
  EXPECT_EQ(errorInfo(GatewayError::kUnauthorized).type, "authentication_error");
  EXPECT_FALSE(errorInfo(GatewayError::kUpstreamClosed).retry_after);
}

// Ensures an error body is OpenAI-shaped and never throws on bytes that are not UTF-8 (they are replaced).
TEST(GatewayErrorTable, BodyWithInvalidUtf8IsReplacedNotThrown) {
  std::string body;
  ASSERT_NO_THROW(body = errorBody(GatewayError::kNotFound, "unknown path '/v1/\xff\xfe'"));
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["error"]["code"], 404);
  EXPECT_EQ(j["error"]["type"], "not_found_error");
  EXPECT_EQ(j["error"]["param"], nullptr);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("\xef\xbf\xbd"), std::string::npos);  // U+FFFD
  EXPECT_NO_THROW(errorBody(502, "\xc3(", "\xff"));
}

// Ensures the Anthropic shape comes from the same table: {"type": "error", "error": {"type", "message"}}, its type
// by status.
TEST(GatewayErrorTable, AnthropicShape) {
  const auto j = nlohmann::json::parse(errorBody(GatewayError::kModelNotServed, "no such model", "model",
                                                 ErrorShape::kAnthropic));
  EXPECT_EQ(j, nlohmann::json::parse(R"({"type":"error","error":{"type":"not_found_error","message":"no such model"}})"));
  const std::pair<GatewayError, const char*> cases[] = {
      {GatewayError::kInvalidRequest, "invalid_request_error"}, {GatewayError::kUnauthorized, "authentication_error"},
      {GatewayError::kForbidden, "permission_error"},           {GatewayError::kRateLimited, "rate_limit_error"},
      {GatewayError::kNoReadyPod, "overloaded_error"},          {GatewayError::kUpstreamConnect, "api_error"},
      {GatewayError::kBodyTooLarge, "invalid_request_error"},   {GatewayError::kMethodNotAllowed, "invalid_request_error"},
  };
  for (const auto& [error, type] : cases)
    EXPECT_EQ(nlohmann::json::parse(errorBody(error, "m", {}, ErrorShape::kAnthropic))["error"]["type"], type);
  EXPECT_EQ(nlohmann::json::parse(errorBody(502, "cut", {}, ErrorShape::kAnthropic))["error"]["type"], "api_error");
  EXPECT_NO_THROW(errorBody(GatewayError::kNotFound, "\xff", {}, ErrorShape::kAnthropic));
}

// Ensures printable() keeps valid UTF-8, escapes control bytes, quotes and invalid sequences, and cuts long text.
TEST(Printable, EscapesAndCuts) {
  EXPECT_EQ(printable("caf\xc3\xa9 ok"), "caf\xc3\xa9 ok");
  EXPECT_EQ(printable("a\nb\x01\"\\"), "a\\nb\\x01\\\"\\\\");
  EXPECT_EQ(printable("\xff\xc3("), "\\xff\\xc3(");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate is not UTF-8
  EXPECT_EQ(printable("\xe2\x82"), "\\xe2\\x82");           // a truncated sequence
  EXPECT_EQ(printable(std::string(1000, 'm'), 10), "mmmmmmmmmm...(1000 bytes)");
  // A multi-byte character cut by the limit is escaped, not split.
  EXPECT_EQ(printable("ab\xc3\xa9", 3), "ab\\xc3...(4 bytes)");
}

}  // namespace
}  // namespace prefixgate::openai
