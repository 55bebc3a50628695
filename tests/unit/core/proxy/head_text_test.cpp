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

}  // namespace
}  // namespace prefixgate::proxy
