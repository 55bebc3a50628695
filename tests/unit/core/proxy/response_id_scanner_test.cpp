#include "proxy/response_id_scanner.h"

#include <gtest/gtest.h>

#include <string>

#include "proxy/usage_scanner.h"

namespace prefixgate::proxy {
namespace {

std::string scanned(const std::string& body, size_t split) {
  ResponseIdScanner scanner;
  for (size_t i = 0; i < body.size(); i += split) scanner.feed(std::string_view(body).substr(i, split));
  return scanner.id();
}

// Ensures a whole response's top-level id is found however the body is split.
TEST(ResponseIdScanner, WholeResponseAnySplit) {
  const std::string body = R"({"id":"resp_abc","object":"response","output":[{"type":"message","id":"msg_1"}]})";
  for (size_t split : {1, 3, 7, 1000}) EXPECT_EQ(scanned(body, split), "resp_abc") << split;
}

// Ensures a stream's first id (response.created's response.id) is the one read, not an item's later.
TEST(ResponseIdScanner, StreamCreatedEvent) {
  const std::string body =
      "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":"
      "{\"created_at\":1, \"id\": \"resp_7\",\"instructions\":\"say \\\"id\\\": \\\"x\\\"\"}}\n\n"
      "event: response.output_item.added\ndata: {\"item\":{\"id\":\"msg_9\"}}\n\n";
  EXPECT_EQ(scanned(body, 5), "resp_7");
}

// Ensures an "id" inside a string, a non-string id or an id past the scanned head yields nothing.
TEST(ResponseIdScanner, NothingWhereNoId) {
  EXPECT_EQ(scanned(R"({"text":"{\"id\":\"resp_no\"}"})", 4), "");
  EXPECT_EQ(scanned(R"({"id":5,"x":{"id":"resp_later"}})", 4), "");
  const std::string late = "{\"pad\":\"" + std::string(ResponseIdScanner::kMaxScanBytes, 'x') + "\",\"id\":\"resp_z\"}";
  EXPECT_EQ(scanned(late, 100), "");
  EXPECT_EQ(scanned(R"({"id":"bad/id"})", 100), "");
}

// Ensures the usage scanner reads the Responses usage: input, output and cached tokens.
TEST(ResponseIdScanner, UsageScannerReadsResponsesUsage) {
  UsageScanner usage;
  usage.feed(R"({"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":64},"output_tokens":5,)"
             R"("output_tokens_details":{"reasoning_tokens":0},"total_tokens":125}})");
  EXPECT_EQ(usage.promptTokens().value_or(0), 120u);
  EXPECT_EQ(usage.cachedTokens().value_or(0), 64u);
  EXPECT_EQ(usage.outputTokens(), 5u);
}

}  // namespace
}  // namespace prefixgate::proxy
