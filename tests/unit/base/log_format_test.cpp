// The log's two formats: the text line's shape, and JSON records that stay one valid line whatever the text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "util/log.h"

namespace prefixgate::log {
namespace {

// 2026-01-02T03:04:05.678Z
const std::chrono::system_clock::time_point kNow =
    std::chrono::system_clock::time_point(std::chrono::milliseconds(1767323045678));

TEST(LogFormat, ParsesTextAndJsonOnly) {
  Format f = Format::kJson;
  ASSERT_TRUE(parseFormat("text", f));
  EXPECT_EQ(f, Format::kText);
  ASSERT_TRUE(parseFormat("json", f));
  EXPECT_EQ(f, Format::kJson);
  EXPECT_FALSE(parseFormat("JSON", f));
  EXPECT_FALSE(parseFormat("", f));
  EXPECT_FALSE(parseFormat("logfmt", f));
}

TEST(LogFormat, TextLineIsTimeLevelMessage) {
  EXPECT_EQ(textLine(Level::kWarn, "pod engine-0 unreachable", kNow),
            "2026-01-02T03:04:05.678Z WARN pod engine-0 unreachable\n");
}

TEST(LogFormat, JsonRecordHasTsLevelMsgInOrder) {
  const std::string line = dumpRecord(record(Level::kInfo, "started", kNow));
  EXPECT_EQ(line, R"({"ts":"2026-01-02T03:04:05.678Z","level":"info","msg":"started"})"
                  "\n");
}

// Quotes, backslashes, control characters and newlines are escaped: the record stays one parseable line.
TEST(LogFormat, JsonEscapesClientText) {
  nlohmann::ordered_json r = record(Level::kError, "bad \"model\"\n\\ \x01", kNow);
  r["model"] = "a\"b\nc";
  const std::string line = dumpRecord(r);
  ASSERT_EQ(line.find('\n'), line.size() - 1);
  const auto parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["msg"], "bad \"model\"\n\\ \x01");
  EXPECT_EQ(parsed["model"], "a\"b\nc");
  EXPECT_EQ(parsed["level"], "error");
}

// Invalid UTF-8 (a client may send any bytes) never throws: the bad bytes become U+FFFD, valid UTF-8 is kept.
TEST(LogFormat, JsonReplacesInvalidUtf8) {
  nlohmann::ordered_json r = record(Level::kInfo, "request", kNow);
  r["model"] = std::string("caf\xc3\xa9-\xff\xfe-\xc3");
  std::string line;
  ASSERT_NO_THROW(line = dumpRecord(r));
  const auto parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["model"], "caf\xc3\xa9-\xef\xbf\xbd\xef\xbf\xbd-\xef\xbf\xbd");
}

}  // namespace
}  // namespace prefixgate::log
