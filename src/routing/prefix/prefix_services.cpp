#include "routing/prefix/prefix_services.h"

#include <algorithm>
#include <filesystem>

#include "config/random_seed.h"
#include "engine/kv_event_decoder.h"
#include "index/block_hash.h"
#include "tokenize/tiktoken_tokenizer.h"
#include "util/recycling_allocator.h"
#include "util/scratch.h"
#include "util/thread_spares.h"

namespace prefixgate::routing {

std::vector<std::string> defaultTiktokenFiles() {
  std::vector<std::string> out = {"/usr/share/prefixgate/cl100k_base.json"};
#ifdef PREFIXGATE_SOURCE_DIR
  out.push_back(std::string(PREFIXGATE_SOURCE_DIR) + "/tools/tiktoken/node_modules/tiktoken/encoders/cl100k_base.json");
#endif
  return out;
}

std::unique_ptr<PrefixServices> PrefixServices::create(const config::Config& config, std::string& error) {
  const auto& pc = config.routing.prefix_cache;
  std::unique_ptr<tokenize::Tokenizer> tokenizer;
  if (pc.tokenizer == "tiktoken") {
    std::string path = pc.tiktoken_file;
    if (path.empty()) {
      for (const std::string& candidate : defaultTiktokenFiles())
        if (std::filesystem::exists(candidate)) {
          path = candidate;
          break;
        }
    }
    if (path.empty()) {
      error = "routing.prefix_cache.tiktoken_file: no cl100k_base.json found (looked in /usr/share/prefixgate; "
              "run scripts/fetch_tiktoken.sh and set the key to the path it prints)";
      return nullptr;
    }
    auto loaded = tokenize::TiktokenTokenizer::load(path);
    if (!loaded.tokenizer) {
      error = "routing.prefix_cache.tiktoken_file: " + loaded.error;
      return nullptr;
    }
    loaded.tokenizer->enableSegmentCache((size_t{pc.tokenizer_cache_mb} << 20) / tokenize::kTokenIdBytes);
    tokenizer = std::move(loaded.tokenizer);
  } else {
    tokenizer = std::make_unique<tokenize::CharacterTokenizer>();
  }
  // The seed: configured; else 0 when replicas share the index through state sync; else derived from random_seed
  // (random per process when that is 0).
  const uint64_t seed = pc.hash_seed.value_or(
      config.state_sync.enabled ? 0 : config::streamSeed(config.random_seed, config::SeedPurpose::kHashSeed));
  index::PrefixIndexOptions options;
  options.block_capacity = pc.block_number;
  options.expiry = std::chrono::minutes(pc.eviction_duration_mins);
  auto services = std::make_unique<PrefixServices>(std::move(tokenizer), pc.block_size, seed, options);
  services->setCapacityAware(pc.capacity_aware);
  services->setSlotWait(std::chrono::milliseconds(pc.slot_wait_ms));
  services->setRemoteTokens(pc.remoteTokenizerOn());
  if (pc.kv_event_sync) {
    KvEventIndexOptions kv;
    kv.block_capacity = pc.block_number;
    kv.cpu_block_credit = pc.cpu_block_credit;
    kv.seed = seed;
    kv.bounds.max_pod_blocks = pc.kv_event_max_pod_blocks;
    kv.bounds.max_pod_adapters = pc.kv_event_max_pod_adapters;
    kv.bounds.max_adapter_name_bytes = pc.kv_event_max_adapter_name_bytes;
    kv.bounds.replay_hold_bytes = size_t{config::PrefixCacheConfig::kKvEventReplayHoldMb} << 20;
    kv.bounds.poll_round_bytes = size_t{config::PrefixCacheConfig::kKvEventPollRoundKb} << 10;
    services->enableKvEvents(std::make_unique<KvEventIndex>(kv, services->clock()),
                             KvModeOptions{std::chrono::milliseconds(pc.speculative_ttl_ms),
                                           static_cast<int64_t>(pc.silent_publisher_ms)});
  }
  return services;
}

namespace {
// Empties `m` for its next request, keeping its vectors' capacity (within util::kSpareKeepBytes each).
void emptyKeepingCapacity(PromptMatch& m) {
  std::vector<BlockHash> hashes = std::move(m.prompt.hashes);
  std::vector<uint32_t> matched = std::move(m.matched);
  std::vector<double> slot_wait_s = std::move(m.slot_wait_s);
  std::vector<PodId> pods = std::move(m.pods);
  m = PromptMatch{};
  util::emptyKeepingSmallCapacity(hashes);
  util::emptyKeepingSmallCapacity(matched);
  util::emptyKeepingSmallCapacity(slot_wait_s);
  util::emptyKeepingSmallCapacity(pods);
  m.prompt.hashes = std::move(hashes);
  m.matched = std::move(matched);
  m.slot_wait_s = std::move(slot_wait_s);
  m.pods = std::move(pods);
}

// newPromptMatch's deleter: the object joins the thread's spares.
struct RecyclePromptMatch {
  void operator()(PromptMatch* m) const noexcept {
    std::unique_ptr<PromptMatch> owned(m);
    emptyKeepingCapacity(*owned);
    util::ThreadSpares<std::unique_ptr<PromptMatch>>::give(std::move(owned));
  }
};
}  // namespace

std::shared_ptr<PromptMatch> newPromptMatch() {
  std::unique_ptr<PromptMatch> m;
  if (!util::ThreadSpares<std::unique_ptr<PromptMatch>>::take(m)) m = std::make_unique<PromptMatch>();
  // The control block comes from the thread's recycled small blocks.
  return std::shared_ptr<PromptMatch>(m.release(), RecyclePromptMatch{}, util::RecyclingAllocator<PromptMatch>{});
}

namespace {
// Every index here is fed hashBlocks' chains, which lets it search a prompt's blocks instead of walking them.
index::PrefixIndexOptions chainedOptions(index::PrefixIndexOptions options) {
  options.chained = true;
  return options;
}

// The gateway's own records: a prefix resent many times a second is rewritten at most every 100 ms (a sixteenth of
// the expiry when that is shorter), which moves its expiry and LRU place by no more than that.
constexpr std::chrono::milliseconds kRecordRefreshInterval{100};
index::PrefixIndexOptions recordOptions(index::PrefixIndexOptions options) {
  options = chainedOptions(options);
  if (options.expiry != index::PrefixIndex::kNeverExpire)
    options.refresh_interval = std::min<std::chrono::nanoseconds>(kRecordRefreshInterval, options.expiry / 16);
  return options;
}
}  // namespace

PrefixServices::PrefixServices(std::unique_ptr<tokenize::Tokenizer> tokenizer, uint32_t block_size, uint64_t seed,
                               const index::PrefixIndexOptions& options, const Clock* clock)
    : clock_(clock ? clock : &system_clock_),
      tokenizer_(std::move(tokenizer)),
      block_size_(block_size),
      seed_(seed),
      expiry_(options.expiry),
      index_(std::make_unique<index::PrefixIndex>(recordOptions(options), clock ? *clock : system_clock_)),
      ledger_(clock_) {}

size_t PrefixServices::capacityBlocks(const discovery::PodState& pod, std::string_view model) const {
  uint64_t tokens = pod.spec().kv_capacity_tokens;
  // A llama.cpp pod is modelled by its slots (modelledSlots), or has a host prompt cache of a size it does not
  // report: its slots x context is no capacity for blocks.
  if (tokens == 0 && pod.engineKind() != engine::EngineKind::kLlamaCpp) tokens = pod.engine().kvCapacityTokens();
  if (block_size_ == 0 || tokens == 0) return 0;
  return std::max<size_t>(1, static_cast<size_t>(static_cast<double>(tokens) * bytes_per_token_.ratio(model) /
                                                 static_cast<double>(block_size_)));
}

size_t PrefixServices::modelledSlots(const discovery::PodState& pod) {
  if (pod.spec().kv_capacity_tokens != 0 || pod.engineKind() != engine::EngineKind::kLlamaCpp) return 0;
  return pod.engine().slotCache() == engine::EngineLoad::SlotCache::kHostCache ? 0 : pod.engine().slots();
}

size_t PrefixServices::cachedSlots(const discovery::PodState& pod) {
  return pod.engine().slotCache() == engine::EngineLoad::SlotCache::kSlotsOnly ? modelledSlots(pod) : 0;
}

size_t PrefixServices::trackedSlots(const discovery::PodState& pod) const {
  if (const size_t slots = modelledSlots(pod)) return slots;
  if (slot_wait_.count() == 0 || pod.spec().kv_capacity_tokens != 0 ||
      pod.engineKind() != engine::EngineKind::kLlamaCpp)
    return 0;
  return pod.engine().slots();
}

double PrefixServices::slotWaitSeconds(const discovery::PodState& pod, const index::PodBlockLedger::SlotPrefixes& held) {
  if (held.ahead == 0) return 0;
  const LatencyEstimate::Sample service = pod.signals().service().read();
  const double mean = service.samples == 0 ? 0 : service.seconds;
  const double serving = held.serving_expected_s >= 0 ? held.serving_expected_s : mean;
  const double left = std::max(serving - held.serving_s, kServedLongShare * serving);
  return left + held.waiting_expected_s + held.waiting_unknown * mean;
}

double PrefixServices::expectedServiceSeconds(const discovery::PodState& pod, std::string_view model,
                                              double uncached_tokens) const {
  const LatencyEstimate::Sample decode = pod.signals().decode().read();
  if (decode.samples == 0) return -1;
  ServiceRates::Rates rates = pod.signals().rates().read();
  if (rates.samples < kOwnRatesSamples) {
    rates = model_rates_.read(model);
    if (rates.samples < ModelRates::kMinSamples) return -1;
  }
  return rates.base_s + std::max(0.0, uncached_tokens) * rates.prefill_s_per_token + decode.seconds;
}

namespace {
// A slot engine's slot, busy with this gateway's request until the hold is destroyed.
class SlotHold final : public PendingRequest {
 public:
  SlotHold(index::PodBlockLedger& ledger, PodId pod, uint64_t slot) : ledger_(ledger), pod_(pod), slot_(slot) {}
  ~SlotHold() override { ledger_.releaseSlot(pod_, slot_); }

 private:
  index::PodBlockLedger& ledger_;
  PodId pod_;
  uint64_t slot_;
};
}  // namespace

bool PrefixServices::recordRouted(std::string_view model, std::span<const BlockHash> hashes,
                                  const discovery::PodState& pod, bool shared, std::unique_ptr<PendingRequest>* slot_hold,
                                  const std::shared_ptr<index::PodBlockLedger::SlotTurn>& turn, bool* queued,
                                  double expected_s) {
  if (queued) *queued = false;
  size_t written = 0;
  if (!index_->record(model, hashes, pod.id(), &written)) return false;
  // A prefix the index already held from a moment ago is not shared again: the other replicas hold it too.
  if (shared && sink_ && written > 0) sink_->recordWritten(model, hashes, pod);
  if (!capacity_aware_) return true;
  thread_local std::vector<index::PodBlockLedger::Evicted> evicted;
  evicted.clear();
  if (const size_t slots = trackedSlots(pod)) {
    uint64_t slot = 0;
    if (ledger_.touchSlots(pod.id(), model, hashes, slots, evicted, slot_hold ? &slot : nullptr,
                           slot_hold ? turn : nullptr, queued, expected_s) &&
        slot_hold)
      *slot_hold = std::make_unique<SlotHold>(ledger_, pod.id(), slot);
    // Until the pod is known to keep nothing beyond its slots, what they dropped may be in its host prompt cache.
    if (cachedSlots(pod) == 0) evicted.clear();
  } else {
    ledger_.touch(pod.id(), model, hashes, capacityBlocks(pod, model), evicted);
  }
  for (const auto& group : evicted) index_->remove(group.model, group.hashes, pod.id());
  return true;
}

void PrefixServices::withdrawRouted(std::string_view model, std::span<const BlockHash> hashes, size_t keep,
                                    const discovery::PodState& pod, bool shared) {
  const std::span<const BlockHash> gone = hashes.subspan(std::min(keep, hashes.size()));
  if (gone.empty()) return;
  index_->remove(model, gone, pod.id());
  if (capacity_aware_ && modelledSlots(pod) == 0) ledger_.forget(pod.id(), model, gone);
  if (shared && sink_) sink_->recordWithdrawn(model, hashes, keep, pod);
}

std::optional<size_t> PrefixServices::slotHeldBlocks(std::string_view model, std::span<const BlockHash> hashes,
                                                    const discovery::PodState& pod) const {
  const size_t slots = capacity_aware_ && !kv_ ? modelledSlots(pod) : 0;
  if (slots == 0) return std::nullopt;
  const auto held = ledger_.slotPrefix(pod.id(), model, hashes, slots);
  return held ? held->any : 0;
}

void PrefixServices::removePod(PodId pod) {
  index_->removePod(pod);
  ledger_.removePod(pod);
}

void PrefixServices::hashPrompt(const openai::RequestView& request, PromptBlocks& out,
                                std::span<const Candidate> candidates) const {
  thread_local std::vector<uint8_t> scratch;
  thread_local std::vector<std::pair<uint32_t, uint32_t>> sizes;
  std::span<const uint8_t> bytes;
  out.hashes.clear();
  out.other_cuts.clear();
  sizes.clear();
  out.usable = true;
  out.block_bytes = block_size_;
  if (request.remote_tokens == openai::RequestView::RemoteTokens::kOk && request.remote_token_ids) {
    scratch.clear();
    tokenize::packTokenIds(*request.remote_token_ids, scratch);
    bytes = scratch;
    out.tokens = request.remote_token_ids->size();
    out.engine_tokens = out.tokens;
    if (kv_) {
      // Each engine's block size comes from its own events: pods started with different sizes each match.
      thread_local std::vector<PodId> pods;
      pods.clear();
      for (const Candidate& c : candidates) pods.push_back(c.pod_id);
      kv_->blockSizes(pods, sizes);
      out.block_bytes = size_t{sizes.empty() ? kDefaultEngineBlockTokens : sizes.front().first} * tokenize::kTokenIdBytes;
    }
  } else if (request.has_token_ids) {
    scratch.clear();
    tokenize::packTokenIds(request.prompt_token_ids, scratch);
    bytes = scratch;
    out.tokens = request.prompt_token_ids.size();
    out.engine_tokens = out.tokens;
  } else if (remote_tokens_) {
    // The engine's tokenizer did not answer: hashing the text locally would match nothing the engine holds.
    out.tokens = 0;
    out.engine_tokens = 0;
    out.bytes = 0;
    out.usable = false;
    return;
  } else {
    bytes = tokenizer_->encodeView(request.prompt_text, scratch);
    out.tokens = tokenizer_->tokenCount(bytes);
    out.engine_tokens = bytes_per_token_.engineTokens(request.model, bytes.size());
  }
  out.bytes = bytes.size();
  // A salted prompt's first block carries the salt as vLLM's does (its extra keys), in standard mode too, so salted
  // and unsalted prompts, or two salts, never match each other.
  const uint64_t salt = request.cache_salt.empty() ? 0 : engine::cacheSaltDigest(request.cache_salt);
  // The thread's memory of recent prompts: a prompt that begins with one of them hashes only what follows.
  thread_local index::BlockHashMemo memo;
  memo.hash(bytes, out.block_bytes, seed_, salt, out.hashes);
  for (size_t i = 1; i < sizes.size() && i <= kMaxOtherBlockSizes; ++i) {
    PromptBlocks::Cut& cut = out.other_cuts.emplace_back();
    cut.block_tokens = sizes[i].first;
    index::hashBlocksWithFirstExtra(bytes, size_t{cut.block_tokens} * tokenize::kTokenIdBytes, seed_, salt,
                                    cut.hashes);
  }
  util::releaseIfLarge(scratch);  // one huge prompt does not keep its tokens' memory on this thread
}

void PrefixServices::match(std::string_view model, std::span<const BlockHash> hashes,
                           std::span<const Candidate> candidates, std::vector<PodId>& pods,
                           std::span<uint32_t> matched, std::vector<double>* slot_wait_s) const {
  pods.clear();
  pods.reserve(candidates.size());
  for (const Candidate& c : candidates) pods.push_back(c.pod_id);
  if (slot_wait_s) slot_wait_s->clear();
  if (!kv_) {
    index_->match(model, hashes, pods, matched);
    if (!capacity_aware_) return;
    const double wait_limit_s = std::chrono::duration<double>(slot_wait_).count();
    for (size_t i = 0; i < candidates.size() && i < matched.size(); ++i) {
      // A pod that matches nothing is skipped before its engine's slots are read: most of a large fleet.
      if (matched[i] == 0) continue;
      const discovery::PodState* pod = candidates[i].pod;
      const size_t slots = pod ? trackedSlots(*pod) : 0;
      if (slots == 0) continue;
      const auto held = ledger_.slotPrefix(pod->id(), model, hashes, slots);
      if (!held) continue;
      // Slot waits: its longest prefix of the prompt sits in a busy slot, holding all the index promises there,
      // and that slot is expected to free in time: the request would wait for it (the Router queues it there).
      if (slot_wait_s && held->queued > held->idle && held->queued >= matched[i])
        if (const double wait = slotWaitSeconds(*pod, *held); wait <= wait_limit_s) {
          if (slot_wait_s->empty()) slot_wait_s->assign(candidates.size(), 0);
          (*slot_wait_s)[i] = std::max(wait, kMinSlotWaitS);
          continue;
        }
      if (modelledSlots(*pod) == 0) continue;  // tracked for its busy slots only (a host prompt cache)
      // Known to keep nothing beyond its slots: no more than its idle slots hold. Not known yet: only a prefix the
      // gateway knows to sit in a busy slot is left out (the request takes another slot; a host prompt cache may
      // or may not have a copy). Known to keep a host prompt cache: not modelled (measured on real pods, leaving a
      // busy slot's prefix out there sent a group's concurrent requests to cold pods and cost more hits than it
      // saved).
      if (cachedSlots(*pod) != 0 || (matched[i] > held->idle && held->any >= matched[i]))
        matched[i] = static_cast<uint32_t>(std::min<size_t>(matched[i], held->idle));
    }
    return;
  }
  const KvPromptHashes any{0, hashes};
  matchKv(model, std::span(&any, 1), candidates, pods, matched);
}

void PrefixServices::match(std::string_view model, const PromptBlocks& prompt, std::span<const Candidate> candidates,
                           std::vector<PodId>& pods, std::span<uint32_t> matched,
                           std::vector<double>* slot_wait_s) const {
  if (!kv_) {
    match(model, prompt.hashes, candidates, pods, matched, slot_wait_s);
    return;
  }
  if (slot_wait_s) slot_wait_s->clear();
  pods.clear();
  pods.reserve(candidates.size());
  for (const Candidate& c : candidates) pods.push_back(c.pod_id);
  thread_local std::vector<KvPromptHashes> prompts;
  prompts.clear();
  prompts.push_back({static_cast<uint32_t>(prompt.block_bytes / tokenize::kTokenIdBytes), prompt.hashes});
  for (const PromptBlocks::Cut& cut : prompt.other_cuts) prompts.push_back({cut.block_tokens, cut.hashes});
  matchKv(model, prompts, candidates, pods, matched);
}

void PrefixServices::matchKv(std::string_view model, std::span<const KvPromptHashes> prompts,
                             std::span<const Candidate> candidates, std::span<const PodId> pods,
                             std::span<uint32_t> matched) const {
  // The gateway's own records (speculative, pending, silent pods) are cut at the prompt's own size only.
  const std::span<const BlockHash> hashes = prompts.front().hashes;
  thread_local std::vector<uint32_t> recent;
  thread_local std::vector<uint32_t> routed;
  recent.assign(pods.size(), 0);
  kv_->match(model, prompts, pods, matched);
  if (kv_options_.speculative_ttl.count() > 0) index_->match(model, hashes, pods, recent, kv_options_.speculative_ttl);
  thread_local std::vector<uint32_t> waiting;
  waiting.assign(pods.size(), 0);
  if (kv_options_.speculative_ttl.count() > 0) pending_->match(model, hashes, pods, waiting);
  for (size_t i = 0; i < recent.size(); ++i) recent[i] = std::max(recent[i], waiting[i]);
  bool any_silent = false;
  for (const Candidate& c : candidates) any_silent |= c.pod && c.pod->kvSync().silent(kv_options_.silent_publisher_ms);
  if (any_silent) {
    routed.assign(pods.size(), 0);
    index_->match(model, hashes, pods, routed);
  }
  for (size_t i = 0; i < candidates.size() && i < matched.size(); ++i) {
    const Candidate& c = candidates[i];
    if (any_silent && c.pod && c.pod->kvSync().silent(kv_options_.silent_publisher_ms)) {
      matched[i] = routed[i];
    } else {
      matched[i] = std::max(matched[i], recent[i]);
    }
  }
}

void PrefixServices::enableKvEvents(std::unique_ptr<KvEventIndex> index, KvModeOptions options) {
  kv_ = std::move(index);
  kv_options_ = options;
  remote_tokens_ = true;
  // Holds are released when requests begin; the expiry only bounds entries of a hold that was somehow lost.
  pending_ = std::make_unique<index::PrefixIndex>(
      chainedOptions({index_->blockCapacity(), std::chrono::minutes(10), index_->shardCount()}), *clock_);
}

namespace {
// A routed request's blocks in the pending index, for its pod, until the engine begins answering it.
class PendingBlocks final : public PendingRequest {
 public:
  PendingBlocks(index::PrefixIndex& index, std::string_view model, std::span<const BlockHash> hashes, PodId pod)
      : index_(index), model_(model), hashes_(hashes.begin(), hashes.end()), pod_(pod) {
    index_.record(model_, hashes_, pod_);
  }
  ~PendingBlocks() override { index_.remove(model_, hashes_, pod_); }

 private:
  index::PrefixIndex& index_;
  std::string model_;
  std::vector<BlockHash> hashes_;
  PodId pod_;
};
}  // namespace

std::unique_ptr<PendingRequest> PrefixServices::holdPending(std::string_view model, std::span<const BlockHash> hashes,
                                                            PodId pod) {
  if (!pending_ || hashes.empty() || kv_options_.speculative_ttl.count() <= 0) return nullptr;
  return std::make_unique<PendingBlocks>(*pending_, model, hashes, pod);
}

}  // namespace prefixgate::routing
