// The Redis client: URL parsing, and the connection against a real redis-server (tests/unit/core/redis_server.h)
// and against loopback sockets that misbehave (silent, garbage, extra replies).
#include "sync/redis_client.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <optional>

#include "unit/core/redis_server.h"

namespace prefixgate::sync {
namespace {

namespace asio = boost::asio;
using namespace std::string_literals;
using std::chrono::milliseconds;
using Result = RedisConnection::Result;

// ---- URLs ----

// Ensures each part of a URL lands in its field, with the defaults when absent and percent escapes decoded.
TEST(RedisUrl, Good) {
  struct Case {
    std::string url, host;
    uint16_t port;
    std::string username, password;
    uint32_t db;
  };
  const Case cases[] = {
      {"redis://127.0.0.1", "127.0.0.1", 6379, "", "", 0},
      {"redis://redis.ns.svc:6380/2", "redis.ns.svc", 6380, "", "", 2},
      {"redis://h/", "h", 6379, "", "", 0},
      {"redis://:s3cret@h", "h", 6379, "", "s3cret", 0},
      {"redis://sync:p%40ss%3Aw%2f%25@h:1/15", "h", 1, "sync", "p@ss:w/%", 15},
      {"redis://u:a@b@h", "h", 6379, "u", "a@b", 0},
      {"redis://[::1]:7000/3", "::1", 7000, "", "", 3},
      {"redis://h:65535/4294967295", "h", 65535, "", "", 4294967295u},
  };
  for (const Case& c : cases) {
    RedisAddress a;
    std::string error;
    ASSERT_TRUE(parseRedisUrl(c.url, a, error)) << c.url << ": " << error;
    EXPECT_EQ(a.host, c.host) << c.url;
    EXPECT_EQ(a.port, c.port) << c.url;
    EXPECT_EQ(a.username, c.username) << c.url;
    EXPECT_EQ(a.password, c.password) << c.url;
    EXPECT_EQ(a.db, c.db) << c.url;
  }
}

// Ensures a bad URL is refused with a message naming what is wrong, and the output is left as it was.
TEST(RedisUrl, BadSaysWhy) {
  const std::pair<std::string, std::string> cases[] = {
      {"http://h", "not a redis:// URL (redis://[[user]:password@]host[:port][/db])"},
      {"h:6379", "not a redis:// URL (redis://[[user]:password@]host[:port][/db])"},
      {"rediss://h", "rediss:// (TLS) is not supported: use redis://"},
      {"redis://", "no host"},
      {"redis://:6379", "no host"},
      {"redis://:pw@/1", "no host"},
      {"redis://[]:1", "no host"},
      {"redis://h:0", "bad port '0' (1 to 65535)"},
      {"redis://h:65536", "bad port '65536' (1 to 65535)"},
      {"redis://h:", "bad port '' (1 to 65535)"},
      {"redis://h:+1", "bad port '+1' (1 to 65535)"},
      {"redis://h:6379x", "bad port '6379x' (1 to 65535)"},
      {"redis://::1:6379", "an IPv6 address must be in brackets: redis://[::1:6379]"},
      {"redis://[::1", "an IPv6 address without its closing ']'"},
      {"redis://[::1]6379", "unexpected text after ']': '6379'"},
      {"redis://h/x", "bad db number 'x' (digits only, after the last '/')"},
      {"redis://h/-1", "bad db number '-1' (digits only, after the last '/')"},
      {"redis://h/4294967296", "bad db number '4294967296' (digits only, after the last '/')"},
      {"redis://h/1/2", "bad db number '1/2' (digits only, after the last '/')"},
      {"redis://user@h", "user info without ':' (write redis://:password@host for a password alone, "
                         "redis://user:password@host with a user)"},
      {"redis://u:@h", "an empty password after ':'"},
      {"redis://:p%4@h", "bad percent escape in the password (write %XX with two hex digits, e.g. %40 for '@')"},
      {"redis://:p%zz@h", "bad percent escape in the password (write %XX with two hex digits, e.g. %40 for '@')"},
      {"redis://%g0:p@h", "bad percent escape in the user name (write %XX with two hex digits, e.g. %40 for '@')"},
  };
  for (const auto& [url, why] : cases) {
    RedisAddress a;
    a.host = "unchanged";
    std::string error;
    EXPECT_FALSE(parseRedisUrl(url, a, error)) << url;
    EXPECT_EQ(error, why) << url;
    EXPECT_EQ(a.host, "unchanged") << url;
  }
}

// ---- the connection ----

// Encodes commands for one batch.
struct Batch {
  std::string bytes;
  size_t count = 0;
  Batch& add(std::initializer_list<std::string_view> args) {
    appendCommand(bytes, args);
    ++count;
    return *this;
  }
};

// A loopback listener that accepts and keeps every connection, writes `answer` on each, and never reads.
class FakeServer {
 public:
  FakeServer(asio::io_context& io, std::string answer)
      : acceptor_(io, {asio::ip::make_address("127.0.0.1"), 0}), answer_(std::move(answer)) {
    accept();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  size_t accepted() const { return sockets_.size(); }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket socket) {
      if (ec) return;
      sockets_.push_back(std::make_unique<asio::ip::tcp::socket>(std::move(socket)));
      if (!answer_.empty()) asio::async_write(*sockets_.back(), asio::buffer(answer_), [](auto, auto) {});
      accept();
    });
  }
  asio::ip::tcp::acceptor acceptor_;
  std::string answer_;
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets_;
};

class RedisConnectionTest : public ::testing::Test {
 protected:
  static constexpr milliseconds kTimeout{2000};
  // Longer than any run() here may take: a run still going then is a failure, not a hang.
  static constexpr auto kRunBound = std::chrono::seconds(10);

  void SetUp() override { ASSERT_EQ(server_.start(), ""); }

  RedisAddress address(const std::string& url) {
    RedisAddress a;
    std::string error;
    EXPECT_TRUE(parseRedisUrl(url, a, error)) << error;
    return a;
  }
  std::unique_ptr<RedisConnection> connect(const std::string& suffix = "", milliseconds timeout = kTimeout) {
    return std::make_unique<RedisConnection>(io_, address(server_.url() + suffix), timeout);
  }
  // Spawns run() on the test's io_context; the slot is filled when it returns.
  std::shared_ptr<std::optional<Result>> spawn(RedisConnection& c, const Batch& batch, milliseconds extra = {}) {
    auto slot = std::make_shared<std::optional<Result>>();
    auto batchRun = [&c, batch, extra, slot]() -> asio::awaitable<void> {
      *slot = co_await c.run(batch.bytes, batch.count, extra);
    };
    asio::co_spawn(io_, batchRun, asio::detached);
    return slot;
  }
  // Runs the io_context until `done` (bounded by kRunBound).
  template <class Done>
  bool runUntil(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + kRunBound;
    while (!done() && std::chrono::steady_clock::now() < deadline) io_.run_one_for(milliseconds(50));
    return done();
  }
  Result run(RedisConnection& c, const Batch& batch, milliseconds extra = {}) {
    auto slot = spawn(c, batch, extra);
    EXPECT_TRUE(runUntil([&] { return slot->has_value(); })) << "run() did not return";
    if (slot->has_value()) return **slot;
    Result none;
    none.error = "did not return";
    return none;
  }

  asio::io_context io_;
  testing::RedisServer server_;
};

// Ensures a pipeline of mixed commands gets one reply per command in order (a command's error reply is a reply,
// not a failure), and the byte counts are the batch's.
TEST_F(RedisConnectionTest, PipelineOfMixedCommands) {
  auto c = connect();
  Batch batch;
  batch.add({"SET", "k", "v"}).add({"GET", "k"}).add({"INCR", "n"}).add({"INCR", "n"}).add({"INCR", "k"});
  batch.add({"XADD", "s", "*", "f", "x"}).add({"XREAD", "COUNT", "10", "STREAMS", "s", "0"}).add({"GET", "missing"});
  Result r = run(*c, batch);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.replies.size(), 8u);
  EXPECT_EQ(r.replies[0].str, "OK");
  EXPECT_EQ(r.replies[1].str, "v");
  EXPECT_EQ(r.replies[2].integer, 1);
  EXPECT_EQ(r.replies[3].integer, 2);
  EXPECT_TRUE(r.replies[4].isError());
  EXPECT_EQ(r.replies[4].str, "ERR value is not an integer or out of range");
  const std::string id = r.replies[5].str;
  EXPECT_NE(id.find('-'), std::string::npos) << id;
  // XREAD: [[stream, [[id, [field, value]]]]]
  ASSERT_EQ(r.replies[6].elements.size(), 1u);
  const RedisReply& stream = r.replies[6].elements[0];
  EXPECT_EQ(stream.elements[0].str, "s");
  EXPECT_EQ(stream.elements[1].elements[0].elements[0].str, id);
  EXPECT_EQ(stream.elements[1].elements[0].elements[1].elements[1].str, "x");
  EXPECT_TRUE(r.replies[7].isNil());
  EXPECT_EQ(r.bytes_sent, batch.bytes.size());
  // The replies' exact bytes, but for the entry id's digits (they appear twice).
  const std::string fixed = "+OK\r\n$1\r\nv\r\n:1\r\n:2\r\n-ERR value is not an integer or out of range\r\n"
                            "$\r\n\r\n*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$\r\n\r\n*2\r\n$1\r\nf\r\n$1\r\nx\r\n$-1\r\n";
  EXPECT_EQ(r.bytes_received, fixed.size() + 2 * (id.size() + std::to_string(id.size()).size()));
  EXPECT_TRUE(c->connected());
  EXPECT_EQ(c->connects(), 1u);
}

// Ensures values holding NUL and CRLF, every byte value, and a value larger than one read chunk round-trip.
TEST_F(RedisConnectionTest, BinaryValuesRoundTrip) {
  auto c = connect();
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string big(3u << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 7) big[i] = static_cast<char>(i);
  const std::string crlf = "a\r\n\0b\r\n$3\r\n*1\r\n"s;
  Batch batch;
  batch.add({"SET", crlf, crlf}).add({"SET", "all", all}).add({"SET", "big", big});
  batch.add({"GET", crlf}).add({"GET", "all"}).add({"GET", "big"});
  Result r = run(*c, batch);
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.replies.size(), 6u);
  EXPECT_EQ(r.replies[3].str, crlf);
  EXPECT_EQ(r.replies[4].str, all);
  EXPECT_TRUE(r.replies[5].str == big) << "the 3 MiB value differs";
}

// Ensures a name is resolved (localhost), not only IP literals.
TEST_F(RedisConnectionTest, ResolvesAHostName) {
  RedisConnection c(io_, address("redis://localhost:" + std::to_string(server_.port())), kTimeout);
  Result r = run(c, Batch().add({"PING"}));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.replies[0].str, "PONG");
}

// Ensures SELECT puts the connection in its db (a key set there is not in db 0), and a db the server does not
// have fails the connection with the server's reason.
TEST_F(RedisConnectionTest, SelectDb) {
  auto db3 = connect("/3");
  auto db0 = connect();
  ASSERT_TRUE(run(*db3, Batch().add({"SET", "only3", "yes"})).ok());
  Result r0 = run(*db0, Batch().add({"GET", "only3"}));
  Result r3 = run(*db3, Batch().add({"GET", "only3"}));
  ASSERT_TRUE(r0.ok() && r3.ok()) << r0.error << r3.error;
  EXPECT_TRUE(r0.replies[0].isNil());
  EXPECT_EQ(r3.replies[0].str, "yes");
  auto bad = connect("/99");
  Result r = run(*bad, Batch().add({"PING"}));
  EXPECT_EQ(r.error, "SELECT 99 failed: ERR DB index is out of range");
  EXPECT_FALSE(bad->connected());
}

// Ensures a refused connection is an error naming the address, and nothing counts as connected.
TEST_F(RedisConnectionTest, RefusedConnection) {
  const uint16_t port = server_.port();
  server_.stop();
  auto c = connect();
  Result r = run(*c, Batch().add({"PING"}));
  EXPECT_EQ(r.error, "connect 127.0.0.1:" + std::to_string(port) + ": Connection refused");
  EXPECT_EQ(c->connects(), 0u);
  EXPECT_FALSE(c->connected());
}

// Ensures a server killed mid-session fails the next batch, and the batch after its restart reconnects.
TEST_F(RedisConnectionTest, ReconnectsAfterTheServerRestarts) {
  auto c = connect();
  ASSERT_TRUE(run(*c, Batch().add({"SET", "k", "1"})).ok());
  server_.stop();
  Result lost = run(*c, Batch().add({"GET", "k"}));
  EXPECT_FALSE(lost.ok());
  EXPECT_TRUE(lost.replies.empty());
  EXPECT_FALSE(c->connected());
  ASSERT_EQ(server_.restart(), "");
  Result again = run(*c, Batch().add({"SET", "k", "2"}).add({"GET", "k"}));
  ASSERT_TRUE(again.ok()) << again.error;
  EXPECT_EQ(again.replies[1].str, "2");
  EXPECT_EQ(c->connects(), 2u);
}

// Ensures a reply slower than the timeout fails the batch with the deadline named, and closes the connection.
TEST_F(RedisConnectionTest, SlowReplyTimesOut) {
  auto c = connect("", milliseconds(200));
  Result r = run(*c, Batch().add({"DEBUG", "SLEEP", "1"}));
  EXPECT_EQ(r.error, "read: timed out after 200 ms");
  EXPECT_FALSE(c->connected());
}

// Ensures a blocking command's own wait is covered by `extra`: XREAD BLOCK 500 with a 200 ms timeout succeeds
// (nil: nothing arrived) with 500 ms extra, and times out without it.
TEST_F(RedisConnectionTest, BlockingCommandWithinExtra) {
  auto c = connect("", milliseconds(200));
  const Batch xread = Batch().add({"XREAD", "BLOCK", "500", "STREAMS", "s", "$"});
  Result r = run(*c, xread, milliseconds(500));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.replies[0].isNil());
  Result without = run(*c, xread);
  EXPECT_EQ(without.error, "read: timed out after 200 ms");
}

// Ensures AUTH with requirepass: the right password (alone or as the default user) works, a wrong one fails the
// connection with the server's reason, and none connects but the first command gets NOAUTH.
TEST_F(RedisConnectionTest, AuthWithRequirepass) {
  testing::RedisServer locked({.requirepass = "s3 cret"});
  ASSERT_EQ(locked.start(), "");
  const std::string at = "127.0.0.1:" + std::to_string(locked.port());
  for (std::string userinfo : {":s3%20cret@", "default:s3%20cret@"}) {
    RedisConnection c(io_, address("redis://" + userinfo + at), kTimeout);
    Result r = run(c, Batch().add({"SET", "k", "v"}));
    ASSERT_TRUE(r.ok()) << userinfo << ": " << r.error;
    EXPECT_EQ(r.replies[0].str, "OK") << userinfo;
  }
  RedisConnection wrong(io_, address("redis://:nope@" + at), kTimeout);
  Result r = run(wrong, Batch().add({"GET", "k"}));
  EXPECT_EQ(r.error, "AUTH failed: WRONGPASS invalid username-password pair or user is disabled.");
  EXPECT_FALSE(wrong.connected());
  RedisConnection none(io_, address("redis://" + at), kTimeout);
  r = run(none, Batch().add({"GET", "k"}));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.replies[0].isError());
  EXPECT_EQ(r.replies[0].str.substr(0, 6), "NOAUTH");
}

// Ensures a server that accepts and never answers fails the batch at the deadline, and the handshake (AUTH) too.
TEST_F(RedisConnectionTest, SilentServerTimesOut) {
  FakeServer silent(io_, "");
  const std::string at = "127.0.0.1:" + std::to_string(silent.port());
  RedisConnection c(io_, address("redis://" + at), milliseconds(150));
  EXPECT_EQ(run(c, Batch().add({"PING"})).error, "read: timed out after 150 ms");
  RedisConnection authed(io_, address("redis://:pw@" + at + "/2"), milliseconds(150));
  EXPECT_EQ(run(authed, Batch().add({"PING"})).error, "AUTH, SELECT 2: read: timed out after 150 ms");
  EXPECT_EQ(authed.connects(), 1u);
  EXPECT_EQ(silent.accepted(), 2u);
}

// Ensures bytes that are not RESP fail the batch as a protocol error, and so do more replies than commands.
TEST_F(RedisConnectionTest, BrokenServerReplies) {
  FakeServer garbage(io_, "+OK\r\n?what\r\n");
  RedisConnection c(io_, address("redis://127.0.0.1:" + std::to_string(garbage.port())), kTimeout);
  Result r = run(c, Batch().add({"PING"}).add({"PING"}));
  EXPECT_EQ(r.error, "protocol error: an unknown reply type byte '?' (RESP2 has + - : $ *)");
  EXPECT_TRUE(r.replies.empty());
  EXPECT_FALSE(c.connected());
  FakeServer chatty(io_, "+OK\r\n+OK\r\n");
  RedisConnection d(io_, address("redis://127.0.0.1:" + std::to_string(chatty.port())), kTimeout);
  EXPECT_EQ(run(d, Batch().add({"PING"})).error, "more replies than commands");
  FakeServer cut(io_, "+OK\r\n$5\r\nab");
  RedisConnection e(io_, address("redis://127.0.0.1:" + std::to_string(cut.port())), kTimeout);
  EXPECT_EQ(run(e, Batch().add({"PING"})).error, "more replies than commands");
}

// Ensures close() fails the batch in flight at once, and a second batch while one is in flight is refused.
TEST_F(RedisConnectionTest, CloseFailsTheBatchInFlight) {
  FakeServer silent(io_, "");
  RedisConnection c(io_, address("redis://127.0.0.1:" + std::to_string(silent.port())), kTimeout);
  auto first = spawn(c, Batch().add({"PING"}));
  ASSERT_TRUE(runUntil([&] { return c.connected(); }));
  Result second = run(c, Batch().add({"PING"}));
  EXPECT_EQ(second.error, "a batch is already running on this connection");
  EXPECT_FALSE(first->has_value());
  c.close();
  ASSERT_TRUE(runUntil([&] { return first->has_value(); }));
  EXPECT_TRUE((*first)->error.starts_with("closed (close()) while")) << (*first)->error;
}

// Ensures a connection destroyed while its batch waits leaves nothing that touches freed memory (AddressSanitizer
// checks this build): the batch ends with an error while the io_context keeps running.
TEST_F(RedisConnectionTest, DestroyedWhileABatchWaits) {
  FakeServer silent(io_, "");
  auto c = std::make_unique<RedisConnection>(io_, address("redis://127.0.0.1:" + std::to_string(silent.port())),
                                             kTimeout);
  auto slot = spawn(*c, Batch().add({"PING"}));
  ASSERT_TRUE(runUntil([&] { return c->connected(); }));
  c.reset();
  ASSERT_TRUE(runUntil([&] { return slot->has_value(); }));
  EXPECT_TRUE((*slot)->error.starts_with("closed (close()) while")) << (*slot)->error;
}

}  // namespace
}  // namespace prefixgate::sync
