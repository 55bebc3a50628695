// One client connection: read each request (limits, timeouts), answer it or proxy it, keep the connection alive.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "openai/request.h"
#include "proxy/relay.h"
#include "server/gateway.h"
#include "server/remote_tokens.h"
#include "server/request_outcome.h"
#include "server/responses.h"
#include "server/worker.h"
#include "util/log.h"

namespace prefixgate::server {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr auto kAwait = asio::use_awaitable;
constexpr size_t kFirstReadBytes = 4096;

struct Route {
  enum Kind { kProxy, kModels, kNotFound, kMethodNotAllowed } kind = kNotFound;
  openai::Endpoint endpoint = openai::Endpoint::kChatCompletions;
  const char* allow = "";
};

Route routeOf(http::verb method, std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  struct Entry {
    std::string_view path;
    http::verb method;
    Route route;
  };
  static const Entry kEntries[] = {
      {"/v1/chat/completions", http::verb::post, {Route::kProxy, openai::Endpoint::kChatCompletions, "POST"}},
      {"/v1/completions", http::verb::post, {Route::kProxy, openai::Endpoint::kCompletions, "POST"}},
      {"/v1/embeddings", http::verb::post, {Route::kProxy, openai::Endpoint::kEmbeddings, "POST"}},
      {"/v1/models", http::verb::get, {Route::kModels, openai::Endpoint::kChatCompletions, "GET"}},
  };
  for (const Entry& e : kEntries) {
    if (e.path != path) continue;
    if (e.method == method) return e.route;
    Route r;
    r.kind = Route::kMethodNotAllowed;
    r.allow = e.route.allow;
    return r;
  }
  return Route{};
}

std::string modelsBody(const discovery::PodSet& pods, int64_t now_ms) {
  nlohmann::json data = nlohmann::json::array();
  for (const std::string& model : pods.models()) {
    const auto* serving = pods.podsFor(model);
    bool ready = serving && std::any_of(serving->begin(), serving->end(), [&](const auto& p) { return p->ready(now_ms); });
    if (ready) data.push_back({{"id", model}, {"object", "model"}, {"created", 0}, {"owned_by", "prefixgate"}});
  }
  return nlohmann::json{{"object", "list"}, {"data", data}}.dump();
}

class ClientSession {
 public:
  ClientSession(Worker& worker, asio::ip::tcp::socket socket)
      : worker_(worker), gateway_(worker.gateway), limits_(gateway_.config().limits), stream_(std::move(socket)) {}

  asio::awaitable<void> run() {
    while (co_await waitForRequest()) {
      if (!co_await serveOne()) break;
    }
    error_code ignored;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

 private:
  // Waits (up to client_idle_timeout_ms) for the first bytes of the next request.
  asio::awaitable<bool> waitForRequest() {
    if (buffer_.size() > 0) co_return true;
    if (gateway_.draining()) co_return false;
    worker_.idle_clients.insert(&stream_);
    stream_.expires_after(std::chrono::milliseconds(limits_.client_idle_timeout_ms));
    error_code ec;
    size_t n = co_await stream_.async_read_some(buffer_.prepare(kFirstReadBytes), asio::redirect_error(kAwait, ec));
    worker_.idle_clients.erase(&stream_);
    if (ec) co_return false;
    buffer_.commit(n);
    co_return true;
  }

  // Serves one request; returns whether the connection stays open for another.
  asio::awaitable<bool> serveOne() {
    RequestOutcome outcome(gateway_);
    http::request_parser<http::string_body> parser;
    parser.header_limit(limits_.max_header_bytes);
    parser.body_limit(limits_.max_body_bytes);
    error_code ec;
    stream_.expires_after(std::chrono::milliseconds(limits_.header_timeout_ms));
    co_await http::async_read_header(stream_, buffer_, parser, asio::redirect_error(kAwait, ec));
    if (ec) co_return co_await headerFailed(ec, outcome);
    auto& head = parser.get();
    outcome.begin(head);
    bool keep_alive = head.keep_alive() && !gateway_.draining();
    Route route = routeOf(head.method(), head.target());
    if (route.kind != Route::kProxy) co_return co_await serveLocal(route, parser, outcome, keep_alive);
    co_return co_await serveProxy(route.endpoint, parser, outcome, keep_alive);
  }

  asio::awaitable<bool> headerFailed(const error_code& ec, RequestOutcome& outcome) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof) co_return false;
    if (ec == http::error::body_limit) {
      // The head announced a Content-Length over the limit (Beast checks it with the head).
      outcome.fail(413, "body_too_large", "request body is larger than limits.max_body_bytes (" +
                                              std::to_string(limits_.max_body_bytes) + " bytes)");
      co_await writeError(stream_, 413, outcome.message(), false, outcome.headers());
    } else if (ec == http::error::header_limit) {
      outcome.fail(431, "request_header_too_large", "request header is larger than limits.max_header_bytes");
      co_await writeError(stream_, 431, outcome.message(), false, outcome.headers());
    } else if (ec == beast::error::timeout) {
      outcome.fail(408, "header_timeout", "request head not received within limits.header_timeout_ms");
      co_await writeError(stream_, 408, outcome.message(), false, outcome.headers());
    } else if (ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
      outcome.fail(400, "bad_request", "malformed HTTP request: " + ec.message());
      co_await writeError(stream_, 400, outcome.message(), false, outcome.headers());
    }
    co_return false;
  }

  // Reads the rest of the body; answers 413/400 itself when it cannot.
  asio::awaitable<bool> readBody(http::request_parser<http::string_body>& parser, RequestOutcome& outcome) {
    auto& head = parser.get();
    if (auto length = parser.content_length(); length && *length > limits_.max_body_bytes) {
      outcome.fail(413, "body_too_large", "request body is larger than limits.max_body_bytes (" +
                                              std::to_string(limits_.max_body_bytes) + " bytes)");
      co_await writeError(stream_, 413, outcome.message(), false, outcome.headers());
      co_return false;
    } else if (length) {
      head.body().reserve(*length + openai::paddingBytes());  // one allocation, with simdjson's padding
    }
    if (beast::iequals(head[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      error_code ec;
      co_await asio::async_write(stream_, asio::buffer(kContinue), asio::redirect_error(kAwait, ec));
      if (ec) co_return false;
    }
    error_code ec;
    stream_.expires_after(std::chrono::milliseconds(limits_.client_idle_timeout_ms));
    co_await http::async_read(stream_, buffer_, parser, asio::redirect_error(kAwait, ec));
    if (!ec) co_return true;
    if (ec == http::error::body_limit) {
      outcome.fail(413, "body_too_large", "request body is larger than limits.max_body_bytes (" +
                                              std::to_string(limits_.max_body_bytes) + " bytes)");
      co_await writeError(stream_, 413, outcome.message(), false, outcome.headers());
    } else {
      outcome.fail(400, "bad_request", "request body could not be read: " + ec.message());
      co_await writeError(stream_, 400, outcome.message(), false, outcome.headers());
    }
    co_return false;
  }

  asio::awaitable<bool> serveLocal(const Route& route, http::request_parser<http::string_body>& parser,
                                   RequestOutcome& outcome, bool keep_alive) {
    if (!co_await readBody(parser, outcome)) co_return false;
    if (route.kind == Route::kModels) {
      outcome.succeed(200);
      co_return co_await writeResponse(stream_, 200, "application/json",
                                       modelsBody(*gateway_.pods().snapshot(), routing::steadyNowMs()), keep_alive,
                                       outcome.headers()) && keep_alive;
    }
    HeaderList headers = outcome.headers();
    if (route.kind == Route::kMethodNotAllowed) {
      headers.emplace_back("allow", route.allow);
      outcome.fail(405, "method_not_allowed", std::string("method not allowed; use ") + route.allow);
    } else {
      outcome.fail(404, "not_found", "unknown path '" + std::string(parser.get().target()) + "'");
    }
    co_return co_await writeError(stream_, outcome.status(), outcome.message(), keep_alive, headers) && keep_alive;
  }

  asio::awaitable<bool> serveProxy(openai::Endpoint endpoint, http::request_parser<http::string_body>& parser,
                                   RequestOutcome& outcome, bool keep_alive) {
    if (!co_await readBody(parser, outcome)) co_return false;
    auto& head = parser.get();
    openai::RequestView request;
    auto parse_error = openai::parseRequest(endpoint, head.body(), gateway_.config().routing.prefix_cache.include_tools,
                                            limits_.max_json_depth, request);
    outcome.setRequest(request);
    if (parse_error) {
      outcome.fail(parse_error.status, "invalid_request", parse_error.message);
      co_return co_await writeError(stream_, parse_error.status, parse_error.message, keep_alive, outcome.headers(),
                                    parse_error.param) && keep_alive;
    }
    const uint32_t max_in_flight = gateway_.config().limits.max_in_flight;
    if (max_in_flight > 0 && gateway_.activeRequests().load() > static_cast<int64_t>(max_in_flight)) {
      outcome.fail(429, "overloaded", "the gateway has limits.max_in_flight requests in flight; retry later");
      HeaderList headers = outcome.headers();
      headers.emplace_back("retry-after", "1");
      co_return co_await writeError(stream_, 429, outcome.message(), keep_alive, headers) && keep_alive;
    }
    routing::RouteQuery query{request, head["routing-strategy"], head["config-profile"], {}, false};
    co_await fetchRemoteTokens(gateway_, query, request, &worker_.tokenizer_connections);
    routing::Decision decision = gateway_.router().choose(query, worker_.rng);
    if (decision.failure != routing::RouteFailure::kNone) {
      int status = routing::statusFor(decision.failure);
      outcome.fail(status, std::string(routing::reasonLabel(decision.failure)), decision.message);
      HeaderList headers = outcome.headers();
      if (status == 429 || status == 503) headers.emplace_back("retry-after", "1");
      co_return co_await writeError(stream_, status, decision.message, keep_alive, headers) && keep_alive;
    }
    proxy::RelayRequest relay_request{stream_, worker_.pool, gateway_.config().upstream, gateway_.config().health_check,
                                      head, head.body(),
                                      outcome.requestId(), keep_alive,
                                      [&](std::span<const PodId> exclude) {
                                        routing::RouteQuery again = query;
                                        again.exclude = exclude;
                                        return gateway_.router().choose(again, worker_.rng);
                                      }};
    proxy::RelayOutcome relayed = co_await proxy::relay(relay_request, decision);
    outcome.setDecision(decision, relayed);
    if (!relayed.response_started && !relayed.client_gone) {
      co_return co_await writeError(stream_, relayed.status, relayed.error, keep_alive, outcome.headers()) && keep_alive;
    }
    co_return relayed.keep_client;
  }

  Worker& worker_;
  Gateway& gateway_;
  const config::LimitsConfig& limits_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

}  // namespace

void startAccepting(Worker& worker) {
  worker.acceptor.async_accept([&worker](error_code ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !worker.acceptor.is_open()) return;
    if (!ec) {
      Gateway& g = worker.gateway;
      if (g.openConnections().load() >= static_cast<int64_t>(g.config().limits.max_connections)) {
        log::warn("refusing a client connection: limits.max_connections ({}) reached", g.config().limits.max_connections);
        socket.close(ec);
      } else {
        socket.set_option(asio::ip::tcp::no_delay(true), ec);
        g.openConnections().fetch_add(1);
        asio::co_spawn(
            worker.io,
            [&worker, s = std::move(socket)]() mutable -> asio::awaitable<void> {
              struct Count {
                Gateway& g;
                ~Count() { g.openConnections().fetch_sub(1); }
              } count{worker.gateway};
              ClientSession session(worker, std::move(s));
              co_await session.run();
            },
            asio::detached);
      }
    }
    startAccepting(worker);
  });
}

void closeIdleClients(Worker& worker) {
  for (beast::tcp_stream* stream : worker.idle_clients) {
    error_code ignored;
    stream->socket().cancel(ignored);
  }
}

}  // namespace prefixgate::server
