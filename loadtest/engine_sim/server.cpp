#include "engine_sim/server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "engine_sim/anthropic_json.h"
#include "engine_sim/dialect.h"
#include "engine_sim/engine.h"
#include "engine_sim/kv_event_publisher.h"
#include "engine_sim/kv_events.h"
#include "engine_sim/output_text.h"
#include "engine_sim/request_handlers.h"
#include "engine_sim/responses_api.h"
#include "engine_sim/scoring.h"
#include "engine_sim/request_log.h"
#include "net/listener.h"
#include "util/log.h"

namespace prefixgate::sim {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using Request = http::request<http::string_body>;

struct ServerState {
  explicit ServerState(SimConfig c) : config(std::move(c)), dialect(makeDialect(config)), engine(config) {}
  SimConfig config;
  std::unique_ptr<Dialect> dialect;  // the HTTP surface (--engine-dialect)
  std::unique_ptr<KvEventPublisher> publisher;  // declared before the engine, whose sink uses it
  Engine engine;
  RequestLog requests;
  Faults faults;
  ResponseStore responses;  // the Responses API's stored responses (GET, DELETE, previous_response_id)
  // Makes this pod's response ids unlike any other pod's (as vLLM's random ids are): pods started in the same
  // second would otherwise number theirs alike, and an id would name responses on two pods.
  uint64_t response_id_salt = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  uint64_t next_response_id = 1;
  int64_t started_at = 0;  // unix seconds
  uint16_t port = 0;       // the bound HTTP port (a prefill leg's remote_port)
};

namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
// While a response is generated the session reads ahead only to notice the client leaving; it stops reading once
// this much pipelined data is buffered.
constexpr size_t kWatchReadBytes = 4096;
constexpr size_t kMaxPipelinedBytes = 1 << 20;
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(50);

int64_t unixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

void logFailure(std::exception_ptr failure) {
  if (!failure) return;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    log::error("engine-sim: connection failed: {}", e.what());
  } catch (...) {
    log::error("engine-sim: connection failed");
  }
}

void logRequest(const RequestRecord& r, double latency_ms) {
  log::info("{} {} status={} model={} prompt_tokens={} cached_tokens={} output_tokens={} latency_ms={:.1f}{}",
            r.method, r.path, r.status, r.model.empty() ? "-" : r.model, r.prompt_tokens, r.cached_tokens,
            r.completion_tokens, latency_ms, r.cancelled ? " cancelled" : "");
}

// The answer instead of serving a parsed request: the parse's own error (injected faults came before: faultFirst).
template <class ParsedRequest>
std::optional<SimpleResponse> refuseWith(const ServerState& state, const ParsedRequest& parsed) {
  if (!parsed.ok()) return state.dialect->error(parsed.status, parsed.error);
  return std::nullopt;
}

// The body's "model" when it is a JSON object naming one (for /sim/requests' record of a faulted request).
std::string modelOf(std::string_view body) {
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);
  if (!doc.is_object()) return {};
  const auto it = doc.find("model");
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// One client connection: reads requests one after another (keep-alive) and answers each.
class Session {
 public:
  Session(ServerState& state, tcp::socket socket) : state_(state), stream_(std::move(socket)) {}
  asio::awaitable<void> run();

 private:
  asio::awaitable<bool> serve(Request& request);
  asio::awaitable<bool> route(Request& request, std::string_view path);
  // The injected faults (/sim/fault) every inference endpoint honours, in one place before any of them reads its
  // body: a stall (accepted, never answered until the client leaves: keep false), else an error status in the
  // endpoint's error shape (keep: as the send went). nullopt: no fault, serve the request.
  asio::awaitable<std::optional<bool>> faultFirst(const Request& request, std::string_view path,
                                                  RequestRecord& record);
  asio::awaitable<bool> serveCompletion(const Request& request, Endpoint endpoint, RequestRecord& record);
  asio::awaitable<bool> generate(const Request& request, const CompletionRequest& job, Engine::Sequence& sequence,
                                 RequestRecord& record);
  asio::awaitable<bool> serveEmbeddings(const Request& request, RequestRecord& record);
  // POST /v1/responses: the chat the body amounts to (responses_api.h), generated, answered in the Responses shapes
  // and stored.
  asio::awaitable<bool> serveResponses(const Request& request, RequestRecord& record);
  asio::awaitable<bool> generateResponse(const Request& request, const CompletionRequest& job,
                                         const ResponsesChat& chat, Engine::Sequence& sequence, RequestRecord& record);
  // GET/DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel.
  SimpleResponse answerStoredResponse(const Request& request, std::string_view path);
  // /v1/rerank, /v2/rerank (rerank) and /v1/score: every pair prefilled as one prompt-only sequence, then answered.
  asio::awaitable<bool> serveScoring(const Request& request, bool rerank, RequestRecord& record);
  // GCC 12 destroys temporaries in a co_await's arguments twice: callers pass named objects by reference.
  asio::awaitable<bool> send(const Request& request, const SimpleResponse& response, RequestRecord* record = nullptr);
  std::optional<SimpleResponse> answerAtOnce(const Request& request, std::string_view path);
  asio::awaitable<bool> writeStreamHead(const Request& request);
  asio::awaitable<bool> writeChunk(const std::string& data);
  asio::awaitable<bool> writeLastChunk();
  asio::awaitable<void> watchClose();
  std::shared_ptr<RequestRecord> recordRequest(const Request& request, std::string_view path);
  std::string nextResponseId(Endpoint endpoint);
  // The kv_transfer_params a request that carried them gets back: a prefill leg capped by max_tokens hands out
  // its blocks (NixlConnector's request_finished returns nothing for any other finish), the others get null.
  nlohmann::json kvTransferAnswer(const CompletionRequest& job, const Engine::Sequence& sequence,
                                  std::string_view request_id) const;
  void armWriteTimeout() { stream_.expires_after(std::chrono::milliseconds(state_.config.write_timeout_ms)); }

  ServerState& state_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

asio::awaitable<void> Session::run() {
  const SimConfig& config = state_.config;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(config.max_header_bytes);
    parser.body_limit(config.max_body_bytes);
    // vLLM closes keep-alive connections idle this long; the gateway's pool relies on it.
    stream_.expires_after(std::chrono::milliseconds(config.keep_alive_timeout_ms));
    auto [ec, bytes] = co_await http::async_read_header(stream_, buffer_, parser, kUseTuple);
    if (ec) break;
    if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      http::response<http::empty_body> proceed{http::status::continue_, parser.get().version()};
      armWriteTimeout();
      std::tie(ec, bytes) = co_await http::async_write(stream_, proceed, kUseTuple);
      if (ec) break;
    }
    stream_.expires_after(std::chrono::milliseconds(config.body_read_timeout_ms));
    std::tie(ec, bytes) = co_await http::async_read(stream_, buffer_, parser, kUseTuple);
    if (ec == http::error::body_limit) {
      Request head = parser.release();
      head.keep_alive(false);
      SimpleResponse too_large = state_.dialect->error(413, "the request body is too large");
      co_await send(head, too_large);
      break;
    }
    if (ec) break;
    Request request = parser.release();
    if (!co_await serve(request) || !request.keep_alive()) break;
  }
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<bool> Session::serve(Request& request) {
  std::string_view target = request.target();
  std::string_view path = target.substr(0, target.find('?'));
  bool keep = false;
  try {
    keep = co_await route(request, path);
  } catch (const std::exception& e) {
    // A bug, not bad input (that gets a 4xx): drop this connection and keep serving the others.
    log::error("engine-sim: {} {} failed: {}", std::string(request.method_string()), std::string(path), e.what());
  }
  co_return keep;
}

// The endpoints that are not recorded in /sim/requests, and unknown paths.
std::optional<SimpleResponse> Session::answerAtOnce(const Request& request, std::string_view path) {
  http::verb method = request.method();
  const Dialect& dialect = *state_.dialect;
  if (path == "/health" && method == http::verb::get) return dialect.health(state_.faults.health_status);
  if (path == "/sim/info" && method == http::verb::get) return handleSimInfo(state_.config);
  if (method == http::verb::get) {  // /metrics, and the dialect's own pages (/props, /slots)
    MetricsSnapshot snapshot = state_.engine.snapshot();
    EngineView view{snapshot, state_.engine.histograms(), state_.started_at};
    if (path == "/metrics") {
      state_.engine.startActivityWindow();  // the rates llama-server and SGLang report are since the last scrape
      return dialect.metrics(view);
    }
    if (std::optional<SimpleResponse> page = dialect.info(path, view)) return page;
  }
  if (path == "/sim/requests" && (method == http::verb::get || method == http::verb::delete_)) {
    if (method == http::verb::delete_) state_.requests.clear();
    return SimpleResponse{200, "application/json",
                          state_.requests.toJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
  }
  if (path == "/sim/cache/match" && method == http::verb::post) {
    const Engine& engine = state_.engine;
    auto lookup = [&engine](std::span<const uint32_t> tokens) {
      const StepScheduler& scheduler = engine.scheduler();
      return CacheMatch{engine.cachedPrefixTokens(tokens), scheduler.numRunning(), scheduler.numWaiting(),
                        scheduler.kvCacheUsage()};
    };
    return handleCacheMatch(request.body(), lookup, state_.config.dialect());
  }
  if (path == "/reset_prefix_cache" && method == http::verb::post) {
    // vLLM's development endpoint: refused (the cache stays) while requests hold blocks.
    bool reset = state_.engine.resetPrefixCache();
    return SimpleResponse{reset ? 200 : 409, "application/json", nlohmann::json{{"reset", reset}}.dump()};
  }
  if (path.starts_with("/v1/responses/")) return answerStoredResponse(request, path);
  if (path == "/sim/fault" && method == http::verb::post) return handleFault(state_.faults, request.body());
  if (path == "/sim/fault" && method == http::verb::get) return faultsResponse(state_.faults);
  for (std::string_view known : {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
                                  "/v1/rerank", "/v2/rerank", "/v1/score", "/v1/messages", "/v1/messages/count_tokens",
                                  "/v1/responses"})
    if (path == known) return std::nullopt;
  if (dialect.isTokenizerPath(path)) return std::nullopt;
  return dialect.error(404, "Not Found");
}

asio::awaitable<bool> Session::route(Request& request, std::string_view path) {
  if (std::optional<SimpleResponse> answer = answerAtOnce(request, path)) co_return co_await send(request, *answer);
  auto started = std::chrono::steady_clock::now();
  std::shared_ptr<RequestRecord> record = recordRequest(request, path);
  bool chat = path == "/v1/chat/completions";
  bool completions = path == "/v1/completions";
  bool messages = path == "/v1/messages";
  bool models = path == "/v1/models";
  std::optional<SimpleResponse> answer;
  std::optional<bool> faulted;
  if (request.method() != (models ? http::verb::get : http::verb::post)) {
    answer = state_.dialect->error(405, "Method Not Allowed");
  } else if (models) {
    answer = state_.dialect->models(state_.started_at);
  } else if (state_.dialect->isTokenizerPath(path)) {
    // Injected faults (/sim/fault): a slow tokenizer, then an error status instead of the answer.
    if (state_.faults.tokenize_delay_ms > 0) {
      asio::steady_timer delay(co_await asio::this_coro::executor);
      delay.expires_after(std::chrono::milliseconds(state_.faults.tokenize_delay_ms));
      co_await delay.async_wait(kUseTuple);
    }
    int injected = state_.faults.tokenize_status;
    answer = injected != 0 ? state_.dialect->error(injected, "injected fault")
                           : state_.dialect->tokenizer(path, request.body());
  } else {
    // Every inference endpoint (chat, completions, messages and count_tokens, embeddings, responses, rerank,
    // score): the faults first, whichever endpoint it is.
    faulted = co_await faultFirst(request, path, *record);
    if (!faulted && path == "/v1/messages/count_tokens") answer = handleCountTokens(state_.config, request.body());
  }
  bool keep = false;
  if (faulted) {
    keep = *faulted;
  } else if (answer) {
    keep = co_await send(request, *answer, record.get());
  } else if (chat || completions || messages) {
    keep = co_await serveCompletion(
        request, chat ? Endpoint::kChat : messages ? Endpoint::kMessages : Endpoint::kCompletion, *record);
  } else if (path == "/v1/embeddings") {
    keep = co_await serveEmbeddings(request, *record);
  } else if (path == "/v1/responses") {
    keep = co_await serveResponses(request, *record);
  } else {
    keep = co_await serveScoring(request, path != "/v1/score", *record);
  }
  logRequest(*record, msSince(started));
  co_return keep;
}

asio::awaitable<std::optional<bool>> Session::faultFirst(const Request& request, std::string_view path,
                                                         RequestRecord& record) {
  const Faults& faults = state_.faults;
  if (!faults.stall && faults.error_status == 0) co_return std::nullopt;
  record.model = modelOf(request.body());
  if (faults.stall) {
    co_await watchClose();
    record.cancelled = true;
    co_return false;
  }
  SimpleResponse refused = state_.dialect->error(faults.error_status, "injected fault");
  // vLLM's Messages endpoints answer their errors in Anthropic's shape.
  if (path.starts_with("/v1/messages")) refused.body = anthropicErrorJson(faults.error_status, "injected fault").dump();
  const bool keep = co_await send(request, refused, &record);
  co_return keep;
}

asio::awaitable<bool> Session::serveCompletion(const Request& request, Endpoint endpoint, RequestRecord& record) {
  Parsed<CompletionRequest> parsed = parseCompletionRequest(state_.config, endpoint, request.body());
  const CompletionRequest& job = parsed.request;
  record.model = job.model;
  record.stream = job.stream;
  record.prompt_tokens = static_cast<uint32_t>(job.prompt.tokens.size());
  record.kv_role_leg = kvRoleLeg(job.kv_transfer.leg);
  std::optional<SimpleResponse> refusal = refuseWith(state_, parsed);
  // vLLM's Messages endpoint answers its errors in Anthropic's shape.
  if (refusal && job.endpoint == Endpoint::kMessages)
    refusal->body = anthropicErrorJson(refusal->status, parsed.error).dump();
  if (refusal) co_return co_await send(request, *refusal, &record);

  Engine::StartResult started = state_.engine.start(co_await asio::this_coro::executor, job.prompt.tokens,
                                                    job.max_tokens, job.kv_transfer.leg, job.cache_salt);
  if (!started.sequence) {
    SimpleResponse never_fits = state_.dialect->error(400, started.error);
    co_return co_await send(request, never_fits, &record);
  }
  // Generation races the client: if the client goes first, generation is cancelled and the sequence (destroyed
  // when this returns) frees its slot, as vLLM aborts a request whose client disconnected.
  auto outcome = co_await (generate(request, job, *started.sequence, record) || watchClose());
  bool finished = outcome.index() == 0 && std::get<0>(outcome);
  if (!finished) record.cancelled = true;
  // --close-after-stream (llama-server's behaviour): the connection ends with the stream, though the response
  // head did not say so.
  co_return finished && !(job.stream && state_.config.close_after_stream);
}

asio::awaitable<bool> Session::generate(const Request& request, const CompletionRequest& job,
                                        Engine::Sequence& sequence, RequestRecord& record) {
  co_await asio::this_coro::throw_if_cancelled(false);
  Engine& engine = state_.engine;
  const Dialect& dialect = *state_.dialect;
  CompletionMeta meta{job.endpoint, nextResponseId(job.endpoint), unixNow(), job.model};
  const bool anthropic = job.endpoint == Endpoint::kMessages;
  // Like vLLM, a stream's head goes out at once; its first event follows the prefill.
  if (job.stream) {
    if (!co_await writeStreamHead(request)) co_return false;
    record.status = 200;
  }
  OutputText output = OutputText::forPrompt(job.prompt.tokens);
  std::string text;
  uint32_t sent = 0;
  // Until every token is out: the sequence may finish while a write is under way, with tokens still to send.
  while (!sequence.finished() || sent < sequence.generatedTokens()) {
    if (!co_await engine.waitProgress(sequence, sent)) co_return false;
    // Every token ready goes out now; a client slower than the engine gets several in one write.
    std::string events;
    for (; sent < sequence.generatedTokens(); ++sent) {
      std::string piece = output.token(sent);
      if (job.stream && anthropic) {
        if (sent == 0) events += messageStartEvents(meta, Usage{sequence.promptTokens(), 0, 0});
        events += textDeltaEvent(piece);
      } else if (job.stream) {
        events += dialect.tokenEvents(meta, piece, sent == 0);
      } else {
        text += piece;
      }
    }
    record.completion_tokens = sent;
    record.cached_tokens = sequence.cachedTokens();
    record.kv_pulled_tokens = sequence.kvPulledTokens();
    record.kv_transfer_ms = sequence.kvTransferMs();
    if (!events.empty() && !co_await writeChunk(events)) co_return false;
  }
  Outcome outcome{Usage{sequence.promptTokens(), sequence.generatedTokens(), sequence.cachedTokens()},
                  Timings{sequence.cachedTokens(), sequence.promptTokens() - sequence.cachedTokens(),
                          sequence.promptMs(), sequence.generatedTokens(), sequence.predictedMs()}};
  if (job.kv_transfer.present) outcome.kv_transfer_params = kvTransferAnswer(job, sequence, meta.id);
  if (!job.stream) {
    SimpleResponse response{200, "application/json",
                            anthropic ? messageResponse(meta, text, job.finish_reason, outcome.usage).dump()
                                      : dialect.completionBody(meta, text, job.finish_reason, outcome)};
    co_return co_await send(request, response, &record);
  }
  std::string tail = anthropic ? messageEndEvents(job.finish_reason, outcome.usage)
                               : dialect.streamEnd(meta, job.finish_reason, job.include_usage, outcome);
  if (!co_await writeChunk(tail)) co_return false;
  if (!co_await writeLastChunk()) co_return false;
  record.completed = true;
  co_return true;
}

SimpleResponse Session::answerStoredResponse(const Request& request, std::string_view path) {
  std::string id(path.substr(std::string_view("/v1/responses/").size()));
  const bool cancel = id.ends_with("/cancel");
  if (cancel) id.resize(id.size() - std::string_view("/cancel").size());
  const http::verb method = request.method();
  if (cancel ? method != http::verb::post : method != http::verb::get && method != http::verb::delete_)
    return state_.dialect->error(405, "Method Not Allowed");
  const StoredResponse* stored = state_.responses.find(id);
  if (!stored) return SimpleResponse{404, "application/json", responseNotFound(id).dump()};
  if (method == http::verb::delete_) {
    state_.responses.erase(id);
    return SimpleResponse{200, "application/json",
                          nlohmann::json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump()};
  }
  // A stored response is complete: cancelling it answers it as it is (vLLM cancels only background responses).
  return SimpleResponse{200, "application/json", stored->response.dump()};
}

asio::awaitable<bool> Session::serveResponses(const Request& request, RequestRecord& record) {
  ResponsesChat chat = responsesChat(request.body(), state_.responses);
  if (chat.status == 404) {
    SimpleResponse missing{404, "application/json", responseNotFound(chat.previous_response_id).dump()};
    co_return co_await send(request, missing, &record);
  }
  if (chat.status != 0) {
    SimpleResponse refused = state_.dialect->error(chat.status, chat.error);
    co_return co_await send(request, refused, &record);
  }
  Parsed<CompletionRequest> parsed = parseCompletionRequest(state_.config, Endpoint::kChat, chat.chat_body.dump());
  const CompletionRequest& job = parsed.request;
  record.model = job.model;
  record.stream = job.stream;
  record.prompt_tokens = static_cast<uint32_t>(job.prompt.tokens.size());
  std::optional<SimpleResponse> refusal = refuseWith(state_, parsed);
  if (refusal) co_return co_await send(request, *refusal, &record);
  Engine::StartResult started = state_.engine.start(co_await asio::this_coro::executor, job.prompt.tokens,
                                                    job.max_tokens, job.kv_transfer.leg, job.cache_salt);
  if (!started.sequence) {
    SimpleResponse never_fits = state_.dialect->error(400, started.error);
    co_return co_await send(request, never_fits, &record);
  }
  // As chat: generation races the client, and a client gone first cancels it.
  auto outcome = co_await (generateResponse(request, job, chat, *started.sequence, record) || watchClose());
  const bool finished = outcome.index() == 0 && std::get<0>(outcome);
  if (!finished) record.cancelled = true;
  co_return finished;
}

asio::awaitable<bool> Session::generateResponse(const Request& request, const CompletionRequest& job,
                                                const ResponsesChat& chat, Engine::Sequence& sequence,
                                                RequestRecord& record) {
  co_await asio::this_coro::throw_if_cancelled(false);
  const std::string id = fmt::format("resp_{:016x}{:08x}", state_.response_id_salt, state_.next_response_id++);
  const std::string message_id = fmt::format("msg_{:x}{:08x}", state_.started_at, state_.next_response_id++);
  const int64_t created = unixNow();
  uint32_t seq = 0;
  if (job.stream) {
    if (!co_await writeStreamHead(request)) co_return false;
    record.status = 200;
    const std::string head =
        responseStartEvents(responseObject(id, message_id, created, job.model, "in_progress", "", nullptr), message_id, seq);
    if (!co_await writeChunk(head)) co_return false;
  }
  OutputText output = OutputText::forPrompt(job.prompt.tokens);
  std::string text;
  uint32_t sent = 0;
  while (!sequence.finished() || sent < sequence.generatedTokens()) {
    if (!co_await state_.engine.waitProgress(sequence, sent)) co_return false;
    std::string events;
    for (; sent < sequence.generatedTokens(); ++sent) {
      std::string piece = output.token(sent);
      if (job.stream) events += outputTextDeltaEvent(message_id, piece, seq);
      text += piece;
    }
    record.completion_tokens = sent;
    record.cached_tokens = sequence.cachedTokens();
    if (!events.empty() && !co_await writeChunk(events)) co_return false;
  }
  const Usage usage{sequence.promptTokens(), sequence.generatedTokens(), sequence.cachedTokens()};
  nlohmann::json completed = responseObject(id, message_id, created, job.model, "completed", text, &usage);
  nlohmann::json conversation = chat.messages;
  conversation.push_back(nlohmann::json{{"role", "assistant"}, {"content", text}});
  state_.responses.put(id, StoredResponse{completed, std::move(conversation)});
  if (!job.stream) {
    SimpleResponse response{200, "application/json", completed.dump()};
    co_return co_await send(request, response, &record);
  }
  const std::string tail = responseEndEvents(completed, message_id, text, seq);
  if (!co_await writeChunk(tail)) co_return false;
  if (!co_await writeLastChunk()) co_return false;
  record.completed = true;
  co_return true;
}

asio::awaitable<bool> Session::serveEmbeddings(const Request& request, RequestRecord& record) {
  Parsed<EmbeddingRequest> parsed = parseEmbeddingRequest(state_.config, request.body());
  record.model = parsed.request.model;
  uint64_t tokens = 0;
  for (const auto& input : parsed.request.inputs) tokens += input.tokens.size();
  record.prompt_tokens = static_cast<uint32_t>(tokens);
  std::optional<SimpleResponse> refusal = refuseWith(state_, parsed);
  if (refusal) co_return co_await send(request, *refusal, &record);
  // The inputs are prefilled together, as one prompt-only sequence through the engine's steps.
  std::vector<uint32_t> all_tokens;
  for (const auto& input : parsed.request.inputs)
    all_tokens.insert(all_tokens.end(), input.tokens.begin(), input.tokens.end());
  Engine::StartResult started = state_.engine.start(co_await asio::this_coro::executor, all_tokens, 0);
  if (!started.sequence) {
    SimpleResponse never_fits = state_.dialect->error(400, started.error);
    co_return co_await send(request, never_fits, &record);
  }
  auto outcome = co_await (state_.engine.waitProgress(*started.sequence, 0) || watchClose());
  if (outcome.index() != 0 || !std::get<0>(outcome)) {
    record.cancelled = true;
    co_return false;
  }
  std::vector<std::vector<float>> embeddings;
  for (const auto& input : parsed.request.inputs) embeddings.push_back(embeddingFor(input.tokens));
  SimpleResponse response{200, "application/json", embeddingsResponse(parsed.request.model, embeddings, tokens).dump()};
  co_return co_await send(request, response, &record);
}

asio::awaitable<bool> Session::serveScoring(const Request& request, bool rerank, RequestRecord& record) {
  Parsed<ScoringRequest> parsed =
      rerank ? parseRerankRequest(state_.config, request.body()) : parseScoreRequest(state_.config, request.body());
  const ScoringRequest& job = parsed.request;
  record.model = job.model;
  record.prompt_tokens = static_cast<uint32_t>(std::min<uint64_t>(job.tokens(), UINT32_MAX));
  std::optional<SimpleResponse> refusal = refuseWith(state_, parsed);
  if (refusal) co_return co_await send(request, *refusal, &record);
  // Every pair is prefilled (a cross-encoder reads query and document together): one prompt-only sequence.
  std::vector<uint32_t> all_tokens;
  std::vector<double> scores;
  for (size_t i = 0; i < job.documents.size(); ++i) {
    all_tokens.insert(all_tokens.end(), job.queries[i].tokens.begin(), job.queries[i].tokens.end());
    all_tokens.insert(all_tokens.end(), job.documents[i].tokens.begin(), job.documents[i].tokens.end());
    scores.push_back(pairScore(job.queries[i], job.documents[i]));
  }
  Engine::StartResult started = state_.engine.start(co_await asio::this_coro::executor, all_tokens, 0);
  if (!started.sequence) {
    SimpleResponse never_fits = state_.dialect->error(400, started.error);
    co_return co_await send(request, never_fits, &record);
  }
  auto outcome = co_await (state_.engine.waitProgress(*started.sequence, 0) || watchClose());
  if (outcome.index() != 0 || !std::get<0>(outcome)) {
    record.cancelled = true;
    co_return false;
  }
  const std::string id = fmt::format("{}-{:x}{:08x}", rerank ? "rerank" : "score", state_.started_at,
                                     state_.next_response_id++);
  const nlohmann::json body =
      rerank ? rerankResponse(id, job, scores) : scoreResponse(id, unixNow(), job, scores);
  SimpleResponse response{200, "application/json", body.dump()};
  co_return co_await send(request, response, &record);
}

asio::awaitable<bool> Session::send(const Request& request, const SimpleResponse& response, RequestRecord* record) {
  http::response<http::string_body> message;
  message.version(request.version());
  message.result(static_cast<unsigned>(response.status));
  message.set(http::field::content_type, response.content_type);
  message.set("x-sim-pod", state_.config.name);
  for (const auto& [name, value] : response.headers) message.set(name, value);
  message.keep_alive(request.keep_alive());
  message.body() = response.body;
  message.prepare_payload();
  if (record != nullptr) record->status = response.status;
  armWriteTimeout();
  auto [ec, bytes] = co_await http::async_write(stream_, message, kUseTuple);
  if (ec) co_return false;
  if (record != nullptr) record->completed = true;
  co_return true;
}

asio::awaitable<bool> Session::writeStreamHead(const Request& request) {
  http::response<http::empty_body> head{http::status::ok, request.version()};
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.set("x-sim-pod", state_.config.name);
  head.keep_alive(request.keep_alive());
  head.chunked(true);
  http::response_serializer<http::empty_body> serializer{head};
  armWriteTimeout();
  auto [ec, bytes] = co_await http::async_write_header(stream_, serializer, kUseTuple);
  co_return !ec;
}

asio::awaitable<bool> Session::writeChunk(const std::string& data) {
  armWriteTimeout();
  auto [ec, bytes] = co_await asio::async_write(stream_, http::make_chunk(asio::buffer(data)), kUseTuple);
  co_return !ec;
}

asio::awaitable<bool> Session::writeLastChunk() {
  armWriteTimeout();
  auto [ec, bytes] = co_await asio::async_write(stream_, http::make_chunk_last(), kUseTuple);
  co_return !ec;
}

// Completes when the client closes the connection (or it fails). Reads the raw socket, past the stream's
// timeouts; bytes a client pipelines meanwhile stay in buffer_ for the next request.
asio::awaitable<void> Session::watchClose() {
  co_await asio::this_coro::throw_if_cancelled(false);
  while (buffer_.size() < kMaxPipelinedBytes) {
    auto [ec, bytes] = co_await stream_.socket().async_read_some(buffer_.prepare(kWatchReadBytes), kUseTuple);
    if (ec) co_return;
    buffer_.commit(bytes);
  }
  // Too much pipelined: stop reading and wait to be cancelled.
  asio::steady_timer never(co_await asio::this_coro::executor, asio::steady_timer::time_point::max());
  boost::system::error_code ec;
  co_await never.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

std::shared_ptr<RequestRecord> Session::recordRequest(const Request& request, std::string_view path) {
  RequestRecord record;
  record.method = std::string(request.method_string());
  record.path = std::string(path);
  for (const auto& field : request) {
    std::string& value = record.headers[lowercase(field.name_string())];
    if (!value.empty()) value += ", ";
    value += std::string(field.value());
  }
  record.body_bytes = request.body().size();
  return state_.requests.add(std::move(record));
}

std::string Session::nextResponseId(Endpoint endpoint) {
  if (endpoint == Endpoint::kMessages) return fmt::format("msg_{:x}{:08x}", state_.started_at, state_.next_response_id++);
  return fmt::format("{}-{:x}{:08x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl", state_.started_at,
                     state_.next_response_id++);
}

nlohmann::json Session::kvTransferAnswer(const CompletionRequest& job, const Engine::Sequence& sequence,
                                         std::string_view request_id) const {
  if (job.kv_transfer.leg != KvTransfer::kSend || job.finish_reason != "length") return nullptr;
  const SimConfig& config = state_.config;
  return prefillLegParams(KvOrigin{config.engineId(), config.host, state_.port}, request_id, sequence.kvBlockIds());
}

asio::awaitable<void> runSession(ServerState& state, tcp::socket socket) {
  Session session(state, std::move(socket));
  co_await session.run();
}

asio::awaitable<void> acceptLoop(ServerState& state, tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kUseTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of file descriptors and the like: back off instead of spinning.
      log::warn("engine-sim: accept failed: {}", ec.message());
      asio::steady_timer pause(acceptor.get_executor(), kAcceptRetryDelay);
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    asio::co_spawn(acceptor.get_executor(), runSession(state, std::move(socket)), logFailure);
  }
}

}  // namespace

Server::Server(SimConfig config) : state_(std::make_unique<ServerState>(std::move(config))) {
  state_->started_at = unixNow();
  const SimConfig& c = state_->config;
  if (c.kv_events.empty()) return;
  state_->publisher = std::make_unique<KvEventPublisher>(c.kv_events, c.kv_replay);
  KvEventEncoding encoding = *parseKvEventEncoding(c.kv_events_encoding);
  state_->engine.setEventSink([state = state_.get(), encoding](std::span<const KvEvent> events) {
    double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    state->publisher->publish(encodeKvEventBatch(now, events, state->config.block_size, 0, encoding));
  });
}

std::string Server::kvEventsEndpoint() const {
  return state_->publisher ? state_->publisher->endpoint() : std::string();
}

std::string Server::kvReplayEndpoint() const {
  return state_->publisher ? state_->publisher->replayEndpoint() : std::string();
}

Server::~Server() = default;

int Server::run(const std::function<void(const std::string& host, uint16_t port)>& on_listening) {
  // Declared before the io_context's handlers are destroyed (at the end of this function), the engine and the
  // request log in state_ outlive every session coroutine.
  asio::io_context io(1);
  tcp::acceptor acceptor(io);
  net::openAcceptor(acceptor, state_->config.host, state_->config.port, false);
  uint16_t port = acceptor.local_endpoint().port();
  state_->port = port;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    log::info("engine-sim: signal {}, stopping", signal);
    boost::system::error_code ignored;
    acceptor.close(ignored);
    io.stop();
  });
  asio::co_spawn(io, acceptLoop(*state_, acceptor), logFailure);
  asio::co_spawn(io, state_->engine.run(), logFailure);
  on_listening(state_->config.host, port);
  io.run();
  state_->engine.stop();
  return 0;
}

}  // namespace prefixgate::sim
