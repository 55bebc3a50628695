// net::ReadyReader, the relay's read of an engine's response body without tcp_stream's per-read timer: every byte
// reaches the parser in order whatever the pauses and sizes of the engine's writes, a stall longer than the idle
// limit ends the read with a timeout (and only then), the end of a close-delimited body is its end, a cut chunked
// body is a partial message, and closing the socket (the client watcher's hang-up) ends a wait at once. And
// net::IdleDeadline, kept for a connection's life: a paused deadline never cancels, a shorter limit after a longer
// one is kept, and waits cost no timer work each. Real loopback sockets and an event loop.
#include "net/ready_io.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <array>
#include <functional>
#include <string>
#include <vector>

namespace prefixgate::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One engine write, then a pause before the next.
struct Step {
  std::string bytes;
  milliseconds pause{0};
};

std::string chunk(const std::string& data) {
  char size[20];
  return std::string(size, static_cast<size_t>(snprintf(size, sizeof size, "%zx\r\n", data.size()))) + data + "\r\n";
}

constexpr std::string_view kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

class ReadyReaderTest : public ::testing::Test {
 protected:
  struct Result {
    std::string body;        // the body bytes the parser gave, in order
    error_code ec;           // how the reading ended
    bool done = false;       // the parser saw the whole message
    Clock::time_point last_byte;  // when the last body bytes came
    Clock::time_point ended;      // when the reading ended
    size_t reads = 0;             // read() calls that returned body bytes
  };

  // The engine writes `steps` (then holds the connection open for `hold`, then closes it) while the reader relays
  // the response through a `relay_bytes` buffer, as the relay does, under an idle limit of `idle`.
  Result run(std::vector<Step> steps, milliseconds idle, milliseconds hold, size_t relay_bytes = 16 * 1024) {
    tcp::socket engine(io_);
    tcp::socket gateway(io_);
    gateway.connect(acceptor_.local_endpoint());
    acceptor_.accept(engine);
    asio::co_spawn(io_, write(engine, std::move(steps), hold), asio::detached);
    Result result;
    asio::co_spawn(io_, read(gateway, idle, relay_bytes, result), asio::detached);
    io_.run_for(std::chrono::seconds(20));
    return result;
  }

  asio::awaitable<void> write(tcp::socket& engine, std::vector<Step> steps, milliseconds hold) {
    asio::steady_timer timer(io_);
    for (const Step& step : steps) {
      co_await asio::async_write(engine, asio::buffer(step.bytes), asio::use_awaitable);
      timer.expires_after(step.pause);
      co_await timer.async_wait(asio::use_awaitable);
    }
    timer.expires_after(hold);
    co_await timer.async_wait(asio::use_awaitable);
    engine.close();
  }

  asio::awaitable<void> read(tcp::socket& gateway, milliseconds idle, size_t relay_bytes, Result& result) {
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    beast::flat_buffer buffer;
    IdleDeadline deadline(gateway);
    ReadyReader reader(gateway, deadline, idle);
    std::vector<char> relay(relay_bytes);
    error_code ec;
    while (!ec && !parser.is_header_done()) co_await reader.read(parser, buffer, ec);
    while (!ec && !parser.is_done()) {
      parser.get().body().data = relay.data();
      parser.get().body().size = relay.size();
      co_await reader.read(parser, buffer, ec);
      if (ec == http::error::need_buffer) ec = {};
      const size_t n = relay.size() - parser.get().body().size;
      if (n > 0) {
        result.body.append(relay.data(), n);
        result.last_byte = Clock::now();
        ++result.reads;
      }
    }
    result.ec = ec;
    result.done = parser.is_done();
    result.ended = Clock::now();
    io_.stop();  // the engine's hold is not waited out
  }

  asio::io_context io_;
  tcp::acceptor acceptor_{io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
};

// Ensures every byte of a stream reaches the parser in order across pauses longer than a read takes, writes split
// inside a chunk's size line and inside its data, and a chunk larger than the relay's buffer (reads that fill their
// space are followed by more at once), and that a stall past the idle limit then ends the read with a timeout no
// earlier than the limit (and long before the engine's own close).
TEST_F(ReadyReaderTest, RelaysEveryByteInOrderThenTimesOutOnAStall) {
  const std::string event1 = "data: {\"n\":1}\n\n";
  const std::string event2 = "data: {\"n\":2,\"text\":\"split across two writes\"}\n\n";
  const std::string big = "data: " + std::string(40 * 1024, 'x') + "\n\n";
  const std::string event3 = "data: {\"n\":3}\n\n";
  const std::string c2 = chunk(event2);
  const std::string c3 = chunk(event3);
  const milliseconds idle(400);
  Result r = run({{std::string(kChunkedHead) + chunk(event1), milliseconds(150)},
                  {c2.substr(0, 1), milliseconds(60)},  // inside the chunk-size line
                  {c2.substr(1, 20), milliseconds(60)},
                  {c2.substr(21), milliseconds(60)},
                  {chunk(big) + c3.substr(0, 7), milliseconds(150)},
                  {c3.substr(7), milliseconds(0)}},
                 idle, milliseconds(3000));
  EXPECT_EQ(r.body, event1 + event2 + big + event3);
  EXPECT_EQ(r.ec, beast::error::timeout) << r.ec.message();
  EXPECT_FALSE(r.done);
  const auto stalled = r.ended - r.last_byte;
  EXPECT_GE(stalled, idle - milliseconds(20));
  EXPECT_LT(stalled, milliseconds(2500));  // the engine closes 3 s after its last byte
  EXPECT_GE(r.reads, 5u);                   // the big chunk took more than one buffer
}

// Ensures pauses shorter than the idle limit are not a timeout, even when their sum is much longer (each wait
// restarts the limit), and that a whole chunked body ends the read cleanly.
TEST_F(ReadyReaderTest, PausesUnderTheLimitAddUpWithoutATimeout) {
  std::vector<Step> steps{{std::string(kChunkedHead), milliseconds(0)}};
  std::string expected;
  for (int i = 0; i < 8; ++i) {
    const std::string event = "data: {\"n\":" + std::to_string(i) + "}\n\n";
    steps.push_back({chunk(event), milliseconds(100)});
    expected += event;
  }
  steps.push_back({"0\r\n\r\n", milliseconds(0)});
  Result r = run(std::move(steps), milliseconds(300), milliseconds(3000));
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.body, expected);
  EXPECT_LT(r.ended - r.last_byte, milliseconds(1000));  // ended by the last chunk, not the engine's close
}

// Ensures a close-delimited body ends with the connection (put_eof), every byte kept.
TEST_F(ReadyReaderTest, CloseDelimitedBodyEndsWithTheConnection) {
  const std::string body(70 * 1024, 'y');
  Result r = run({{"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body.substr(0, 100), milliseconds(50)},
                  {body.substr(100), milliseconds(0)}},
                 milliseconds(5000), milliseconds(50));
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.body, body);
}

// Ensures a chunked body the engine cuts is a partial message, not a clean end and not a timeout.
TEST_F(ReadyReaderTest, CutChunkedBodyIsAPartialMessage) {
  Result r = run({{std::string(kChunkedHead) + chunk("data: 1\n\n"), milliseconds(0)}}, milliseconds(5000),
                 milliseconds(100));
  EXPECT_EQ(r.body, "data: 1\n\n");
  EXPECT_EQ(r.ec, http::error::partial_message) << r.ec.message();
}

// Ensures closing the socket during a wait (the client watcher's hang-up) ends the read at once with an error
// that is not a timeout.
TEST_F(ReadyReaderTest, ClosingTheSocketEndsAWait) {
  tcp::socket engine(io_);
  tcp::socket gateway(io_);
  gateway.connect(acceptor_.local_endpoint());
  acceptor_.accept(engine);
  asio::write(engine, asio::buffer(std::string(kChunkedHead)));
  error_code ec;
  bool ended = false;
  asio::co_spawn(
      io_,
      [&]() -> asio::awaitable<void> {
        http::response_parser<http::buffer_body> parser;
        beast::flat_buffer buffer;
        IdleDeadline deadline(gateway);
        ReadyReader reader(gateway, deadline, std::chrono::seconds(30));
        while (!ec && !parser.is_header_done()) co_await reader.read(parser, buffer, ec);
        std::array<char, 64> relay;
        parser.get().body().data = relay.data();
        parser.get().body().size = relay.size();
        co_await reader.read(parser, buffer, ec);
        ended = true;
      },
      asio::detached);
  asio::steady_timer hang_up(io_, milliseconds(100));
  hang_up.async_wait([&](error_code) { gateway.close(); });
  const auto start = Clock::now();
  io_.run_for(std::chrono::seconds(10));
  EXPECT_TRUE(ended);
  EXPECT_TRUE(ec);
  EXPECT_NE(ec, beast::error::timeout);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

class IdleDeadlineTest : public ::testing::Test {
 protected:
  IdleDeadlineTest() {
    gateway_.connect(acceptor_.local_endpoint());
    acceptor_.accept(engine_);
  }
  // One read of the gateway's socket: how it ended, and when (from the call).
  struct Wait {
    error_code ec;
    size_t bytes = 0;
    Clock::duration took{};
    bool ended = false;
  };
  void startRead(Wait& w) {
    const auto start = Clock::now();
    gateway_.async_read_some(asio::buffer(buf_), [&w, start](error_code ec, size_t n) {
      w = Wait{ec, n, Clock::now() - start, true};
    });
  }

  // The wait ended by `deadline` passing, no sooner than `limit` (less 10 ms) and well before 2 s.
  static void expectTimedOut(const Wait& w, const IdleDeadline& deadline, milliseconds limit) {
    ASSERT_TRUE(w.ended);
    EXPECT_EQ(w.ec, asio::error::operation_aborted) << w.ec.message();
    EXPECT_TRUE(deadline.expired());
    EXPECT_GE(w.took, limit - milliseconds(10));
    EXPECT_LT(w.took, milliseconds(2000));
  }

  asio::io_context io_;
  tcp::acceptor acceptor_{io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  tcp::socket gateway_{io_};
  tcp::socket engine_{io_};
  std::array<char, 64> buf_{};
};

// Ensures a paused deadline cancels nothing: a read started after pause() (the connection idle in a pool, or busy
// with something else) outlives the old limit and gets its bytes.
TEST_F(IdleDeadlineTest, APausedDeadlineNeverCancels) {
  IdleDeadline deadline(gateway_);
  deadline.restart(milliseconds(100));
  deadline.pause();
  Wait w;
  startRead(w);
  asio::steady_timer write_later(io_, milliseconds(400));
  write_later.async_wait([&](error_code) { asio::write(engine_, asio::buffer("x", 1)); });
  io_.run_for(std::chrono::seconds(5));
  ASSERT_TRUE(w.ended);
  EXPECT_FALSE(w.ec) << w.ec.message();
  EXPECT_EQ(w.bytes, 1u);
  EXPECT_GE(w.took, milliseconds(380));
  EXPECT_FALSE(deadline.expired());
}

// Ensures a shorter limit after a longer one holds (the timer, armed for the longer one, is re-armed), and that a
// deadline that fired while paused is armed again by the next restart().
TEST_F(IdleDeadlineTest, AShorterLimitHoldsAndARestartAfterAPauseArmsAgain) {
  IdleDeadline deadline(gateway_);
  deadline.restart(std::chrono::seconds(30));  // the timer is armed for 30 s
  deadline.restart(milliseconds(150));
  Wait w;
  startRead(w);
  io_.run_for(std::chrono::seconds(5));
  expectTimedOut(w, deadline, milliseconds(150));

  // Paused past the limit (the timer fires, sees the pause and stops), then a new wait: it times out again, after
  // its own full limit.
  io_.restart();
  deadline.restart(milliseconds(100));
  deadline.pause();
  asio::steady_timer idle(io_, milliseconds(300));
  Wait second;
  idle.async_wait([&](error_code) {
    deadline.restart(milliseconds(200));
    startRead(second);
  });
  io_.run_for(std::chrono::seconds(5));
  expectTimedOut(second, deadline, milliseconds(200));
}

// Ensures waits under a kept deadline cost no timer work each: 50 restart / read / pause rounds run the same number
// of handlers, within 2, as 50 reads with no deadline at all (tcp_stream's timeout: one more, the cancelled timer
// wait, per read).
TEST_F(IdleDeadlineTest, WaitsCostNoTimerWorkEach) {
  constexpr int kRounds = 50;
  auto rounds = [&](IdleDeadline* deadline) {
    io_.restart();
    int done = 0;
    std::function<void()> next = [&] {
      if (done == kRounds) return io_.stop();  // the kept deadline's timer is still armed: no wait for it
      if (deadline) deadline->restart(std::chrono::seconds(30));
      gateway_.async_read_some(asio::buffer(buf_), [&](error_code ec, size_t) {
        if (deadline) deadline->pause();
        EXPECT_FALSE(ec) << ec.message();
        ++done;
        next();
      });
      asio::write(engine_, asio::buffer("x", 1));
    };
    next();
    const size_t handlers = io_.run_for(std::chrono::seconds(10));
    EXPECT_EQ(done, kRounds);
    return handlers;
  };
  const size_t bare = rounds(nullptr);
  IdleDeadline deadline(gateway_);
  const size_t kept = rounds(&deadline);
  EXPECT_LE(kept, bare + 2) << "bare " << bare << ", with the deadline " << kept;
  EXPECT_FALSE(deadline.expired());
}

}  // namespace
}  // namespace prefixgate::net
