#include "tokenize/remote_tokenizer.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace prefixgate::tokenize {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kAwait = asio::use_awaitable;
constexpr uint32_t kMaxAnswerHeaderBytes = 64 * 1024;
constexpr size_t kMaxPodsTried = 2;  // the first choice and one retry on another pod

// What one exchange with one pod came to.
struct Exchange {
  enum Failure { kNone, kConnection, kTimeout, kStatus, kBadAnswer } failure = kNone;
  std::string error;
  TokenizeAnswer answer;
};

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Opens a connection (resolving a host name; IP literals skip the resolver), with TCP_NODELAY, by `deadline`.
asio::awaitable<error_code> connect(beast::tcp_stream& stream, const TokenizerPod& pod, Clock::time_point deadline) {
  error_code ec;
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(pod.host, ec), pod.port);
  if (ec) {
    asio::ip::tcp::resolver resolver(co_await asio::this_coro::executor);
    const std::string port = std::to_string(pod.port);
    auto results = co_await resolver.async_resolve(pod.host, port, asio::redirect_error(kAwait, ec));
    if (!ec && results.empty()) ec = asio::error::host_not_found;
    if (ec) co_return ec;
    endpoint = results.begin()->endpoint();
  }
  stream.expires_at(deadline);
  co_await stream.async_connect(endpoint, asio::redirect_error(kAwait, ec));
  if (!ec) stream.socket().set_option(asio::ip::tcp::no_delay(true), ec);
  co_return ec;
}

// POST /tokenize to one pod, on a pooled connection when there is one (retried once on a fresh connection if the
// pooled one fails before any answer byte: engines close idle keep-alive connections), else a new one.
asio::awaitable<Exchange> exchangeWith(const TokenizerPod& pod, const std::string& body, ConnectionPool* pool,
                                       Clock::time_point deadline, size_t max_answer_bytes) {
  Exchange out;
  auto executor = co_await asio::this_coro::executor;
  std::unique_ptr<beast::tcp_stream> stream = pool ? pool->take(pod.id) : nullptr;
  bool reused = stream != nullptr;
  const std::string host = pod.host + ":" + std::to_string(pod.port);
  for (;;) {
    error_code ec;
    if (!stream) {
      stream = std::make_unique<beast::tcp_stream>(executor);
      ec = co_await connect(*stream, pod, deadline);
    }
    http::response_parser<http::string_body> parser;
    beast::flat_buffer buffer;
    if (!ec) {
      http::request<http::string_body> req{http::verb::post, "/tokenize", 11};
      req.set(http::field::host, host);
      req.set(http::field::content_type, "application/json");
      req.set(http::field::user_agent, "prefixgate");
      req.keep_alive(true);
      req.body() = body;
      req.prepare_payload();
      stream->expires_at(deadline);
      co_await http::async_write(*stream, req, asio::redirect_error(kAwait, ec));
    }
    if (!ec) {
      parser.header_limit(kMaxAnswerHeaderBytes);
      parser.body_limit(max_answer_bytes);
      stream->expires_at(deadline);
      co_await http::async_read(*stream, buffer, parser, asio::redirect_error(kAwait, ec));
    }
    if (ec == http::error::body_limit) {
      out.failure = Exchange::kBadAnswer;
      out.error = "pod " + pod.name + ": the /tokenize answer is larger than " + std::to_string(max_answer_bytes) +
                  " bytes";
      co_return out;
    }
    if (ec) {
      if (reused && ec != beast::error::timeout && !parser.got_some()) {
        stream.reset();
        reused = false;
        continue;
      }
      out.failure = ec == beast::error::timeout ? Exchange::kTimeout : Exchange::kConnection;
      out.error = "pod " + pod.name + " (" + host + "): /tokenize " +
                  (ec == beast::error::timeout ? std::string("timed out") : ec.message());
      co_return out;
    }
    const auto& answer = parser.get();
    if (answer.result() != http::status::ok) {
      out.failure = Exchange::kStatus;
      out.error = "pod " + pod.name + ": /tokenize answered " + std::to_string(answer.result_int());
    } else if (std::string why; !parseTokenizeAnswer(answer.body(), out.answer, why)) {
      out.failure = Exchange::kBadAnswer;
      out.error = "pod " + pod.name + ": bad /tokenize answer: " + why;
    }
    if (pool && answer.keep_alive() && buffer.size() == 0) pool->give(pod.id, std::move(stream));
    co_return out;
  }
}

}  // namespace

std::string_view outcomeLabel(TokenizeOutcome outcome) {
  switch (outcome) {
    case TokenizeOutcome::kHit: return "hit";
    case TokenizeOutcome::kMiss: return "miss";
    case TokenizeOutcome::kError: return "error";
    case TokenizeOutcome::kTimeout: return "timeout";
    case TokenizeOutcome::kNoPod: return "no_pod";
  }
  return "error";
}

RemoteTokenizer::RemoteTokenizer(RemoteTokenizerOptions options, PodLookup lookup)
    : options_(options), lookup_(std::move(lookup)), cache_(options.cache_entries) {}

asio::awaitable<TokenizeResult> RemoteTokenizer::tokenize(const TokenizeInput& input, ConnectionPool* pool) {
  const auto started = Clock::now();
  TokenizeResult result;
  const uint64_t key = tokenizeCacheKey(input);
  result.tokens = cache_.find(key);
  if (result.tokens) {
    result.outcome = TokenizeOutcome::kHit;
    result.seconds = secondsSince(started);
    co_return result;
  }
  std::vector<TokenizerPod> pods;
  lookup_(input.model, pods);
  if (pods.empty()) {
    result.outcome = TokenizeOutcome::kNoPod;
    result.error = "no ready pod serves the model '" + std::string(input.model) + "'";
    result.seconds = secondsSince(started);
    co_return result;
  }
  // Per thread: successive calls start at different pods among the least loaded.
  thread_local uint64_t rotation = 0;
  orderTokenizerPods(pods, rotation++);
  const auto deadline = started + options_.timeout;
  const std::string body = buildTokenizeBody(input);
  const size_t tries = std::min(pods.size(), kMaxPodsTried);
  for (size_t i = 0; i < tries; ++i) {
    const TokenizerPod& pod = pods[i];
    result.pod = pod.name;
    Exchange exchange = co_await exchangeWith(pod, body, pool, deadline, options_.max_answer_bytes);
    if (exchange.failure == Exchange::kNone) {
      auto tokens = std::make_shared<const std::vector<uint32_t>>(std::move(exchange.answer.tokens));
      cache_.insert(key, tokens);
      result.tokens = std::move(tokens);
      result.outcome = TokenizeOutcome::kMiss;
      result.error.clear();
      break;
    }
    result.outcome = exchange.failure == Exchange::kTimeout ? TokenizeOutcome::kTimeout : TokenizeOutcome::kError;
    result.error = std::move(exchange.error);
    // Only a pod that could not be reached is worth another: an answer (error status, bad body) would repeat.
    if (exchange.failure != Exchange::kConnection) break;
  }
  result.seconds = secondsSince(started);
  co_return result;
}

}  // namespace prefixgate::tokenize
