#pragma once
// What prefix strategies share: the configured tokenizer, the hash seed and block size, and the prefix index.
// Built once at start (config errors become start-up errors) and handed to strategies through StrategyDeps.
#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "index/pod_block_ledger.h"
#include "index/prefix_index.h"
#include "prefixgate/strategy.h"
#include "routing/kv/kv_event_index.h"
#include "openai/request.h"
#include "routing/prefix/bytes_per_token.h"
#include "routing/prefix/model_rates.h"
#include "prefixgate/types.h"
#include "tokenize/tokenizer.h"

namespace prefixgate::routing {

// A request's prompt, tokenized and cut into chained block hashes.
struct PromptBlocks {
  size_t tokens = 0;       // under the configured tokenizer (the character tokenizer: bytes; token ids: exact)
  // The engine's tokens: exact for token ids (the engine's own, or the request's), else the bytes at the model's
  // learned bytes per engine token (BytesPerToken). What prefill estimates count.
  size_t engine_tokens = 0;
  size_t bytes = 0;        // the tokenized prompt's size (token ids: 4 bytes each)
  size_t block_bytes = 0;  // the block size the hashes were cut at
  std::vector<BlockHash> hashes;  // full blocks only
  // KV event mode: the prompt cut at each other block size some candidates' engines use (their events say), so
  // each pod is matched at its own size. Empty when every candidate uses block_bytes' size.
  struct Cut {
    uint32_t block_tokens = 0;
    std::vector<BlockHash> hashes;
  };
  std::vector<Cut> other_cuts;
  // False when the prompt could not be put in the index's token domain (the remote tokenizer did not answer):
  // no hashes, and the request is routed by load alone rather than hashed in another domain.
  bool usable = true;
  // Engine tokens per block (prefill-cost's unit): the block size over the prompt's bytes per engine token; at
  // tokenize::kDefaultBytesPerToken bytes per token when the prompt is empty.
  double blockTokens() const {
    return engine_tokens && bytes ? static_cast<double>(block_bytes) * static_cast<double>(engine_tokens) /
                                        static_cast<double>(bytes)
                                  : static_cast<double>(block_bytes) / tokenize::kDefaultBytesPerToken;
  }
  // The fraction of the prompt `matched_blocks` blocks cover (0..1).
  double fraction(size_t matched_blocks) const {
    return bytes == 0 ? 0 : std::min(1.0, static_cast<double>(matched_blocks * block_bytes) / static_cast<double>(bytes));
  }
};

// A request's prompt as routing matched it: its blocks, and per candidate of the decision (RoutingInput::candidates'
// order) the blocks that pod is predicted to hold. The Router makes it before a prefix strategy scores (the strategy
// reads it ready-made) and the Decision keeps it: failover matches the same blocks against the pods left.
struct PromptMatch {
  PromptBlocks prompt;
  std::vector<uint32_t> matched;  // per candidate, blocks of prompt.hashes
  // Per candidate, the expected wait in seconds for the busy slot its match counts on (slot waits: always over 0
  // then); 0 = none. Empty when no candidate's match counts on a busy slot.
  std::vector<double> slot_wait_s;
  std::vector<PodId> pods;        // match()'s scratch
  // The share of the prompt candidate `i` is predicted to hold (0..1); 0 for an unusable prompt.
  double fraction(size_t i) const { return prompt.usable ? prompt.fraction(matched[i]) : 0; }
};

// A PromptMatch for one request, empty. Its memory (the object and its vectors' capacity) is recycled per thread
// when the last holder lets go (bounded: util::kSparesPerThread objects per thread, vectors up to
// util::kSpareKeepBytes kept), so a steady stream of decisions allocates none.
std::shared_ptr<PromptMatch> newPromptMatch();

// KV event sync's settings (routing.prefix_cache.*).
struct KvModeOptions {
  std::chrono::milliseconds speculative_ttl{2000};
  int64_t silent_publisher_ms = 10000;
};

// Told of each record the index wrote for a routing decision of this gateway (state sync shares them with the
// other replicas). Called on request threads: implementations are thread-safe and never block.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void recordWritten(std::string_view model, std::span<const BlockHash> hashes,
                             const discovery::PodState& pod) = 0;
  // A record of `hashes` (the whole prompt, as recordWritten had it) was taken back: the pod holds no more than its
  // first `keep` blocks (its request failed there before the engine computed the prompt).
  virtual void recordWithdrawn(std::string_view model, std::span<const BlockHash> hashes, size_t keep,
                               const discovery::PodState& pod) = 0;
};

class PrefixServices {
 public:
  // Returns null and sets `error` (naming the config key) when the tokenizer cannot be built.
  static std::unique_ptr<PrefixServices> create(const config::Config& config, std::string& error);
  // A given tokenizer, no file access. `clock` (for tests) must outlive this; null = the steady clock.
  PrefixServices(std::unique_ptr<tokenize::Tokenizer> tokenizer, uint32_t block_size, uint64_t seed,
                 const index::PrefixIndexOptions& options, const Clock* clock = nullptr);

  // Tokenizes the request's prompt (or packs its token ids: the engine's from the remote tokenizer, or the
  // request's own) and hashes its full blocks into `out`. In KV event mode the blocks are the engines' (their block
  // size x 4 bytes per packed token id), so they line up with the blocks their events describe: cut at the size
  // most `candidates` use (the vLLM default before any event), and at up to kMaxOtherBlockSizes other sizes of
  // candidates into out.other_cuts. Thread-safe; reuses `out`'s and a per-thread buffer's capacity.
  void hashPrompt(const openai::RequestView& request, PromptBlocks& out,
                  std::span<const Candidate> candidates = {}) const;

  // Per candidate, the blocks of `hashes` its engine is predicted to hold. Standard mode: what the gateway routed
  // there (the index); for a slot engine (modelledSlots) not a prefix only a slot busy with another request holds
  // (it cannot serve this one), and once it is known to cache in its slots only (cachedSlots) no more than its idle
  // slots hold. KV event mode: what its engine's events say, or what the gateway routed there within the
  // last speculative_ttl (the events of a just-chosen prompt are not in yet), whichever is longer; a pod whose
  // publisher is silent is judged by the gateway's records alone. Thread-safe.
  // With slot waits on (setSlotWait) and `slot_wait_s` (a caller that may wait), a slot engine whose longest
  // prefix of the prompt sits in a busy slot (more than its idle slots hold, and all the index promises) keeps that
  // match when the wait for the slot is expected within the limit (slotWaitSeconds). *slot_wait_s is emptied first
  // and stays empty unless a candidate waits; then it has one entry per candidate: that expected wait (at least
  // kMinSlotWaitS; the Router queues the request there if it picks the pod), else 0. (A fleet without slot engines
  // pays nothing per candidate.)
  void match(std::string_view model, std::span<const BlockHash> hashes, std::span<const Candidate> candidates,
             std::vector<PodId>& pods_scratch, std::span<uint32_t> matched_out,
             std::vector<double>* slot_wait_s = nullptr) const;
  // The same for a prompt from hashPrompt: in KV event mode each pod's events are matched with the prompt cut at
  // its engine's block size, its count given in blocks of prompt.block_bytes (rounded down). Thread-safe.
  void match(std::string_view model, const PromptBlocks& prompt, std::span<const Candidate> candidates,
             std::vector<PodId>& pods_scratch, std::span<uint32_t> matched_out,
             std::vector<double>* slot_wait_s = nullptr) const;

  // KV event mode: counts the request's blocks for `pod` until the returned hold is destroyed (the relay releases
  // it at the engine's first response bytes: by then the engine has computed the prompt and publishes its
  // blocks). Covers the time a request waits in the engine's queue, which can be far longer than
  // speculative_ttl under load. Null outside KV event mode.
  std::unique_ptr<PendingRequest> holdPending(std::string_view model, std::span<const BlockHash> hashes, PodId pod);

  // Turns on KV event mode with its own index (built by create() when routing.prefix_cache.kv_event_sync is on).
  void enableKvEvents(std::unique_ptr<KvEventIndex> index, KvModeOptions options);
  KvEventIndex* kvEvents() { return kv_.get(); }
  // Whether prompts must come from the engine's tokenizer (use_remote_tokenizer or KV event sync).
  void setRemoteTokens(bool on) { remote_tokens_ = on; }

  // Records that `pod` was just routed the blocks of `model` (standard mode). With capacity_aware, the pod's least
  // recently routed blocks beyond what its KV cache holds are removed from the index for it. Thread-safe.
  // Returns false when the index refused the record (see PrefixIndex::record).
  // `shared`: the record is this gateway's own decision, passed to the record sink when the index wrote anything
  // (false for records another replica shared: they are not sent back).
  // `slot_hold` (slot engines, this gateway's own requests): set to a hold that keeps the slot the request takes
  // busy in the ledger until it is destroyed (the request's end), so the next request of the same prefix is
  // predicted to take another slot while it runs, as the engine makes it.
  // With `turn` as well, the request may be queued for a busy slot that holds more of it than the slot it would
  // take (PodBlockLedger::touchSlots): returns with *queued true, and `turn` is told when its turn comes.
  // `expected_s`: how long the pod is expected to serve the request (expectedServiceSeconds; -1 = unknown), what
  // the next requests of its prefix weigh while it holds the slot.
  bool recordRouted(std::string_view model, std::span<const BlockHash> hashes, const discovery::PodState& pod,
                    bool shared = true, std::unique_ptr<PendingRequest>* slot_hold = nullptr,
                    const std::shared_ptr<index::PodBlockLedger::SlotTurn>& turn = nullptr, bool* queued = nullptr,
                    double expected_s = -1);
  // Withdraws the blocks of `hashes` (a prompt recorded by recordRouted) past its first `keep` from `pod`, in the
  // index and in the capacity ledger of a paged engine: the request they were recorded for failed before its engine
  // computed them (routing::Ticket::attemptFailed). `shared`: this gateway's own withdrawal, passed to the record
  // sink (the other replicas had the record too); false for one another replica shared. Thread-safe.
  void withdrawRouted(std::string_view model, std::span<const BlockHash> hashes, size_t keep,
                      const discovery::PodState& pod, bool shared = true);
  // The capacity ledger (capacity-aware standard mode), for views and tests.
  const index::PodBlockLedger& ledger() const { return ledger_; }
  // Where this gateway's own records go besides the index (state sync); null = nowhere. Set before serving.
  void setRecordSink(RecordSink* sink) { sink_ = sink; }
  std::chrono::nanoseconds recordExpiry() const { return expiry_; }
  // Capacity-aware standard mode on or off (off: the index keeps whatever the block limit and expiry allow).
  void setCapacityAware(bool on) { capacity_aware_ = on; }
  // Blocks of the configured size of `model` that `pod`'s KV cache holds: its pods-file kv_capacity_tokens, else
  // what its engine reports (vLLM num_gpu_blocks x block_size, SGLang max_total_num_tokens, llama.cpp slots x
  // context), at the model's learned bytes per engine token; 0 = unknown.
  size_t capacityBlocks(const discovery::PodState& pod, std::string_view model) const;
  // A slot engine whose slots are modelled (modelledSlots): the blocks of `hashes` any of its slots holds now, busy
  // or not; nullopt for other pods. What it can serve from its slots: a hit beyond it comes from a host prompt
  // cache, a miss where the index promised more shows it has none.
  std::optional<size_t> slotHeldBlocks(std::string_view model, std::span<const BlockHash> hashes,
                                       const discovery::PodState& pod) const;
  // A slot engine's (llama.cpp's) slots, when the ledger models them (which prompt each holds, which are busy): it
  // reported them, no kv_capacity_tokens overrides them and it is not known to keep a host prompt cache; else 0.
  static size_t modelledSlots(const discovery::PodState& pod);
  // Its slots when they also bound what it caches: modelled, and known to keep nothing beyond them
  // (EngineLoad::SlotCache::kSlotsOnly); else 0. Then its match is capped at what its idle slots hold and what its
  // slots drop leaves the index.
  static size_t cachedSlots(const discovery::PodState& pod);
  // Slot waits (routing.prefix_cache.slot_wait_ms; 0 = off): a request may wait at the gateway for a slot
  // engine's busy slot that holds its prefix, when that wait is expected to end within `limit`.
  void setSlotWait(std::chrono::milliseconds limit) { slot_wait_ = limit; }
  std::chrono::milliseconds slotWait() const { return slot_wait_; }
  // The slots the ledger tracks (which prompt each holds, which are busy) for `pod`: modelledSlots, and with slot
  // waits on also a llama.cpp pod known to keep a host prompt cache (tracked for its busy slots only: what its
  // slots drop stays in the index).
  size_t trackedSlots(const discovery::PodState& pod) const;
  // The expected wait for the busy slot of `pod` that `held` describes (PodBlockLedger::slotPrefix): what the
  // request served there has left (its expected time less how long it has been served, and at least
  // kServedLongShare of it: one that runs long still has some way to go), then the expected times of those waiting
  // for it; a time not known is the pod's mean service time (PodSignals::service), 0 before any was measured.
  static double slotWaitSeconds(const discovery::PodState& pod, const index::PodBlockLedger::SlotPrefixes& held);
  static constexpr double kServedLongShare = 0.25;
  static constexpr double kMinSlotWaitS = 0.001;
  // How long `pod` is expected to serve a request of `model` with `uncached_tokens` to prefill: its learned base
  // and prefill rate (its own ServiceRates once it answered kOwnRatesSamples streams, else the model's pooled over
  // its pods once the pool has ModelRates::kMinSamples), then its mean decode (PodSignals::decode); -1 until both
  // were measured.
  double expectedServiceSeconds(const discovery::PodState& pod, std::string_view model, double uncached_tokens) const;
  static constexpr uint64_t kOwnRatesSamples = 8;  // WaitSettings::min_samples' default
  // Each model's service rates pooled over its pods (the wait scorer's, for pods without enough of their own;
  // Ticket::completed adds).
  ModelRates& modelRates() { return model_rates_; }
  const ModelRates& modelRates() const { return model_rates_; }
  // Encoded prompt bytes per engine token, learned per model from the engines' usage (RequestOutcome adds).
  BytesPerToken& bytesPerToken() { return bytes_per_token_; }
  const BytesPerToken& bytesPerToken() const { return bytes_per_token_; }
  void removePod(PodId pod);

  // The vLLM default block size, assumed for the engine's blocks until its events say otherwise.
  static constexpr uint32_t kDefaultEngineBlockTokens = 16;
  // Block sizes a prompt is cut at besides the most used one: each costs one more hashing of the prompt, and a
  // fleet rarely runs more than two (pods beyond them match nothing until the others agree).
  static constexpr size_t kMaxOtherBlockSizes = 3;
  const Clock& clock() const { return *clock_; }

  index::PrefixIndex& index() { return *index_; }
  const tokenize::Tokenizer& tokenizer() const { return *tokenizer_; }
  uint32_t blockSize() const { return block_size_; }
  uint64_t seed() const { return seed_; }

 private:
  SystemClock system_clock_;
  const Clock* clock_;
  std::unique_ptr<tokenize::Tokenizer> tokenizer_;
  uint32_t block_size_;
  uint64_t seed_;
  std::chrono::nanoseconds expiry_;
  std::unique_ptr<index::PrefixIndex> index_;
  index::PodBlockLedger ledger_;
  BytesPerToken bytes_per_token_;
  ModelRates model_rates_;
  RecordSink* sink_ = nullptr;
  bool capacity_aware_ = false;  // PrefixServices::create sets it from the config (default on)
  std::chrono::milliseconds slot_wait_{0};  // create() sets it from the config
  bool remote_tokens_ = false;
  // KV event mode's match of `prompts` (one per block size, the first the prompt's own) into `matched`.
  void matchKv(std::string_view model, std::span<const KvPromptHashes> prompts, std::span<const Candidate> candidates,
               std::span<const PodId> pods, std::span<uint32_t> matched) const;

  std::unique_ptr<KvEventIndex> kv_;
  KvModeOptions kv_options_;
  // KV event mode: the blocks of requests routed but not yet begun by their engine (see holdPending).
  std::unique_ptr<index::PrefixIndex> pending_;
};

// Where the cl100k_base vocabulary is looked for when routing.prefix_cache.tiktoken_file is empty.
std::vector<std::string> defaultTiktokenFiles();

}  // namespace prefixgate::routing
