#include "tokenize/remote_tokenizer.h"

#include <array>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <optional>

#include "net/drained_reads.h"

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
constexpr size_t kMaxPodsTried = 2;  // the first choice and one more pod: a hedge, or a retry
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

// The breakers' time: milliseconds of the steady clock the deadlines use.
int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

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
  if (!ec) net::drained_reads::enable(stream.socket().native_handle());
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
      // A call that stopped waiting (another pod answered, or the deadline passed) sends nothing more.
      if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) {
        stream_.reset();
        out.failure = Attempt::kConnection;
        out.error = prefix() + ": " + std::string(target) + " cancelled";
        co_return out;
      }
      error_code ec;
      if (!stream_) {
        stream_ = std::make_unique<net::UpstreamStream>(co_await asio::this_coro::executor);
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
  std::unique_ptr<net::UpstreamStream> stream_;
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

// One pod asked within a call: its breaker ticket and, once it completed, what it came to.
struct Flight {
  TokenizerPod pod;  // a copy: the exchange reads it until it completes
  TokenizeBreakers::Ticket ticket;
  bool hedge = false;    // asked because the first pod had not answered within the hedge delay
  bool running = false;  // its exchange has not completed
  bool settled = false;  // its outcome went to its breaker (or the call stopped waiting for it)
  std::optional<Attempt> attempt;  // how it ended (set by the call itself when it stopped waiting)
  asio::cancellation_signal cancel;
};

// The pods asked by one call, shared with their exchanges' completion handlers. Everything runs on the calling
// thread (a worker's one-thread io_context), so nothing here needs a lock.
struct Race {
  explicit Race(const asio::any_io_executor& executor) : wake(executor) {}
  asio::steady_timer wake;  // the call sleeps on it; each completed exchange cancels the sleep
  std::array<Flight, kMaxPodsTried> flights;
  size_t launched = 0;
  size_t running = 0;
};

// Starts asking `pod` beside the calling coroutine; its completion is recorded in the race and wakes the call.
// `input` and `pool` must outlive the exchange: the call waits for every exchange it started before it returns.
void launch(const std::shared_ptr<Race>& race, const TokenizerPod& pod, TokenizeBreakers::Ticket ticket, bool hedge,
            const TokenizeInput& input, ConnectionPool* pool, Clock::time_point deadline, size_t max_answer_bytes) {
  Flight& flight = race->flights[race->launched++];
  flight.pod = pod;
  flight.ticket = ticket;
  flight.hedge = hedge;
  flight.running = true;
  ++race->running;
  asio::co_spawn(race->wake.get_executor(), askPod(flight.pod, input, pool, deadline, max_answer_bytes),
                 asio::bind_cancellation_slot(flight.cancel.slot(),
                                              [race, &flight](std::exception_ptr error, Attempt attempt) {
                                                // Asio ends a cancelled coroutine with an exception: an exchange
                                                // the call stopped waiting for, already settled.
                                                if (error) attempt = Attempt{Attempt::kConnection, "cancelled", {}};
                                                if (!flight.settled) flight.attempt = std::move(attempt);
                                                flight.running = false;
                                                --race->running;
                                                race->wake.cancel();
                                              }));
}

// What a pod's failure tells its breaker; nothing for an answer (an error status or a bad body): it came quickly
// from a reachable pod, and would come from any pod for that request.
std::optional<BreakerFailure> breakerFailure(Attempt::Failure failure) {
  if (failure == Attempt::kTimeout) return BreakerFailure::kTimeout;
  if (failure == Attempt::kConnection) return BreakerFailure::kConnection;
  return std::nullopt;
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
    case TokenizeOutcome::kBreakerOpen: return "breaker_open";
  }
  return "error";
}

RemoteTokenizer::RemoteTokenizer(RemoteTokenizerOptions options, PodLookup lookup)
    : options_(options),
      lookup_(std::move(lookup)),
      cache_(options.cache_entries, TokenCache::kDefaultShards, options.cache_bytes),
      breakers_(options.breaker) {}

TokenizeBreakers::View RemoteTokenizer::breaker(uint32_t pod) const { return breakers_.view(pod, nowMs()); }

RemoteTokenizer::HedgeCounts RemoteTokenizer::hedges() const {
  return {hedges_won_.load(std::memory_order_relaxed), hedges_lost_.load(std::memory_order_relaxed),
          hedges_failed_.load(std::memory_order_relaxed)};
}

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
  const bool hedging = options_.hedge_delay.count() > 0 && options_.hedge_delay < options_.timeout;
  const auto hedge_at = started + options_.hedge_delay;
  auto race = std::make_shared<Race>(co_await asio::this_coro::executor);
  size_t next = 0;  // the next of `pods` to consider
  // Starts the next askable pod whose breaker lets it be asked; false when none is left.
  auto launchNext = [&](bool hedge) {
    while (next < askable && race->launched < kMaxPodsTried) {
      const TokenizerPod& pod = pods[next++];
      if (auto ticket = breakers_.acquire(pod.id, nowMs())) {
        launch(race, pod, *ticket, hedge, input, pool, deadline, options_.max_answer_bytes);
        return true;
      }
    }
    return false;
  };
  if (!launchNext(false)) {
    const TokenizerPod& pod = pods.front();
    const TokenizeBreakers::View view = breakers_.view(pod.id, nowMs());
    result.outcome = TokenizeOutcome::kBreakerOpen;
    result.error = "every pod that can tokenize is skipped after failing (pod " + pod.name + ": " +
                   std::string(breakerFailureLabel(view.last)) + ", tried again in " +
                   std::to_string(view.retry_in_ms) + " ms)";
    result.seconds = secondsSince(started);
    co_return result;
  }

  Flight* winner = nullptr;   // the first good answer
  Flight* stopper = nullptr;  // an answer that would repeat on any pod (an error status, a bad body)
  bool hedge_considered = !hedging;
  for (;;) {
    // Each exchange that completed tells its pod's breaker; the first good answer wins.
    Attempt::Failure last_failure = Attempt::kNone;
    for (size_t i = 0; i < race->launched; ++i) {
      Flight& flight = race->flights[i];
      if (flight.settled || !flight.attempt) continue;
      flight.settled = true;
      const Attempt::Failure failure = flight.attempt->failure;
      if (auto why = breakerFailure(failure)) breakers_.failed(flight.ticket, *why, nowMs());
      else breakers_.succeeded(flight.ticket);
      if (failure == Attempt::kNone) {
        if (!winner) winner = &flight;
      } else if (failure == Attempt::kStatus || failure == Attempt::kBadAnswer) {
        if (!stopper) stopper = &flight;
      } else {
        last_failure = failure;
      }
    }
    if (winner || stopper) break;
    if (race->running == 0) {
      // Only a pod that could not be reached is worth another: a timeout left no time.
      if (last_failure == Attempt::kConnection && launchNext(false)) continue;
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    if (!hedge_considered && now >= hedge_at) {
      hedge_considered = true;
      if (race->launched == 1) launchNext(true);
      continue;
    }
    error_code ec;
    race->wake.expires_at(hedge_considered ? deadline : std::min(hedge_at, deadline));
    co_await race->wake.async_wait(asio::redirect_error(kAwait, ec));
  }

  // Stop waiting for the others: a loser to the winner (the first pod, when a hedge beat it, was slow), the rest
  // of a call an answer ended, or exchanges past the deadline. Each is cancelled, and awaited before returning.
  for (size_t i = 0; i < race->launched; ++i) {
    Flight& flight = race->flights[i];
    if (flight.settled) continue;
    flight.settled = true;
    if (winner && winner->hedge && !flight.hedge) {
      breakers_.failed(flight.ticket, BreakerFailure::kSlow, nowMs());
    } else if (winner || stopper) {
      breakers_.abandoned(flight.ticket);
    } else {
      breakers_.failed(flight.ticket, BreakerFailure::kTimeout, nowMs());
      flight.attempt = Attempt{Attempt::kTimeout,
                               "pod " + flight.pod.name + " (" + std::string(dialectLabel(flight.pod.engine)) +
                                   "): no answer within " + std::to_string(options_.timeout.count()) + " ms",
                               {}};
    }
    flight.cancel.emit(asio::cancellation_type::terminal);
  }
  while (race->running > 0) {
    error_code ec;
    race->wake.expires_at(Clock::time_point::max());
    co_await race->wake.async_wait(asio::redirect_error(kAwait, ec));
  }

  const bool hedged = race->launched > 1 && race->flights[1].hedge;
  if (hedged) {
    auto& counter = winner ? (winner->hedge ? hedges_won_ : hedges_lost_) : hedges_failed_;
    counter.fetch_add(1, std::memory_order_relaxed);
  }
  // The pod the result names: the winner, else the answer that ended the call, else the last pod asked.
  const Flight& named = winner ? *winner : stopper ? *stopper : race->flights[race->launched - 1];
  result.pod = named.pod.name;
  result.engine = spokenDialect(named.pod.engine);
  result.engine_assumed = named.pod.engine == EngineKind::kAuto;
  if (winner) {
    TokenizeAnswer& answer = winner->attempt->answer;
    const size_t longest = answer.max_model_len > 0 ? answer.max_model_len : options_.max_cached_tokens;
    const bool cacheable = answer.tokens.size() <= longest;
    auto tokens = std::make_shared<const std::vector<uint32_t>>(std::move(answer.tokens));
    if (cacheable) cache_.insert(key, tokens);
    result.tokens = std::move(tokens);
    result.outcome = TokenizeOutcome::kMiss;
  } else if (stopper) {
    result.outcome = TokenizeOutcome::kError;
    result.error = stopper->attempt->error;
  } else {
    // Every pod asked failed (each completed, or was stopped at the deadline): say what each came to.
    bool timed_out = false;
    for (size_t i = 0; i < race->launched; ++i) {
      const Attempt& attempt = *race->flights[i].attempt;
      timed_out = timed_out || attempt.failure == Attempt::kTimeout;
      if (!result.error.empty()) result.error += "; ";
      result.error += attempt.error;
    }
    result.outcome = timed_out ? TokenizeOutcome::kTimeout : TokenizeOutcome::kError;
  }
  result.seconds = secondsSince(started);
  co_return result;
}

}  // namespace prefixgate::tokenize
