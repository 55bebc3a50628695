#include "sync/redis_client.h"

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "net/drained_reads.h"

namespace prefixgate::sync {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

namespace {

constexpr size_t kReadChunkBytes = 64u << 10;
// The replies of one batch together: far above what state sync reads, low enough that a broken server cannot
// fill the gateway's memory.
constexpr size_t kMaxBatchReplyBytes = 256u << 20;

std::string ioError(std::string_view what, const boost::system::error_code& ec, milliseconds budget) {
  std::string out(what);
  if (ec == beast::error::timeout) return out + ": timed out after " + std::to_string(budget.count()) + " ms";
  if (ec == asio::error::eof) return out + ": connection closed by the server";
  return out + ": " + ec.message();
}

}  // namespace

struct RedisConnection::Impl {
  Impl(asio::io_context& io, RedisAddress a, milliseconds t, RespParser::Limits l)
      : stream(io), address(std::move(a)), timeout(t), limits(l), parser(l) {}

  beast::tcp_stream stream;
  const RedisAddress address;
  const milliseconds timeout;
  const RespParser::Limits limits;
  RespParser parser;
  std::array<char, kReadChunkBytes> chunk;
  bool ready = false;       // connected, AUTH and SELECT done
  bool busy = false;        // a batch is in flight
  uint64_t closes = 0;      // close() calls: a batch that sees this change was interrupted
  uint64_t connects = 0;

  void shut() {
    ++closes;
    ready = false;
    stream.close();
  }
  asio::awaitable<std::string> open();
  asio::awaitable<std::string> resolve(std::chrono::steady_clock::time_point deadline,
                                       std::vector<tcp::endpoint>& endpoints);
  asio::awaitable<std::string> exchange(std::string_view bytes, size_t count, std::vector<RedisReply>& replies,
                                        size_t& received, milliseconds budget);
};

// Writes `bytes` and reads replies until `count` are in `replies`, under the deadline already set on the stream
// (`budget` is only for the message). Returns an error, or empty.
asio::awaitable<std::string> RedisConnection::Impl::exchange(std::string_view bytes, size_t count,
                                                             std::vector<RedisReply>& replies, size_t& received,
                                                             milliseconds budget) {
  const uint64_t closes_before = closes;
  boost::system::error_code ec;
  co_await asio::async_write(stream, asio::buffer(bytes.data(), bytes.size()),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (closes != closes_before) co_return "closed (close()) while writing";
  if (ec) co_return ioError("write", ec, budget);
  while (replies.size() < count) {
    const size_t n = co_await stream.async_read_some(asio::buffer(chunk),
                                                       asio::redirect_error(asio::use_awaitable, ec));
    if (closes != closes_before) co_return "closed (close()) while reading";
    if (ec) co_return ioError("read", ec, budget);
    received += n;
    if (received > kMaxBatchReplyBytes)
      co_return "replies over " + std::to_string(kMaxBatchReplyBytes >> 20) + " MiB in one batch";
    parser.feed(std::string_view(chunk.data(), n), replies);
    if (parser.failed()) co_return "protocol error: " + parser.error();
  }
  // RESP2 servers answer each command once: anything more means the stream is out of step.
  if (replies.size() > count || parser.pending()) co_return "more replies than commands";
  co_return std::string();
}

// The endpoints of the address: an IP literal as is, a name resolved before `deadline`.
asio::awaitable<std::string> RedisConnection::Impl::resolve(std::chrono::steady_clock::time_point deadline,
                                                            std::vector<tcp::endpoint>& endpoints) {
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address.host, ec);
  if (!ec) {
    endpoints.emplace_back(ip, address.port);
    co_return std::string();
  }
  // The resolver has no deadline of its own: a timer cancels it (through a weak pointer, since the timer's
  // handler may run after the resolve finished and this frame ended).
  auto resolver = std::make_shared<tcp::resolver>(stream.get_executor());
  asio::steady_timer timer(stream.get_executor(), deadline);
  timer.async_wait([weak = std::weak_ptr<tcp::resolver>(resolver)](boost::system::error_code e) {
    if (auto r = weak.lock(); r && !e) r->cancel();
  });
  auto results = co_await resolver->async_resolve(address.host, std::to_string(address.port),
                                                  asio::redirect_error(asio::use_awaitable, ec));
  timer.cancel();
  if (ec == asio::error::operation_aborted) co_return "resolve " + address.host + ": timed out after " +
                                                    std::to_string(timeout.count()) + " ms";
  if (ec || results.empty()) co_return "resolve " + address.host + ": " + ec.message();
  for (const auto& entry : results) endpoints.push_back(entry.endpoint());
  co_return std::string();
}

// Connects, then AUTH and SELECT in one write, all within the timeout.
asio::awaitable<std::string> RedisConnection::Impl::open() {
  const uint64_t closes_before = closes;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  parser = RespParser(limits);
  std::vector<tcp::endpoint> endpoints;
  if (std::string error = co_await resolve(deadline, endpoints); !error.empty()) co_return error;
  if (closes != closes_before) co_return "closed (close()) while resolving";
  boost::system::error_code ec;
  stream.expires_at(deadline);
  co_await stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (closes != closes_before) co_return "closed (close()) while connecting";
  if (ec) co_return ioError("connect " + address.host + ":" + std::to_string(address.port), ec, timeout);
  ++connects;
  stream.socket().set_option(tcp::no_delay(true), ec);
  net::drained_reads::enable(stream.socket().native_handle());
  std::string hello;
  std::vector<std::string> names;
  if (!address.password.empty()) {
    if (address.username.empty())
      appendCommand(hello, {"AUTH", address.password});
    else
      appendCommand(hello, {"AUTH", address.username, address.password});
    names.push_back("AUTH");
  }
  if (address.db != 0) {
    appendCommand(hello, {"SELECT", std::to_string(address.db)});
    names.push_back("SELECT " + std::to_string(address.db));
  }
  std::vector<RedisReply> replies;
  size_t received = 0;
  if (!names.empty()) {
    if (std::string error = co_await exchange(hello, names.size(), replies, received, timeout); !error.empty())
      co_return names.front() + (names.size() > 1 ? ", " + names.back() : "") + ": " + error;
  }
  for (size_t i = 0; i < names.size(); ++i)
    if (replies[i].type != RedisReply::Type::kStatus) co_return names[i] + " failed: " + replies[i].str;
  ready = true;
  co_return std::string();
}

RedisConnection::RedisConnection(asio::io_context& io, RedisAddress address, milliseconds timeout,
                                 RespParser::Limits limits)
    : impl_(std::make_shared<Impl>(io, std::move(address), timeout, limits)) {}

RedisConnection::~RedisConnection() { impl_->shut(); }

bool RedisConnection::connected() const { return impl_->ready; }

void RedisConnection::close() { impl_->shut(); }

uint64_t RedisConnection::connects() const { return impl_->connects; }

asio::awaitable<RedisConnection::Result> RedisConnection::run(std::string commands, size_t count, milliseconds extra) {
  // From here on only `c` is used, never `this`: the connection may be destroyed while this batch waits.
  std::shared_ptr<Impl> c = impl_;
  Result result;
  if (c->busy) {
    result.error = "a batch is already running on this connection";
    co_return result;
  }
  c->busy = true;
  if (!c->ready) result.error = co_await c->open();
  if (result.ok()) {
    c->stream.expires_after(c->timeout + extra);
    result.error = co_await c->exchange(commands, count, result.replies, result.bytes_received, c->timeout + extra);
    if (result.ok()) result.bytes_sent = commands.size();
  }
  if (!result.ok()) {
    c->shut();
    result.replies.clear();
  }
  c->busy = false;
  co_return result;
}

}  // namespace prefixgate::sync
