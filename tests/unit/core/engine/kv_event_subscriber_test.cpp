// The subscriber's pure rule for data-parallel engines: rank r's endpoints are the configured ports + r.
#include "engine/kv_event_subscriber.h"

#include <gtest/gtest.h>

namespace prefixgate::engine {
namespace {

// Ensures rank 0 keeps the endpoint, rank r adds r to the TCP port, and endpoints that cannot be offset give "".
TEST(KvEventSubscriber, DataParallelRankOffsetsThePort) {
  EXPECT_EQ(offsetEndpointPort("tcp://10.0.0.5:5557", 0), "tcp://10.0.0.5:5557");
  EXPECT_EQ(offsetEndpointPort("tcp://10.0.0.5:5557", 3), "tcp://10.0.0.5:5560");
  EXPECT_EQ(offsetEndpointPort("tcp://[::1]:5557", 1), "tcp://[::1]:5558");
  EXPECT_EQ(offsetEndpointPort("tcp://host:65535", 1), "");
  EXPECT_EQ(offsetEndpointPort("ipc:///tmp/kv", 1), "");
  EXPECT_EQ(offsetEndpointPort("tcp://host:port", 1), "");
  EXPECT_EQ(offsetEndpointPort("tcp://host:", 1), "");
}

}  // namespace
}  // namespace prefixgate::engine
