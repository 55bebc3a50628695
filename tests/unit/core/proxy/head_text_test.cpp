// The relay's head text: end-to-end fields are copied in order, connection-scoped ones (hop-by-hop, those the
// Connection header names, Content-Length) and those the writer sets itself are left out.
#include "proxy/head_text.h"

#include <gtest/gtest.h>

#include <boost/beast/http/fields.hpp>

namespace prefixgate::proxy {
namespace {

TEST(HeadText, CopiesOnlyEndToEndFieldsTheWriterDoesNotSet) {
  boost::beast::http::fields fields;
  fields.insert("Content-Type", "application/json");
  fields.insert("Connection", "keep-alive, X-Hop");
  fields.insert("X-Hop", "dropped: named by Connection");
  fields.insert("Transfer-Encoding", "chunked");
  fields.insert("Content-Length", "12");
  fields.insert("request-id", "the engine's");
  fields.insert("X-Kept", "a");
  fields.insert("x-kept", "b");
  std::string out = "HEAD\r\n";
  appendEndToEndFields(out, fields, [](const auto& field) { return field.name_string() == "request-id"; });
  EXPECT_EQ(out, "HEAD\r\nContent-Type: application/json\r\nX-Kept: a\r\nx-kept: b\r\n");
}

// What engines send (Connection: keep-alive or close) names no other field: nothing is looked up in it, and
// nothing but the hop-by-hop fields is dropped. Any other name in it is looked up, in any case.
TEST(HeadText, ConnectionTokensNameOtherFieldsOnlyBeyondTheHopByHopOnes) {
  EXPECT_FALSE(namesOtherFields(""));
  EXPECT_FALSE(namesOtherFields("keep-alive"));
  EXPECT_FALSE(namesOtherFields("Close"));
  EXPECT_FALSE(namesOtherFields("Keep-Alive"));
  EXPECT_TRUE(namesOtherFields("keep-alivf"));
  EXPECT_TRUE(namesOtherFields("closed"));
  EXPECT_FALSE(namesOtherFields("close, Keep-Alive, TE, upgrade"));
  EXPECT_TRUE(namesOtherFields("keep-alive, X-Hop"));
  EXPECT_TRUE(namesOtherFields("x-hop"));

  boost::beast::http::fields fields;
  fields.insert("Connection", "Keep-Alive");
  fields.insert("Keep-Alive", "timeout=5");
  fields.insert("X-Kept", "a");
  fields.insert("Upgrade", "h2c");
  std::string out;
  appendEndToEndFields(out, fields, [](const auto&) { return false; });
  EXPECT_EQ(out, "X-Kept: a\r\n");

  boost::beast::http::fields named;
  named.insert("Connection", "close, x-hop");
  named.insert("X-HOP", "dropped");
  named.insert("X-Kept", "a");
  out.clear();
  appendEndToEndFields(out, named, [](const auto&) { return false; });
  EXPECT_EQ(out, "X-Kept: a\r\n");
}

// Every hop-by-hop name, by its field code and by its text in any case; end-to-end ones are neither.
TEST(HeadText, HopByHopByFieldCodeAndByName) {
  using boost::beast::http::field;
  for (const char* name : {"connection", "Keep-Alive", "proxy-connection", "TE", "trailer", "Transfer-Encoding",
                           "upgrade", "expect", "Proxy-Authorization"}) {
    EXPECT_TRUE(isHopByHop(name)) << name;
    EXPECT_TRUE(isHopByHop(boost::beast::http::string_to_field(name))) << name;
  }
  for (const char* name : {"content-type", "authorization", "x-request-id", "X-Custom", "host", "trailers"}) {
    EXPECT_FALSE(isHopByHop(name)) << name;
    EXPECT_FALSE(isHopByHop(boost::beast::http::string_to_field(name))) << name;
  }
  EXPECT_FALSE(isHopByHop(field::unknown));
}

}  // namespace
}  // namespace prefixgate::proxy
