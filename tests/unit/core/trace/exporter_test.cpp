// trace::OtlpExporter: spans leave in batches of max_batch_spans within the export delay; a failing collector
// counts the spans and batches failed; stop() flushes what is queued, bounded by the export timeout; and the real
// HTTP sender gives up on a collector that never answers within the timeout.
#include "trace/exporter.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <mutex>
#include <nlohmann/json.hpp>

namespace prefixgate::trace {
namespace {

using std::chrono::milliseconds;

ExporterOptions options(size_t batch, milliseconds delay = milliseconds(20)) {
  ExporterOptions o;
  o.max_queued_spans = 100;
  o.max_batch_spans = batch;
  o.export_delay = delay;
  o.export_timeout = milliseconds(500);
  return o;
}

Span span() {
  Span s;
  s.name = "s";
  return s;
}

TEST(OtlpExporter, SendsBatchesAndCountsThem) {
  std::mutex mutex;
  std::vector<size_t> batches;
  OtlpExporter exporter(options(2), [&](const std::string& body, milliseconds, std::string&) {
    const auto request = nlohmann::json::parse(body);
    std::lock_guard lock(mutex);
    batches.push_back(request["resourceSpans"][0]["scopeSpans"][0]["spans"].size());
    return true;
  });
  exporter.start();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(exporter.submit(span()));
  // Within the delay all five leave (the last one alone), without stop().
  for (int i = 0; i < 500 && exporter.exportedSpans() < 5; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(exporter.exportedSpans(), 5u);
  exporter.stop();
  std::lock_guard lock(mutex);
  size_t total = 0;
  for (size_t b : batches) {
    EXPECT_LE(b, 2u);
    total += b;
  }
  EXPECT_EQ(total, 5u);
  EXPECT_EQ(exporter.exportedBatches(), batches.size());
  EXPECT_EQ(exporter.failedSpans(), 0u);
}

TEST(OtlpExporter, AFailingCollectorCountsFailedSpans) {
  OtlpExporter exporter(options(10), [](const std::string&, milliseconds, std::string& error) {
    error = "connect: refused";
    return false;
  });
  exporter.start();
  for (int i = 0; i < 3; ++i) exporter.submit(span());
  exporter.stop();  // flushes
  EXPECT_EQ(exporter.failedSpans(), 3u);
  EXPECT_EQ(exporter.failedBatches(), 1u);
  EXPECT_EQ(exporter.exportedSpans(), 0u);
  EXPECT_FALSE(exporter.submit(span()));  // stopped: dropped
  EXPECT_EQ(exporter.droppedSpans(), 1u);
}

// stop() sends what is queued even when the export delay is far off.
TEST(OtlpExporter, StopFlushesQueuedSpans) {
  std::atomic<size_t> sent{0};
  OtlpExporter exporter(options(100, milliseconds(60000)), [&](const std::string& body, milliseconds, std::string&) {
    sent += nlohmann::json::parse(body)["resourceSpans"][0]["scopeSpans"][0]["spans"].size();
    return true;
  });
  exporter.start();
  for (int i = 0; i < 4; ++i) exporter.submit(span());
  const auto start = std::chrono::steady_clock::now();
  exporter.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(sent.load(), 4u);
}

// A collector that accepts the connection and never answers: postJson gives up within the timeout.
TEST(OtlpExporter, PostJsonGivesUpOnASilentCollector) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  OtlpEndpoint endpoint{"127.0.0.1", acceptor.local_endpoint().port(), "/v1/traces"};
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(postJson(endpoint, "{}", milliseconds(200), error));  // the backlog accepts; nobody reads
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(150));
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_NE(error.find("tracing.export_timeout_ms"), std::string::npos) << error;
  acceptor.close();
  error.clear();
  EXPECT_FALSE(postJson(endpoint, "{}", milliseconds(500), error));  // nobody listens
  EXPECT_NE(error.find("connect"), std::string::npos) << error;
}

}  // namespace
}  // namespace prefixgate::trace
