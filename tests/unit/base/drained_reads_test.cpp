// net/drained_reads.h (force-included): after a read that the kernel says left a TCP socket with TCP_INQ on empty, the
// next read waits for epoll instead of trying a recv that finds nothing, and no byte and no end of stream is ever
// left waiting: bytes that arrive while no read is pending, a peek, the end of the stream (also when it came with the
// last bytes: the case that made nginx's short-read rule unsound here), a read that left bytes queued (the next one is
// still tried at once). A socket without the option keeps asio's rule. Real loopback sockets and an event loop;
// recv_calls counts the recv system calls that asio's read operations made.
#include "net/drained_reads.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <array>
#include <chrono>
#include <optional>
#include <string>

namespace prefixgate::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using drained_reads::recv_calls;

class DrainedReadsTest : public ::testing::Test {
 protected:
  DrainedReadsTest() : acceptor_(io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)), peer_(io_), reader_(io_) {
    reader_.connect(acceptor_.local_endpoint());
    acceptor_.accept(peer_);
    EXPECT_TRUE(drained_reads::enable(reader_.native_handle()));
  }

  struct Read {
    bool done = false;
    error_code ec;
    size_t n = 0;
  };

  // Runs the loop for `time` with nothing else to do than what is pending (a timer keeps it in epoll_wait).
  void runFor(std::chrono::milliseconds time) {
    asio::steady_timer keep(io_, time);
    keep.async_wait([](error_code) {});
    io_.run_for(time + std::chrono::milliseconds(50));
    io_.restart();
  }

  // Runs the loop until `read` is done (at most a second).
  void runUntil(const Read& read) {
    for (int i = 0; i < 100 && !read.done; ++i) runFor(std::chrono::milliseconds(10));
  }

  void startRead(Read& read, std::array<char, 64>& buffer) { startRead(reader_, read, buffer); }
  static void startRead(tcp::socket& socket, Read& read, std::array<char, 64>& buffer) {
    socket.async_read_some(asio::buffer(buffer), [&read](error_code ec, size_t n) {
      read.done = true;
      read.ec = ec;
      read.n = n;
    });
  }

  // A read of `reader_` run to its end (at most a second).
  Read readToEnd(std::array<char, 64>& buffer) {
    Read read;
    startRead(read, buffer);
    runUntil(read);
    return read;
  }

  void send(std::string_view bytes) { asio::write(peer_, asio::buffer(bytes.data(), bytes.size())); }

  // A first read of `bytes`, shorter than the buffer, after they all arrived: the socket is drained now.
  void shortRead(std::string_view bytes) {
    send(bytes);
    runFor(std::chrono::milliseconds(5));
    std::array<char, 64> buffer{};
    const Read first = readToEnd(buffer);
    ASSERT_TRUE(first.done);
    ASSERT_FALSE(first.ec);
    ASSERT_EQ(first.n, bytes.size());
  }

  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  tcp::socket peer_;
  tcp::socket reader_;
};

TEST_F(DrainedReadsTest, AReadAfterOneThatDrainedTheSocketWaitsForDataWithoutARecv) {
  shortRead("hello");
  const auto before = recv_calls;
  Read second;
  std::array<char, 64> buffer{};
  startRead(second, buffer);
  runFor(std::chrono::milliseconds(30));
  EXPECT_FALSE(second.done);
  EXPECT_EQ(recv_calls, before) << "a recv was tried on a socket whose last read had emptied it (asio's EAGAIN)";
  send("seven b");
  runUntil(second);
  ASSERT_TRUE(second.done);
  EXPECT_FALSE(second.ec);
  EXPECT_EQ(std::string(buffer.data(), second.n), "seven b");
  EXPECT_EQ(recv_calls, before + 1) << "the data should come with the one recv made when epoll reported it";
}

TEST_F(DrainedReadsTest, BytesThatArriveWhileNoReadIsPendingAreReadAtOnce) {
  shortRead("first");
  // The bytes arrive, and the loop's epoll reports them, while no read is pending: the next read must not wait for
  // another edge (there will be none) but take them at once.
  send("second");
  runFor(std::chrono::milliseconds(20));
  std::array<char, 64> buffer{};
  const Read next = readToEnd(buffer);
  ASSERT_TRUE(next.done) << "bytes that arrived between two reads were left waiting";
  EXPECT_EQ(std::string(buffer.data(), next.n), "second");
}

TEST_F(DrainedReadsTest, BytesThatArriveBeforeTheLoopPollsAreReadToo) {
  shortRead("first");
  send("second");  // no loop pass between the arrival and the next read
  std::array<char, 64> buffer{};
  const Read next = readToEnd(buffer);
  ASSERT_TRUE(next.done);
  EXPECT_EQ(std::string(buffer.data(), next.n), "second");
}

TEST_F(DrainedReadsTest, AReadThatLeftBytesQueuedIsFollowedByARecvAtOnce) {
  const std::string bytes(100, 'x');
  send(bytes);
  std::array<char, 64> buffer{};
  ASSERT_EQ(readToEnd(buffer).n, 64u);
  const auto before = recv_calls;
  Read rest;
  startRead(rest, buffer);
  EXPECT_EQ(recv_calls, before + 1) << "more may be queued after a full read: asio's read is tried at once";
  runUntil(rest);
  ASSERT_TRUE(rest.done);
  EXPECT_EQ(rest.n, 36u);
}

TEST_F(DrainedReadsTest, APeekLeavesTheBytesToRead) {
  send("peeked");
  Read peek;
  std::array<char, 64> peeked{};
  reader_.async_receive(asio::buffer(peeked), asio::socket_base::message_peek, [&peek](error_code ec, size_t n) {
    peek.done = true;
    peek.ec = ec;
    peek.n = n;
  });
  runUntil(peek);
  ASSERT_TRUE(peek.done);
  ASSERT_EQ(peek.n, 6u);
  std::array<char, 64> buffer{};
  const Read read = readToEnd(buffer);
  ASSERT_TRUE(read.done) << "a short peek was taken as draining the socket: its bytes wait for an edge that never comes";
  EXPECT_EQ(std::string(buffer.data(), read.n), "peeked");
}

TEST_F(DrainedReadsTest, TheEndOfTheStreamEndsAWait) {
  shortRead("last bytes");
  Read next;
  std::array<char, 64> buffer{};
  startRead(next, buffer);
  runFor(std::chrono::milliseconds(20));
  ASSERT_FALSE(next.done);
  peer_.shutdown(tcp::socket::shutdown_send);
  runUntil(next);
  ASSERT_TRUE(next.done);
  EXPECT_EQ(next.ec, asio::error::eof);
}

TEST_F(DrainedReadsTest, AnEndThatCameWithTheLastBytesIsSeenAtOnce) {
  // The peer writes its last bytes and closes before the loop polls: one epoll event reports both, the read that
  // returns the bytes leaves the FIN queued, and no later edge will come. Taking that read as draining the socket
  // (nginx's rule without EPOLLRDHUP) leaves the next read waiting forever; the kernel's count says a FIN is pending.
  send("last bytes");
  peer_.shutdown(tcp::socket::shutdown_send);
  runFor(std::chrono::milliseconds(5));
  std::array<char, 64> buffer{};
  const Read first = readToEnd(buffer);
  ASSERT_TRUE(first.done);
  ASSERT_FALSE(first.ec);
  ASSERT_EQ(first.n, 10u);
  const Read next = readToEnd(buffer);
  ASSERT_TRUE(next.done) << "the end of the stream that came with the last bytes was never seen";
  EXPECT_EQ(next.ec, asio::error::eof);
}

TEST_F(DrainedReadsTest, ASocketWithoutTheOptionKeepsAsiosRule) {
  // No TCP_INQ: no count comes with a read, so nothing is taken as drained and asio tries the next read at once.
  tcp::socket plain(io_);
  tcp::socket plain_peer(io_);
  plain.connect(acceptor_.local_endpoint());
  acceptor_.accept(plain_peer);
  asio::write(plain_peer, asio::buffer(std::string_view("short")));
  runFor(std::chrono::milliseconds(5));
  std::array<char, 64> buffer{};
  Read first;
  startRead(plain, first, buffer);
  runUntil(first);
  ASSERT_EQ(first.n, 5u);
  const auto before = recv_calls;
  Read second;
  startRead(plain, second, buffer);
  runFor(std::chrono::milliseconds(20));
  EXPECT_FALSE(second.done);
  EXPECT_EQ(recv_calls, before + 1) << "a socket without TCP_INQ must keep asio's speculative read";
  asio::write(plain_peer, asio::buffer(std::string_view("more")));
  runUntil(second);
  ASSERT_TRUE(second.done);
  EXPECT_EQ(second.n, 4u);
}

TEST_F(DrainedReadsTest, BeastStreamReadsDrainToo) {
  // beast::tcp_stream reads through a buffers_prefix_view of the buffer: the other specialized type.
  boost::beast::tcp_stream stream(std::move(reader_));
  boost::beast::flat_buffer buffer;
  std::optional<size_t> got;
  auto read = [&] {
    got.reset();
    stream.async_read_some(buffer.prepare(1024), [&](error_code ec, size_t n) {
      EXPECT_FALSE(ec);
      buffer.commit(n);
      got = n;
    });
  };
  send("head");
  runFor(std::chrono::milliseconds(5));
  read();
  for (int i = 0; i < 100 && !got; ++i) runFor(std::chrono::milliseconds(10));
  ASSERT_EQ(got, 4u);
  const auto before = recv_calls;
  read();
  runFor(std::chrono::milliseconds(30));
  EXPECT_FALSE(got);
  EXPECT_EQ(recv_calls, before);
  send("body");
  for (int i = 0; i < 100 && !got; ++i) runFor(std::chrono::milliseconds(10));
  ASSERT_EQ(got, 4u);
  EXPECT_EQ(recv_calls, before + 1);
  EXPECT_EQ(boost::beast::buffers_to_string(buffer.data()), "headbody");
}

}  // namespace
}  // namespace prefixgate::net
