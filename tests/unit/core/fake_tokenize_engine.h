#pragma once
// A fake engine on loopback for the remote tokenizer's tests, a one-thread connection pool, and a helper that runs
// one tokenize call to completion on the test's io_context.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tokenize/remote_tokenizer.h"

namespace prefixgate::tokenize::fakes {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// A fake engine on loopback: answers each POST with the reply set for its target (else with `status` and `answer`),
// after a set delay; records the targets and bodies it received and the connections it accepted. Runs on the
// test's io_context.
class FakeEngine {
 public:
  explicit FakeEngine(asio::io_context& io) : io_(io), acceptor_(io, {asio::ip::make_address("127.0.0.1"), 0}) {
    accept();
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  TokenizerPod pod(uint32_t id, int32_t load = 0, engine::EngineKind kind = engine::EngineKind::kAuto) const {
    return {id, "fake-" + std::to_string(id), "127.0.0.1", port(), load, kind};
  }

  struct Reply {
    int status = 200;
    std::string answer;
  };
  std::map<std::string, Reply> replies;  // by target
  int status = 200;
  std::string answer = R"({"count":3,"max_model_len":100,"tokens":[11,22,33]})";
  std::chrono::milliseconds delay{0};
  bool close_after_answer = false;  // keep-alive announced, but the connection is closed (a stale pooled one)
  std::vector<std::string> targets;
  std::vector<std::string> bodies;
  int connections = 0;

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket socket) {
      if (ec) return;
      ++connections;
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
      accept();
    });
  }
  asio::awaitable<void> serve(asio::ip::tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      boost::system::error_code ec;
      co_await http::async_read(stream, buffer, req, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      targets.emplace_back(req.target());
      bodies.push_back(req.body());
      if (delay.count() > 0) {
        asio::steady_timer timer(io_, delay);
        co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      const auto reply = replies.find(targets.back());
      const Reply& r = reply != replies.end() ? reply->second : Reply{status, answer};
      http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
      res.set(http::field::content_type, "application/json");
      res.body() = r.answer;
      res.keep_alive(true);
      res.prepare_payload();
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || close_after_answer) co_return;
    }
  }
  asio::io_context& io_;
  asio::ip::tcp::acceptor acceptor_;
};

// A one-thread connection pool, as a worker's upstream pool behaves.
class TestPool final : public ConnectionPool {
 public:
  std::unique_ptr<net::UpstreamStream> take(uint32_t pod) override {
    auto& list = idle[pod];
    if (list.empty()) return nullptr;
    auto s = std::move(list.back());
    list.pop_back();
    return s;
  }
  void give(uint32_t pod, std::unique_ptr<net::UpstreamStream> stream) override {
    idle[pod].push_back(std::move(stream));
  }
  std::map<uint32_t, std::vector<std::unique_ptr<net::UpstreamStream>>> idle;
};

// Runs one tokenize call to completion on `io` (the fake engines serve on it too).
inline TokenizeResult runTokenize(asio::io_context& io, RemoteTokenizer& tokenizer, const TokenizeInput& input,
                                  ConnectionPool* pool) {
  TokenizeResult result;
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        result = co_await tokenizer.tokenize(input, pool);
        done = true;
      },
      asio::detached);
  while (!done) io.run_one();
  // Let the fake engines finish what they were doing (e.g. close a connection) before the next call.
  io.poll();
  return result;
}

// A port where nothing listens.
inline uint16_t closedPort(asio::io_context& io) {
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

}  // namespace prefixgate::tokenize::fakes
