#include "net/listener.h"

#include <gtest/gtest.h>

namespace prefixgate::net {
namespace {

// splitHostPort accepts HOST:PORT and [v6]:PORT and rejects anything else.
TEST(SplitHostPort, ParsesAndRejects) {
  std::string host;
  uint16_t port = 1;
  ASSERT_TRUE(splitHostPort("127.0.0.1:8080", host, port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(splitHostPort("[::1]:0", host, port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0);
  EXPECT_FALSE(splitHostPort("127.0.0.1", host, port));
  EXPECT_FALSE(splitHostPort("127.0.0.1:", host, port));
  EXPECT_FALSE(splitHostPort(":80", host, port));
  EXPECT_FALSE(splitHostPort("h:65536", host, port));
  EXPECT_FALSE(splitHostPort("h:8x", host, port));
}

}  // namespace
}  // namespace prefixgate::net
