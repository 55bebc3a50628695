// trace::encodeExportRequest writes OTLP/HTTP's JSON mapping exactly: lowerCamelCase keys, hex ids, integer enums,
// 64-bit integers as decimal strings, typed attribute values, events and status.
#include "trace/otlp_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace prefixgate::trace {
namespace {

using nlohmann::json;

template <size_t N>
std::array<char, N> hex(std::string_view text) {
  std::array<char, N> out{};
  std::copy_n(text.begin(), N, out.begin());
  return out;
}

Span sample() {
  Span s;
  s.trace_id = hex<32>("4bf92f3577b34da6a3ce929d0e0e4736");
  s.span_id = hex<16>("b7ad6b7169203331");
  s.parent_span_id = hex<16>("00f067aa0ba902b7");
  s.has_parent = true;
  s.trace_state = "congo=t61rcWkgMzE";
  s.name = "POST /v1/chat/completions";
  s.kind = SpanKind::kServer;
  s.start_time_unix_nano = 1700000000123456789ULL;
  s.end_time_unix_nano = 1700000000987654321ULL;
  s.set("gen_ai.request.model", "m");
  s.set("gen_ai.usage.output_tokens", int64_t{9007199254740993});  // beyond a double's exact integers
  s.set("prefixgate.prefix_match_ratio", 0.5);
  s.set("prefixgate.stream", true);
  s.events.push_back({"first_token", 1700000000200000000ULL, {{"prefixgate.time_to_first_token_ms", 76.5}}});
  s.fail("upstream failed");
  return s;
}

TEST(OtlpJson, EncodesAnExportTraceServiceRequest) {
  Resource resource;
  resource.service_name = "gw";
  resource.service_instance_id = "replica-1";
  const Span spans[] = {sample()};
  const json request = json::parse(encodeExportRequest(resource, spans));
  const json& rs = request.at("resourceSpans").at(0);
  const json& resource_attributes = rs.at("resource").at("attributes");
  EXPECT_EQ(resource_attributes.at(0), json::parse(R"({"key":"service.name","value":{"stringValue":"gw"}})"));
  EXPECT_EQ(resource_attributes.at(1),
            json::parse(R"({"key":"service.instance.id","value":{"stringValue":"replica-1"}})"));
  const json& scope_spans = rs.at("scopeSpans").at(0);
  EXPECT_EQ(scope_spans.at("scope").at("name"), "prefixgate");
  const json& span = scope_spans.at("spans").at(0);
  EXPECT_EQ(span.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(span.at("spanId"), "b7ad6b7169203331");
  EXPECT_EQ(span.at("parentSpanId"), "00f067aa0ba902b7");
  EXPECT_EQ(span.at("traceState"), "congo=t61rcWkgMzE");
  EXPECT_EQ(span.at("name"), "POST /v1/chat/completions");
  EXPECT_EQ(span.at("kind"), 2);  // SPAN_KIND_SERVER, an integer
  EXPECT_EQ(span.at("startTimeUnixNano"), "1700000000123456789");  // fixed64: a decimal string
  EXPECT_EQ(span.at("endTimeUnixNano"), "1700000000987654321");
  const json& attributes = span.at("attributes");
  ASSERT_EQ(attributes.size(), 4u);
  EXPECT_EQ(attributes.at(0), json::parse(R"({"key":"gen_ai.request.model","value":{"stringValue":"m"}})"));
  EXPECT_EQ(attributes.at(1),
            json::parse(R"({"key":"gen_ai.usage.output_tokens","value":{"intValue":"9007199254740993"}})"));
  EXPECT_EQ(attributes.at(2).at("value").at("doubleValue"), 0.5);
  EXPECT_EQ(attributes.at(3).at("value").at("boolValue"), true);
  const json& event = span.at("events").at(0);
  EXPECT_EQ(event.at("name"), "first_token");
  EXPECT_EQ(event.at("timeUnixNano"), "1700000000200000000");
  EXPECT_EQ(event.at("attributes").at(0).at("value").at("doubleValue"), 76.5);
  EXPECT_EQ(span.at("status"), json::parse(R"({"code":2,"message":"upstream failed"})"));
}

// A root span has no parentSpanId; an unset status is code 0 without a message; no events, no "events" key.
TEST(OtlpJson, RootSpanAndUnsetStatus) {
  Span s;
  s.trace_id = hex<32>("0af7651916cd43dd8448eb211c80319c");
  s.span_id = hex<16>("b9c7c989f97918e1");
  s.name = "route";
  const Span spans[] = {s};
  const json span = json::parse(encodeExportRequest(Resource{}, spans))["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
  EXPECT_FALSE(span.contains("parentSpanId"));
  EXPECT_FALSE(span.contains("traceState"));
  EXPECT_FALSE(span.contains("events"));
  EXPECT_EQ(span.at("kind"), 1);  // SPAN_KIND_INTERNAL
  EXPECT_EQ(span.at("status"), json::parse(R"({"code":0})"));
}

// Client text that is not UTF-8 cannot break the export: it is replaced.
TEST(OtlpJson, InvalidUtf8IsReplacedNotThrown) {
  Span s;
  s.set("gen_ai.request.model", std::string_view("m\xff\xfe", 3));
  const Span spans[] = {s};
  std::string body;
  ASSERT_NO_THROW(body = encodeExportRequest(Resource{}, spans));
  EXPECT_TRUE(json::accept(body));
}

}  // namespace
}  // namespace prefixgate::trace
