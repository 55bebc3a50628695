#include "tokenize/remote_tokenizer.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <optional>

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
    case TokenizeOutcome::kJoined: return "joined";
  }
  return "error";
}

// One input's exchange in flight: the result once the asking call has it, and the timers of the calls waiting for
// it (weak: a waiter that gave up owns its timer alone). Guarded by `mutex`.
struct RemoteTokenizer::Pending {
  std::mutex mutex;
  bool done = false;
  TokenizeResult result;
  std::vector<std::weak_ptr<asio::steady_timer>> waiters;
};

// The asking call's duty to its waiters. It publishes when the last reference goes: the asking call keeps its
// result here and hands the reference to a handler posted to its own executor, so the waiters are woken only after
// the asking request has routed (its route decision runs right after tokenize returns, before its coroutine next
// yields) and a burst of one new prompt follows the pod it chose instead of racing it. An asking call abandoned
// before it finished (its coroutine destroyed at shutdown) publishes a failure, so no waiter is left to its
// timeout and no entry stays behind.
class RemoteTokenizer::Leading {
 public:
  Leading(RemoteTokenizer& owner, uint64_t key, std::shared_ptr<Pending> pending)
      : owner_(owner), key_(key), pending_(std::move(pending)) {}
  Leading(const Leading&) = delete;
  Leading& operator=(const Leading&) = delete;
  ~Leading() {
    if (!result_) {
      result_.emplace();
      result_->outcome = TokenizeOutcome::kError;
      result_->error = "the identical request asking the engine was abandoned";
    }
    try {
      publish(*result_);
    } catch (...) {  // allocation failure while waking: the waiters end at their timeouts
    }
  }

  void keep(const TokenizeResult& result) { result_ = result; }

 private:
  void publish(const TokenizeResult& result) {
    {
      std::lock_guard lock(owner_.pending_mutex_);
      auto it = owner_.pending_.find(key_);
      if (it != owner_.pending_.end() && it->second == pending_) owner_.pending_.erase(it);
    }
    std::vector<std::weak_ptr<asio::steady_timer>> waiters;
    {
      std::lock_guard lock(pending_->mutex);
      pending_->done = true;
      pending_->result = result;
      waiters.swap(pending_->waiters);
    }
    // A timer is cancelled on its own executor (timers are not thread-safe); the waiter then reads the result.
    for (auto& weak : waiters) {
      if (auto timer = weak.lock()) asio::post(timer->get_executor(), [timer] { timer->cancel(); });
    }
  }

  RemoteTokenizer& owner_;
  uint64_t key_;
  std::shared_ptr<Pending> pending_;
  std::optional<TokenizeResult> result_;
};

RemoteTokenizer::RemoteTokenizer(RemoteTokenizerOptions options, PodLookup lookup)
    : options_(options), lookup_(std::move(lookup)), cache_(options.cache_entries) {}

size_t RemoteTokenizer::inFlight() const {
  std::lock_guard lock(pending_mutex_);
  return pending_.size();
}

asio::awaitable<TokenizeResult> RemoteTokenizer::tokenize(const TokenizeInput& input, ConnectionPool* pool) {
  const auto started = Clock::now();
  const uint64_t key = tokenizeCacheKey(input);
  TokenizeResult result;
  result.tokens = cache_.find(key);
  if (result.tokens) {
    result.outcome = TokenizeOutcome::kHit;
    result.seconds = secondsSince(started);
    co_return result;
  }
  std::shared_ptr<Pending> pending;
  bool asks = false;
  {
    std::lock_guard lock(pending_mutex_);
    std::shared_ptr<Pending>& slot = pending_[key];
    if (!slot) {
      slot = std::make_shared<Pending>();
      asks = true;
    }
    pending = slot;
  }
  if (!asks) co_return co_await wait(std::move(pending), started, options_.timeout);
  auto leading = std::make_shared<Leading>(*this, key, pending);
  // The previous asker may have cached the answer between the lookup above and taking the slot.
  result.tokens = cache_.find(key);
  if (result.tokens) {
    result.outcome = TokenizeOutcome::kHit;
  } else {
    result = co_await ask(input, key, pool, started);
  }
  result.seconds = secondsSince(started);
  leading->keep(result);
  // Publishes once the posted handler has run (it holds the last reference). The executor is taken first: GCC 12
  // destroys a lambda built in the same expression as a co_await twice.
  auto executor = co_await asio::this_coro::executor;
  asio::post(executor, [leading] {});
  leading.reset();
  co_return result;
}

asio::awaitable<TokenizeResult> RemoteTokenizer::wait(std::shared_ptr<Pending> pending, Clock::time_point started,
                                                      std::chrono::milliseconds timeout) {
  auto executor = co_await asio::this_coro::executor;
  auto timer = std::make_shared<asio::steady_timer>(executor, started + timeout);
  bool registered = false;
  {
    std::lock_guard lock(pending->mutex);
    if (!pending->done) {
      pending->waiters.push_back(timer);
      registered = true;
    }
  }
  if (registered) {
    error_code ec;  // operation_aborted when the asker published; success when this call's timeout came first
    co_await timer->async_wait(asio::redirect_error(kAwait, ec));
  }
  TokenizeResult result;
  bool answered = false;
  {
    std::lock_guard lock(pending->mutex);
    answered = pending->done;
    if (answered) result = pending->result;
  }
  if (!answered) {
    result.outcome = TokenizeOutcome::kTimeout;
    result.error = "no answer within the timeout from the identical request asking the engine";
  } else if (result.ok()) {
    result.outcome = TokenizeOutcome::kJoined;
  }
  result.seconds = secondsSince(started);
  co_return result;
}

asio::awaitable<TokenizeResult> RemoteTokenizer::ask(const TokenizeInput& input, uint64_t key, ConnectionPool* pool,
                                                     Clock::time_point started) {
  TokenizeResult result;
  std::vector<TokenizerPod> pods;
  lookup_(input.model, pods);
  if (pods.empty()) {
    result.outcome = TokenizeOutcome::kNoPod;
    result.error = "no ready pod serves the model '" + std::string(input.model) + "'";
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
  co_return result;
}

}  // namespace prefixgate::tokenize
