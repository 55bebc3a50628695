// The request line in both formats (server/request_log.h): the text line keeps the shape tools and tests parse, and
// the JSON record carries the same fields under the same names, client text escaped and bounded.
#include "server/request_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "util/log.h"

namespace prefixgate::server {
namespace {

RequestLogEntry fullEntry() {
  RequestLogEntry e;
  e.id = "abc123";
  e.method = "POST";
  e.path = "/v1/chat/completions";
  e.model = "my-model";
  e.strategy = "prefix-cache";
  e.pod = "engine-0";
  e.match_percent = 75;
  e.status = 200;
  e.latency_seconds = 0.12346;
  e.first_byte_seconds = 0.0456;
  e.output_tokens = 12;
  e.cached_tokens = 96;
  e.predicted_cached_tokens = 100;
  e.key = "team-a";
  e.stream = true;
  e.retries = 1;
  e.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  return e;
}

nlohmann::json jsonOf(const RequestLogEntry& e) {
  nlohmann::ordered_json record = log::record(log::Level::kInfo, "request");
  addRequestLogFields(e, record);
  return nlohmann::json::parse(log::dumpRecord(record));
}

TEST(RequestLog, TextLineKeepsItsShape) {
  EXPECT_EQ(requestLogText(fullEntry()),
            "request id=abc123 POST /v1/chat/completions model=my-model strategy=prefix-cache pod=engine-0 match=75 "
            "status=200 latency_ms=123.5 ttfb_ms=45.6 output_tokens=12 cached_tokens=96 predicted_cached_tokens=100 "
            "key=team-a stream=true retries=1");
  RequestLogEntry bare;
  bare.id = "x";
  bare.method = "GET";
  bare.path = "/v1/models";
  bare.status = 404;
  bare.reason = "model_not_found";
  bare.message = "no pod serves \"m\"";
  EXPECT_EQ(requestLogText(bare),
            "request id=x GET /v1/models model=- strategy=- pod=- match=- status=404 latency_ms=0.0 "
            "reason=model_not_found error=\"no pod serves \\\"m\\\"\"");
}

TEST(RequestLog, JsonCarriesTheSameFields) {
  const nlohmann::json j = jsonOf(fullEntry());
  EXPECT_EQ(j["msg"], "request");
  EXPECT_EQ(j["level"], "info");
  EXPECT_TRUE(j.contains("ts"));
  EXPECT_EQ(j["id"], "abc123");
  EXPECT_EQ(j["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/v1/chat/completions");
  EXPECT_EQ(j["model"], "my-model");
  EXPECT_EQ(j["strategy"], "prefix-cache");
  EXPECT_EQ(j["pod"], "engine-0");
  EXPECT_EQ(j["match"], 75);
  EXPECT_EQ(j["status"], 200);
  EXPECT_DOUBLE_EQ(j["latency_ms"].get<double>(), 123.5);
  EXPECT_DOUBLE_EQ(j["ttfb_ms"].get<double>(), 45.6);
  EXPECT_EQ(j["output_tokens"], 12);
  EXPECT_EQ(j["cached_tokens"], 96);
  EXPECT_EQ(j["predicted_cached_tokens"], 100);
  EXPECT_EQ(j["key"], "team-a");
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["retries"], 1);
}

// A field the text line leaves out or shows as "-" is absent from the object; the error and reason are kept.
TEST(RequestLog, JsonLeavesAbsentFieldsOut) {
  RequestLogEntry e;
  e.id = "x";
  e.method = "POST";
  e.path = "/v1/chat/completions";
  e.status = 400;
  e.reason = "invalid_request";
  e.message = "bad body";
  const nlohmann::json j = jsonOf(e);
  for (const char* absent : {"model", "strategy", "pod", "match", "ttfb_ms", "output_tokens", "cached_tokens",
                             "predicted_cached_tokens", "pd", "key", "stream", "retries", "trace_id"})
    EXPECT_FALSE(j.contains(absent)) << absent;
  EXPECT_EQ(j["reason"], "invalid_request");
  EXPECT_EQ(j["error"], "bad body");
}

TEST(RequestLog, JsonHasTheDisaggregationFields) {
  RequestLogEntry e = fullEntry();
  e.pd_outcome = "disaggregated";
  e.prefill_pod = "prefill-0";
  e.prefill_match_percent = 50;
  e.prefill_seconds = 0.01;
  e.handoff_seconds = 0.002;
  e.prefill_retries = 1;
  e.transfer_note = "bad params";
  const nlohmann::json j = jsonOf(e);
  EXPECT_EQ(j["pd"], "disaggregated");
  EXPECT_EQ(j["prefill_pod"], "prefill-0");
  EXPECT_EQ(j["prefill_match"], 50);
  EXPECT_DOUBLE_EQ(j["prefill_ms"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(j["handoff_ms"].get<double>(), 2);
  EXPECT_EQ(j["prefill_retries"], 1);
  EXPECT_EQ(j["transfer"], "bad params");
  EXPECT_NE(requestLogText(e).find(" pd=disaggregated prefill_pod=prefill-0 prefill_match=50 prefill_ms=10.0 "
                                   "handoff_ms=2.0 prefill_retries=1 transfer=\"bad params\""),
            std::string::npos);
}

// Client-given text: quotes, newlines and bytes that are not UTF-8 stay one parseable line; long text is cut.
TEST(RequestLog, JsonEscapesAndBoundsClientText) {
  RequestLogEntry e = fullEntry();
  const std::string model = std::string("evil\"model\n\xff\xfe");
  const std::string path = "/v1/" + std::string(1000, 'p');
  e.model = model;
  e.path = path;
  nlohmann::ordered_json record = log::record(log::Level::kInfo, "request");
  addRequestLogFields(e, record);
  std::string line;
  ASSERT_NO_THROW(line = log::dumpRecord(record));
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["model"], "evil\"model\n\xef\xbf\xbd\xef\xbf\xbd");
  const std::string logged = j["path"];
  EXPECT_LT(logged.size(), 300u);
  EXPECT_NE(logged.find("(1004 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace prefixgate::server
