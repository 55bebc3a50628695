// The upstream pool never hands out a connection its engine has closed: llama.cpp's server closes the connection
// after every streamed response although its head announced keep-alive, and a request written into such a
// connection costs a failed attempt and a retry. Real loopback sockets, no event loop running (nothing waits).
#include "proxy/upstream_pool.h"

#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

namespace prefixgate::proxy {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class UpstreamPoolTest : public ::testing::Test {
 protected:
  // A pooled client connection and the engine's end of it.
  struct Pair {
    std::unique_ptr<UpstreamStream> client;
    tcp::socket engine;
  };
  Pair connect() {
    auto client = std::make_unique<UpstreamStream>(io_);
    client->socket().connect(acceptor_.local_endpoint());
    tcp::socket engine(io_);
    acceptor_.accept(engine);
    return {std::move(client), std::move(engine)};
  }
  asio::io_context io_;
  tcp::acceptor acceptor_{io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  UpstreamPool pool_{io_, std::chrono::seconds(60)};
};

// Ensures an idle connection the engine keeps open is reused.
TEST_F(UpstreamPoolTest, OpenConnectionIsReused) {
  Pair p = connect();
  UpstreamStream* given = p.client.get();
  pool_.give(PodId{1}, std::move(p.client));
  EXPECT_EQ(pool_.take(PodId{1}).get(), given);
  EXPECT_EQ(pool_.staleDetected(), 0u);
}

// Ensures a connection the engine closed while it sat in the pool is dropped and counted, and the next one in the
// pool is handed out instead.
TEST_F(UpstreamPoolTest, ClosedByTheEngineIsNeverReused) {
  Pair open = connect();
  Pair closed = connect();
  UpstreamStream* open_stream = open.client.get();
  pool_.give(PodId{1}, std::move(open.client));
  pool_.give(PodId{1}, std::move(closed.client));  // the most recent: tried first
  closed.engine.close();
  EXPECT_EQ(pool_.take(PodId{1}).get(), open_stream);
  EXPECT_EQ(pool_.staleDetected(), 1u);
  EXPECT_EQ(pool_.take(PodId{1}), nullptr);
}

// Ensures a connection on which the engine sent bytes nobody asked for is not reused: they would be read as the
// next request's response.
TEST_F(UpstreamPoolTest, UnaskedBytesMakeAConnectionUnusable) {
  Pair p = connect();
  pool_.give(PodId{1}, std::move(p.client));
  asio::write(p.engine, asio::buffer(std::string_view("HTTP/1.1 200 OK\r\n")));
  EXPECT_EQ(pool_.take(PodId{1}), nullptr);
  EXPECT_EQ(pool_.staleDetected(), 1u);
}

// Ensures the relay's count of requests that met a closed connection anyway is kept apart.
TEST_F(UpstreamPoolTest, StaleSentIsCountedApart) {
  pool_.countStaleSent();
  pool_.countStaleSent();
  EXPECT_EQ(pool_.staleSent(), 2u);
  EXPECT_EQ(pool_.staleDetected(), 0u);
}

}  // namespace
}  // namespace prefixgate::proxy
