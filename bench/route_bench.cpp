// The real routing decision, as a request thread makes it: routing::Router::choose with the prefix-cache strategy
// built by the real strategy registry from a config::Config (default settings: the wait scorer), over a discovery::PodRegistry
// of N ready pods that serve the model, on a stream of OpenAI chat requests. Each iteration is one full decision:
// tokenize the prompt, hash its blocks, match them over every candidate, compute the load scores and the scorer's,
// pick, record the blocks for the chosen pod (not a dry run), update the aibrix_prefix_cache_* metrics, and release
// the in-flight guard when the Decision dies. Nothing is mocked; the only clock is the steady clock the gateway uses.
//
// The stream: kGroups groups, each with its own system prompt of S bytes (8 KiB, 256 KiB, 1 MiB of English-like
// words) and a new kSuffixBytes user message on every request, groups in turn. Each group's request body is parsed
// once by the real parser (openai::parseRequest); per iteration the user message's bytes at the end of the parsed
// prompt_text are rewritten in place with a fresh numbered question (the text the parser would give for that
// body), so every request has a suffix never seen before. BM_ParseChatRequest measures the parse on its own,
// BM_JsonDepthScan the depth check inside it (limits.max_json_depth), on a chat body and on token ids.
//
// BM_RouteStep/<step>/<index>/<size>: the prefix-cache strategy's index work one step at a time, on the same
// stream and fixture (character tokenizer, 8 pods): each iteration hashes the prompt (PrefixServices::hashPrompt),
// matches it over every pod (PrefixServices::match) and records it for the pod with the longest match
// (PrefixServices::recordRouted), and reports the time of one step (manual time, steady clock). Routing without
// tokenization = hash + match + record (+ parse); the tokenizer's own cost is in BM_RouterChoose/tiktoken.
//
// Index states:
//   cold  block_number = a quarter of the groups' prompt blocks, empty at start: once the first round has filled
//         it, every decision misses, inserts all its blocks and evicts as many (the groups cannot fit).
//   warm  block_number = max(200,000 (the default), twice the groups' blocks), filled to capacity with other
//         prompts' blocks and then with every group's prompt: decisions match the group's prefix on the pod holding
//         it and insert only the new suffix's blocks, each evicting an old block.
//   warm-small  the same with block_number = max(16,384, twice the groups' blocks) (8 KiB: 16,384 blocks, an index
//         of under 1 MB that stays in the caches; fewer blocks and the groups' prefixes, refreshed only once per
//         touch interval, were evicted by the new suffixes): the same decisions and about the same instructions,
//         without the misses of a 200,000-block index (about 9 MB). Against warm, what the index's memory costs a
//         decision on this machine (8 KiB, character tokenizer only).
// Tokenizers: character (the prompt's UTF-8 bytes) and tiktoken (cl100k_base, found as the gateway finds it: see
// routing::defaultTiktokenFiles; scripts/fetch_tiktoken.sh installs it). Block size 128 bytes, as configured by
// default. Counters: blocks and tokens per request, match_pct = the chosen pod's prefix match (mean over the
// decisions), index_blocks = blocks in the index after the run. Run by scripts/bench_route.sh.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/random_seed.h"
#include "discovery/pod_set.h"
#include "openai/request.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"

namespace prefixgate::bench {
namespace {

constexpr char kModel[] = "bench-model";
constexpr size_t kGroups = 16;
constexpr size_t kSuffixBytes = 1024;         // the user message: about 200 words, 8 blocks of 128 bytes
constexpr size_t kSuffixPoolBytes = 1 << 16;  // words the user messages are cut from
constexpr uint64_t kRandomSeed = 20261201;    // random_seed of the benchmark's config: prompts, hash seed, ties
constexpr size_t kDefaultBlockNumber = 200000;
constexpr size_t kBackgroundChainBlocks = 64;  // the warm pre-fill records other prompts of this many blocks
constexpr size_t kSizesKib[] = {8, 256, 1024};  // system prompt sizes

enum class TokenizerKind { kCharacter, kTiktoken };
enum class IndexState { kCold, kWarm, kWarmSmall };

std::string_view indexName(IndexState s) {
  return s == IndexState::kWarm ? "warm" : s == IndexState::kWarmSmall ? "warm-small" : "cold";
}

struct Params {
  TokenizerKind tokenizer;
  IndexState index;
  size_t prompt_kib;
  size_t pods;
  bool operator==(const Params&) const = default;
};

// English-like text of exactly `bytes` bytes: common words, and in every sixth place a made-up word of 4 to 11
// letters (names, identifiers, rare words) that BPE must merge piece by piece, with commas, full stops and line
// breaks. The tiktoken tokenizer then works as on prose, not on random bytes nor on a handful of cached words.
std::string words(std::mt19937_64& rng, size_t bytes) {
  static constexpr std::string_view kWords[] = {
      "the",      "model",   "answer",  "request", "cache",   "prefix",    "system",   "user",    "tool",
      "function", "return",  "value",   "string",  "number",  "when",      "which",    "because", "should",
      "always",   "never",   "before",  "after",   "context", "document",  "section",  "policy",  "customer",
      "order",    "account", "balance", "report",  "summary", "translate", "language", "example", "format",
      "JSON",     "output",  "input",   "field",   "query",   "search",    "result",   "error",   "message",
      "please",   "assist",  "helpful", "concise", "detail",  "step",      "reason",   "explain", "data"};
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::uniform_int_distribution<int> letter('a', 'z');
  std::uniform_int_distribution<int> length(4, 11);
  std::string out;
  out.reserve(bytes + 16);
  size_t sentence = 0;
  while (out.size() < bytes) {
    if (sentence % 6 == 5) {
      for (int i = length(rng); i > 0; --i) out += static_cast<char>(letter(rng));
    } else {
      out += kWords[pick(rng)];
    }
    ++sentence;
    if (sentence % 97 == 0) out += ".\n";
    else if (sentence % 13 == 0) out += ". ";
    else if (sentence % 7 == 0) out += ", ";
    else out += ' ';
  }
  out.resize(bytes);
  return out;
}

std::string jsonString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') out += "\\n";
    else out += c;  // words() writes no quote, backslash or other control character
  }
  return out + "\"";
}

std::string chatBody(std::string_view system, std::string_view user) {
  return fmt::format(R"({{"model": "{}", "stream": true, "max_tokens": 128, "messages": [)"
                     R"({{"role": "system", "content": {}}}, {{"role": "user", "content": {}}}]}})",
                     kModel, jsonString(system), jsonString(user));
}

// One benchmark configuration's gateway core: config, prefix services (tokenizer + index), metrics, pods, router.
class RouteFixture {
 public:
  explicit RouteFixture(const Params& p) : params_(p) {
    std::mt19937_64 text_rng(config::derivedSeed(kRandomSeed, config::SeedPurpose::kRouting, 1000 + p.prompt_kib));
    suffix_pool_ = words(text_rng, kSuffixPoolBytes);
    const std::string placeholder(kSuffixBytes, 'x');
    size_t prompt_bytes = 0;
    requests_.reserve(kGroups);
    for (size_t g = 0; g < kGroups; ++g) {
      std::string body = chatBody(words(text_rng, p.prompt_kib * 1024), placeholder);
      body.reserve(body.size() + openai::paddingBytes());
      openai::RequestView& r = requests_.emplace_back();
      if (auto e = openai::parseRequest(openai::Endpoint::kChatCompletions, body, true,
                                        config_.limits.max_json_depth, r))
        throw std::runtime_error("the parser refused the generated body: " + e.message);
      if (r.prompt_text.size() < kSuffixBytes || !r.prompt_text.ends_with(placeholder))
        throw std::runtime_error("the parsed prompt does not end with the user message");
      prompt_bytes += r.prompt_text.size();
    }
    // Blocks of the groups' prompts, in text bytes (tiktoken's 4 bytes per token come to about the same or less).
    const size_t group_blocks = prompt_bytes / 128;
    config_.discovery.file = "pods.yaml";
    config_.routing.strategy = "prefix-cache";
    config_.routing.prefix_cache.tokenizer = p.tokenizer == TokenizerKind::kTiktoken ? "tiktoken" : "character";
    config_.routing.prefix_cache.block_number =
        p.index == IndexState::kCold        ? std::max<size_t>(group_blocks / 4, 64)
        : p.index == IndexState::kWarmSmall ? std::max<size_t>(16384, 2 * group_blocks)
                                            : std::max(kDefaultBlockNumber, 2 * group_blocks);
    config_.random_seed = kRandomSeed;
    std::string error;
    services_ = routing::PrefixServices::create(config_, error);  // the gateway's own path, vocabulary lookup included
    if (!services_) throw std::runtime_error(error);
    metrics_ = std::make_unique<routing::PrefixMetrics>(registry_);
    std::vector<discovery::PodSpec> specs;
    for (size_t i = 0; i < p.pods; ++i) {
      discovery::PodSpec s;
      s.name = fmt::format("engine-{}", i);
      s.host = "10.0.0.1";
      s.port = static_cast<uint16_t>(8000 + i);
      s.address = fmt::format("{}:{}", s.host, s.port);
      s.models = {kModel};
      specs.push_back(std::move(s));
    }
    pods_.update(std::move(specs));
    for (const auto& pod : pods_.snapshot()->pods()) pod->recordHealth(true, 1, 1);
    router_ = std::make_unique<routing::Router>(routing::StrategyRegistry::builtin(),
                                                routing::StrategyDeps{config_, services_.get(), metrics_.get()}, pods_,
                                                routing::steadyNowMs);
    for (const auto& pod : pods_.snapshot()->pods()) candidates_.push_back(routing::Candidate{pod.get(), pod->id()});
    rng_.seed(config::streamSeed(kRandomSeed, config::SeedPurpose::kRouting, 0));
    if (p.index != IndexState::kCold) prefill();
  }

  // A request thread's own stream of the same groups (BM_RouterChooseThreads): its copy of the requests, its own
  // numbering of the user messages (never one another thread sends) and its own generator. `disjoint`: the
  // prompts' first byte is the thread's own, so no two threads' prompts share a block (each thread has its own
  // 16 groups, which it routes once before the timed decisions).
  struct Stream {
    std::vector<openai::RequestView> requests;
    uint64_t sent = 0;
    std::mt19937_64 rng;
  };
  Stream stream(size_t thread, bool disjoint) const {
    Stream s{requests_, (thread + 1) * 100'000'000'000ULL, {}};
    s.rng.seed(config::streamSeed(kRandomSeed, config::SeedPurpose::kRouting, thread + 1));
    if (disjoint)
      for (openai::RequestView& r : s.requests) r.prompt_text[0] = static_cast<char>('A' + thread % 26);
    return s;
  }

  // The next request of the stream: the next group's, with a user message never sent before.
  const openai::RequestView& next() { return next(requests_, sent_); }
  const openai::RequestView& next(Stream& s) { return next(s.requests, s.sent); }

  routing::Decision choose(const openai::RequestView& request) { return choose(request, rng_); }
  routing::Decision choose(const openai::RequestView& request, std::mt19937_64& rng) {
    return router_->choose(routing::RouteQuery{request, "", "", {}, false}, rng);
  }

  size_t indexBlocks() const { return services_->index().size(); }
  routing::PrefixServices& services() { return *services_; }
  // Every pod, as the Router lists candidates (scores and loads are not used by the index steps).
  const std::vector<routing::Candidate>& candidates() const { return candidates_; }
  const Params& params() const { return params_; }

 private:
  const openai::RequestView& next(std::vector<openai::RequestView>& requests, uint64_t& sent) const {
    openai::RequestView& r = requests[sent % kGroups];
    char* tail = r.prompt_text.data() + r.prompt_text.size() - kSuffixBytes;
    char* body = fmt::format_to(tail, "Question {:012}: ", sent);
    const size_t rest = kSuffixBytes - static_cast<size_t>(body - tail);
    const size_t offset = (sent * 4099) % (suffix_pool_.size() - rest);
    std::copy_n(suffix_pool_.data() + offset, rest, body);
    ++sent;
    return r;
  }

  // Fills the index to capacity with other prompts (chains of blocks on random pods), then routes every group's
  // request once, so that each group's prefix is held by the pod the router chose for it, most recently updated.
  void prefill() {
    std::mt19937_64 rng(config::derivedSeed(kRandomSeed, config::SeedPurpose::kHashSeed, 7));
    std::vector<BlockHash> chain(kBackgroundChainBlocks);
    const size_t capacity = config_.routing.prefix_cache.block_number;
    for (size_t done = 0; done < capacity; done += chain.size()) {
      for (BlockHash& h : chain) h = BlockHash{rng()};
      services_->index().record(kModel, chain, pods_.snapshot()->pods()[rng() % params_.pods]->id());
    }
    for (size_t g = 0; g < kGroups; ++g) choose(next());
  }

  Params params_;
  config::Config config_;
  prometheus::Registry registry_;
  std::unique_ptr<routing::PrefixServices> services_;
  std::unique_ptr<routing::PrefixMetrics> metrics_;
  discovery::PodRegistry pods_;
  std::unique_ptr<routing::Router> router_;
  std::vector<openai::RequestView> requests_;
  std::vector<routing::Candidate> candidates_;
  std::string suffix_pool_;
  std::mt19937_64 rng_;
  uint64_t sent_ = 0;
};

// One configuration at a time: Google Benchmark runs a benchmark's calls and repetitions back to back, so the
// fixture is built once per configuration and the index carries over between them (cold and warm are both
// steady states once the first calls ran). Building it is not timed.
RouteFixture& fixtureFor(const Params& p) {
  static std::unique_ptr<RouteFixture> current;
  if (!current || !(current->params() == p)) {
    current.reset();  // one fixture in memory at a time
    current = std::make_unique<RouteFixture>(p);
  }
  return *current;
}


// The fixture for `p`, or null with the benchmark skipped and the reason reported (e.g. no cl100k_base.json).
RouteFixture* fixtureOrSkip(benchmark::State& state, const Params& p) {
  try {
    return &fixtureFor(p);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return nullptr;
  }
}

void routerChoose(benchmark::State& state, Params p) {
  RouteFixture* f = fixtureOrSkip(state, p);
  if (f == nullptr) return;
  int64_t blocks = 0;
  int64_t tokens = 0;
  int64_t match = 0;
  for (auto _ : state) {
    routing::Decision d = f->choose(f->next());
    if (d.failure != routing::RouteFailure::kNone) {
      state.SkipWithError(d.message.c_str());
      return;
    }
    if (!d.prompt) {  // the prefix-cache strategy matches every prompt: a decision without one measured less
      state.SkipWithError("the decision carries no prompt match");
      return;
    }
    blocks += static_cast<int64_t>(d.prompt->prompt.hashes.size());
    tokens += static_cast<int64_t>(d.prompt->prompt.tokens);
    match += d.match_percent;
  }  // the Decision, and with it the in-flight guard, dies at the end of each iteration
  const double n = static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.counters["blocks"] = static_cast<double>(blocks) / n;
  state.counters["tokens"] = static_cast<double>(tokens) / n;
  state.counters["match_pct"] = static_cast<double>(match) / n;
  state.counters["index_blocks"] = static_cast<double>(f->indexBlocks());
  // Guards that the figures measure what the name says; only the first call of a cold run (an empty index
  // filling up) is exempt.
  if (p.index != IndexState::kCold && match < 60 * static_cast<int64_t>(n))
    state.SkipWithError("warm: the chosen pod should hold the group's prefix (match_pct < 60)");
  if (p.index == IndexState::kCold && state.iterations() > static_cast<int64_t>(4 * kGroups) &&
      match > 10 * static_cast<int64_t>(n))
    state.SkipWithError("cold: the index should not hold the groups' prefixes (match_pct > 10)");
}

// The same decisions made by several request threads at once over one router, index and pod set (each thread its
// own stream of the same groups): decisions per second over all threads (items_per_second) against one thread
// shows what the threads share per decision (the index shards' locks, the chosen pod's counters, the strategy's
// window loads, the pod set's reference count). `shared`: the threads send the same groups (a hot prefix served
// by every thread: they also write the same blocks); `disjoint`: each its own (only the gateway's own state is
// shared). Wall time: on a machine with as many free cores as threads.
void routerChooseThreads(benchmark::State& state, Params p, bool disjoint) {
  static std::mutex fixture_mutex;  // the threads start together: one builds the fixture, the others wait for it
  RouteFixture* f;
  {
    std::lock_guard lock(fixture_mutex);
    f = fixtureOrSkip(state, p);
  }
  if (f == nullptr) return;
  RouteFixture::Stream s = f->stream(static_cast<size_t>(state.thread_index()), disjoint);
  for (size_t g = 0; g < kGroups; ++g) f->choose(f->next(s), s.rng);  // this thread's groups held, untimed
  int64_t match = 0;
  for (auto _ : state) {
    routing::Decision d = f->choose(f->next(s), s.rng);
    if (d.failure != routing::RouteFailure::kNone) {
      state.SkipWithError(d.message.c_str());
      return;
    }
    match += d.match_percent;
  }
  state.SetItemsProcessed(state.iterations());
  const double n = static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.counters["match_pct"] = benchmark::Counter(static_cast<double>(match) / n, benchmark::Counter::kAvgThreads);
  if (match < 60 * static_cast<int64_t>(n)) state.SkipWithError("warm: the chosen pod should hold the group's prefix");
}

// The body parse alone (simdjson on-demand, prompt text assembled), for the sizes above.
void parseChatRequest(benchmark::State& state, size_t prompt_kib) {
  std::mt19937_64 rng(kRandomSeed);
  const std::string body = chatBody(words(rng, prompt_kib * 1024), words(rng, kSuffixBytes));
  std::string buffer;
  buffer.reserve(body.size() + openai::paddingBytes());  // as the session reserves it before reading the body
  buffer.assign(body);
  openai::RequestView r;
  for (auto _ : state) {
    if (auto e = openai::parseRequest(openai::Endpoint::kChatCompletions, buffer, true,
                                      config::LimitsConfig{}.max_json_depth, r)) {
      state.SkipWithError(e.message.c_str());
      return;
    }
    benchmark::DoNotOptimize(r.prompt_text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

enum class Step { kHash, kMatch, kRecord };

// One step of the index work of a decision (see the header), timed alone while the others run around it.
void routeStep(benchmark::State& state, Params p, Step step) {
  RouteFixture* f = fixtureOrSkip(state, p);
  if (f == nullptr) return;
  routing::PrefixServices& services = f->services();
  const std::vector<routing::Candidate>& candidates = f->candidates();
  routing::PromptBlocks prompt;
  std::vector<PodId> pods;
  std::vector<uint32_t> matched;
  uint64_t matched_blocks = 0;
  uint64_t blocks = 0;
  for (auto _ : state) {
    const openai::RequestView& request = f->next();
    const auto t0 = std::chrono::steady_clock::now();
    services.hashPrompt(request, prompt);
    const auto t1 = std::chrono::steady_clock::now();
    matched.assign(candidates.size(), 0);
    services.match(kModel, prompt.hashes, candidates, pods, matched);
    const auto t2 = std::chrono::steady_clock::now();
    const size_t chosen = static_cast<size_t>(std::max_element(matched.begin(), matched.end()) - matched.begin());
    if (!services.recordRouted(kModel, prompt.hashes, *candidates[chosen].pod)) {
      state.SkipWithError("the index refused the record");
      return;
    }
    const auto t3 = std::chrono::steady_clock::now();
    const auto took = step == Step::kHash ? t1 - t0 : step == Step::kMatch ? t2 - t1 : t3 - t2;
    state.SetIterationTime(std::chrono::duration<double>(took).count());
    matched_blocks += matched[chosen];
    blocks += prompt.hashes.size();
  }
  const double n = static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.counters["blocks"] = static_cast<double>(blocks) / n;
  state.counters["matched_blocks"] = static_cast<double>(matched_blocks) / n;
}

// The depth check of every body (openai::nestedDeeperThan, limits.max_json_depth) alone: on the chat body of
// BM_ParseChatRequest, or on a completions body of token ids of the same size (a bracket scan that cannot jump
// over strings).
void jsonDepthScan(benchmark::State& state, size_t prompt_kib, bool token_ids) {
  std::mt19937_64 rng(kRandomSeed);
  std::string body;
  if (token_ids) {
    body = fmt::format(R"({{"model": "{}", "prompt": [)", kModel);
    while (body.size() < prompt_kib * 1024) body += fmt::format("{}, ", rng() % 100000);
    body += "1]}";
  } else {
    body = chatBody(words(rng, prompt_kib * 1024), words(rng, kSuffixBytes));
  }
  const uint32_t max_depth = config::LimitsConfig{}.max_json_depth;
  for (auto _ : state) {
    benchmark::DoNotOptimize(body.data());
    if (openai::nestedDeeperThan(body, max_depth)) {
      state.SkipWithError("the body nests too deep");
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * body.size()));
}

[[maybe_unused]] const bool kRegistered = [] {
  for (TokenizerKind tokenizer : {TokenizerKind::kCharacter, TokenizerKind::kTiktoken}) {
    for (IndexState index : {IndexState::kCold, IndexState::kWarm}) {
      for (size_t kib : kSizesKib) {
        for (size_t pods : {8, 64, 1000}) {
          const std::string name =
              fmt::format("BM_RouterChoose/{}/{}/{}KiB/{}pods", tokenizer == TokenizerKind::kTiktoken ? "tiktoken" : "character",
                          indexName(index), kib, pods);
          benchmark::RegisterBenchmark(name.c_str(), routerChoose, Params{tokenizer, index, kib, pods})
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  for (size_t pods : {8, 64, 1000})
    benchmark::RegisterBenchmark(fmt::format("BM_RouterChoose/character/warm-small/8KiB/{}pods", pods).c_str(),
                                 routerChoose, Params{TokenizerKind::kCharacter, IndexState::kWarmSmall, 8, pods})
        ->Unit(benchmark::kMicrosecond);
  for (size_t pods : {8, 1000})
    for (bool disjoint : {false, true})
      benchmark::RegisterBenchmark(fmt::format("BM_RouterChooseThreads/character/warm/8KiB/{}pods/{}", pods,
                                               disjoint ? "disjoint" : "shared").c_str(),
                                   routerChooseThreads, Params{TokenizerKind::kCharacter, IndexState::kWarm, 8, pods},
                                   disjoint)
          ->Threads(1)
          ->Threads(2)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  for (size_t kib : kSizesKib) {
    benchmark::RegisterBenchmark(fmt::format("BM_ParseChatRequest/{}KiB", kib).c_str(), parseChatRequest, kib)
        ->Unit(benchmark::kMicrosecond);
    for (bool ids : {false, true})
      benchmark::RegisterBenchmark(fmt::format("BM_JsonDepthScan/{}/{}KiB", ids ? "token_ids" : "chat", kib).c_str(),
                                   jsonDepthScan, kib, ids)
          ->Unit(benchmark::kMicrosecond);
  }
  // Iterations fixed by size: the untimed steps around the timed one would make a time-based count run long.
  constexpr std::pair<Step, std::string_view> kSteps[] = {{Step::kHash, "hash"}, {Step::kMatch, "match"},
                                                          {Step::kRecord, "record"}};
  for (IndexState index : {IndexState::kCold, IndexState::kWarm}) {
    for (size_t kib : kSizesKib) {
      for (const auto& [step, step_name] : kSteps) {
        const std::string name = fmt::format("BM_RouteStep/{}/{}/{}KiB", step_name,
                                             indexName(index), kib);
        benchmark::RegisterBenchmark(name.c_str(), routeStep, Params{TokenizerKind::kCharacter, index, kib, 8}, step)
            ->UseManualTime()
            ->Iterations(static_cast<int64_t>(std::max<size_t>(16 * kGroups, 32 * 1024 / kib)))
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace prefixgate::bench
