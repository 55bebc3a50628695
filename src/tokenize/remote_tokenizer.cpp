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
using engine::EngineKind;

namespace {

constexpr auto kAwait = asio::use_awaitable;
constexpr uint32_t kMaxAnswerHeaderBytes = 64 * 1024;
constexpr size_t kMaxPodsTried = 2;  // the first choice and one retry on another pod
constexpr std::string_view kTokenizeTarget = "/tokenize";
constexpr std::string_view kApplyTemplateTarget = "/apply-template";

// What asking one pod came to (one exchange, or llama.cpp's two).
struct Attempt {
  enum Failure { kNone, kConnection, kTimeout, kStatus, kBadAnswer } failure = kNone;
  std::string error;
  TokenizeAnswer answer;
};

// One exchange: the answer's body when it is a 200.
struct Exchange {
  Attempt::Failure failure = Attempt::kNone;
  std::string error;
  std::string body;
};

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The start of an error answer's body, for the log (the engine's reason, e.g. llama.cpp's "tools param requires
// --jinja flag"): at most kErrorExcerptBytes, control characters blanked.
constexpr size_t kErrorExcerptBytes = 200;
std::string excerpt(std::string_view body) {
  if (body.empty()) return "";
  std::string out = ": ";
  for (char c : body.substr(0, kErrorExcerptBytes)) out.push_back(static_cast<unsigned char>(c) < 0x20 ? ' ' : c);
  if (body.size() > kErrorExcerptBytes) out += "...";
  return out;
}

// How a pod's dialect reads in the log: its own name, or that vLLM's was assumed.
std::string_view dialectLabel(EngineKind kind) {
  return kind == EngineKind::kAuto ? "engine not recognised yet, spoken to as vllm" : engine::engineKindName(kind);
}

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

// A pod's keep-alive connection across the exchanges of one tokenize call: taken from the thread's pool (else
// opened on the first exchange), kept while each exchange ends cleanly, and handed back by release().
class PodConnection {
 public:
  PodConnection(const TokenizerPod& pod, ConnectionPool* pool, Clock::time_point deadline, size_t max_answer_bytes)
      : pod_(pod),
        pool_(pool),
        deadline_(deadline),
        max_answer_bytes_(max_answer_bytes),
        host_(pod.host + ":" + std::to_string(pod.port)),
        stream_(pool ? pool->take(pod.id) : nullptr),
        reused_(stream_ != nullptr) {}

  // POST `target`. A kept connection that fails before any answer byte (engines close idle keep-alive
  // connections) is retried once on a fresh one: tokenizing changes nothing, so asking twice is safe.
  asio::awaitable<Exchange> post(std::string_view target, std::string body) {
    Exchange out;
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, host_);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "prefixgate");
    req.keep_alive(true);
    req.body() = std::move(body);
    req.prepare_payload();
    for (;;) {
      error_code ec;
      if (!stream_) {
        stream_ = std::make_unique<beast::tcp_stream>(co_await asio::this_coro::executor);
        ec = co_await connect(*stream_, pod_, deadline_);
      }
      http::response_parser<http::string_body> parser;
      beast::flat_buffer buffer;
      if (!ec) {
        stream_->expires_at(deadline_);
        co_await http::async_write(*stream_, req, asio::redirect_error(kAwait, ec));
      }
      if (!ec) {
        parser.header_limit(kMaxAnswerHeaderBytes);
        parser.body_limit(max_answer_bytes_);
        stream_->expires_at(deadline_);
        co_await http::async_read(*stream_, buffer, parser, asio::redirect_error(kAwait, ec));
      }
      if (ec == http::error::body_limit) {
        stream_.reset();
        out.failure = Attempt::kBadAnswer;
        out.error = prefix() + ": the " + std::string(target) + " answer is larger than " +
                    std::to_string(max_answer_bytes_) + " bytes";
        co_return out;
      }
      if (ec) {
        stream_.reset();
        if (reused_ && ec != beast::error::timeout && !parser.got_some()) {
          reused_ = false;
          continue;
        }
        out.failure = ec == beast::error::timeout ? Attempt::kTimeout : Attempt::kConnection;
        out.error = prefix() + ", " + host_ + ": " + std::string(target) + " " +
                    (ec == beast::error::timeout ? std::string("timed out") : ec.message());
        co_return out;
      }
      auto answer = parser.release();
      // The connection serves the next exchange (or the pool) only when this one ended cleanly.
      if (answer.keep_alive() && buffer.size() == 0) reused_ = true;
      else stream_.reset();
      if (answer.result() != http::status::ok) {
        out.failure = Attempt::kStatus;
        out.error = prefix() + ": " + std::string(target) + " answered " + std::to_string(answer.result_int()) +
                    excerpt(answer.body());
      } else {
        out.body = std::move(answer.body());
      }
      co_return out;
    }
  }

  // Hands a cleanly ended connection back to the pool (a fresh one without a pool is closed).
  void release() {
    if (pool_ && stream_) pool_->give(pod_.id, std::move(stream_));
  }

  // "pod NAME (DIALECT)": how every failure of this pod begins.
  std::string prefix() const {
    return "pod " + pod_.name + " (" + std::string(dialectLabel(pod_.engine)) + ")";
  }

 private:
  const TokenizerPod& pod_;
  ConnectionPool* pool_;
  Clock::time_point deadline_;
  size_t max_answer_bytes_;
  std::string host_;
  std::unique_ptr<beast::tcp_stream> stream_;
  bool reused_;  // stream_ was kept from an earlier exchange (the pool's, or this call's)
};

// Asks `pod` for the input's tokens in its dialect: one POST /tokenize, or llama.cpp's /apply-template then
// /tokenize with the templated prompt, on one connection.
asio::awaitable<Attempt> askPod(const TokenizerPod& pod, const TokenizeInput& input, ConnectionPool* pool,
                                Clock::time_point deadline, size_t max_answer_bytes) {
  const EngineKind dialect = spokenDialect(pod.engine);
  PodConnection connection(pod, pool, deadline, max_answer_bytes);
  Attempt out;
  std::string body;
  if (needsApplyTemplate(dialect, input)) {
    Exchange templated = co_await connection.post(kApplyTemplateTarget, buildApplyTemplateBody(input));
    if (templated.failure != Attempt::kNone) {
      connection.release();
      out.failure = templated.failure;
      out.error = std::move(templated.error);
      co_return out;
    }
    std::string_view prompt;  // a view into templated.body, which outlives the body built from it
    if (std::string why; !parseApplyTemplateAnswer(templated.body, prompt, why)) {
      connection.release();
      out.failure = Attempt::kBadAnswer;
      out.error = connection.prefix() + ": bad /apply-template answer: " + why;
      co_return out;
    }
    body = buildLlamaCppTokenizeBody(input.model, prompt);
  } else {
    body = buildTokenizeBody(input, dialect);
  }
  Exchange tokenized = co_await connection.post(kTokenizeTarget, std::move(body));
  connection.release();
  if (tokenized.failure != Attempt::kNone) {
    out.failure = tokenized.failure;
    out.error = std::move(tokenized.error);
  } else if (std::string why; !parseTokenizeAnswer(tokenized.body, out.answer, why, dialect)) {
    out.failure = Attempt::kBadAnswer;
    out.error = connection.prefix() + ": bad /tokenize answer: " + why;
  }
  co_return out;
}

}  // namespace

std::string_view outcomeLabel(TokenizeOutcome outcome) {
  switch (outcome) {
    case TokenizeOutcome::kHit: return "hit";
    case TokenizeOutcome::kMiss: return "miss";
    case TokenizeOutcome::kError: return "error";
    case TokenizeOutcome::kTimeout: return "timeout";
    case TokenizeOutcome::kNoPod: return "no_pod";
    case TokenizeOutcome::kUnsupported: return "unsupported";
  }
  return "error";
}

RemoteTokenizer::RemoteTokenizer(RemoteTokenizerOptions options, PodLookup lookup)
    : options_(options),
      lookup_(std::move(lookup)),
      cache_(options.cache_entries, TokenCache::kDefaultShards, options.cache_bytes) {}

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
  const size_t askable = orderTokenizerPods(pods, input, rotation++);
  if (askable == 0) {
    // Every pod's dialect cannot (a chat request on SGLang): say why, for the first of them; ask nobody.
    const TokenizerPod& pod = pods.front();
    result.outcome = TokenizeOutcome::kUnsupported;
    result.pod = pod.name;
    result.engine = pod.engine;
    result.error = "pod " + pod.name + " (" + std::string(engine::engineKindName(pod.engine)) +
                   "): " + std::string(unsupportedReason(pod.engine, input)) +
                   (pods.size() > 1 ? " (nor can the model's other ready pods)" : "");
    result.seconds = secondsSince(started);
    co_return result;
  }
  const auto deadline = started + options_.timeout;
  const size_t tries = std::min(askable, kMaxPodsTried);
  for (size_t i = 0; i < tries; ++i) {
    const TokenizerPod& pod = pods[i];
    result.pod = pod.name;
    result.engine = spokenDialect(pod.engine);
    result.engine_assumed = pod.engine == EngineKind::kAuto;
    Attempt attempt = co_await askPod(pod, input, pool, deadline, options_.max_answer_bytes);
    if (attempt.failure == Attempt::kNone) {
      const size_t longest = attempt.answer.max_model_len > 0 ? attempt.answer.max_model_len
                                                              : options_.max_cached_tokens;
      const bool cacheable = attempt.answer.tokens.size() <= longest;
      auto tokens = std::make_shared<const std::vector<uint32_t>>(std::move(attempt.answer.tokens));
      if (cacheable) cache_.insert(key, tokens);
      result.tokens = std::move(tokens);
      result.outcome = TokenizeOutcome::kMiss;
      result.error.clear();
      break;
    }
    result.outcome = attempt.failure == Attempt::kTimeout ? TokenizeOutcome::kTimeout : TokenizeOutcome::kError;
    result.error = std::move(attempt.error);
    // Only a pod that could not be reached is worth another: an answer (error status, bad body) would repeat.
    if (attempt.failure != Attempt::kConnection) break;
  }
  result.seconds = secondsSince(started);
  co_return result;
}

}  // namespace prefixgate::tokenize
