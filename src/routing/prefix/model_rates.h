#pragma once
// How fast a model's pods serve, learned from every pod's streams pooled (ServiceRates, one fit per model): the
// wait scorer's rates for pods that have not answered enough streams to have their own yet. A fleet of four pods
// learns it four times as fast as any one pod learns its own; until then the scorer would weigh a measured wait
// (a slot wait, in the pods' real seconds) against ServiceRates::kDefaults (an H100's), which on slower engines
// makes every cold prefill look nearly free.
#include <atomic>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "index/model_registry.h"
#include "routing/service_rates.h"

namespace prefixgate::routing {

class ModelRates {
 public:
  // The pool counts once it has this many streams (not WaitSettings::min_samples: a pod's own rates wait for
  // eight to keep one pod's noise from moving requests; the pool stands in only for the fleet's first responses,
  // and ServiceRates' prior keeps a fit of three sane).
  static constexpr uint64_t kMinSamples = 3;

  ModelRates();
  ~ModelRates();

  // One stream of `model` (ServiceRates::add's arguments), from a pod still learning its own rates
  // (Ticket::completed feeds only those). Thread-safe.
  void add(std::string_view model, double own_tokens, double queued_tokens, double decoding_requests, double ttft_s);
  // The model's pooled rates; ServiceRates::kDefaults (samples 0) before any of its streams. Lock-free.
  ServiceRates::Rates read(std::string_view model) const;

 private:
  index::ModelRegistry models_;
  std::unique_ptr<std::atomic<ServiceRates*>[]> rates_;  // by model key; null until the model's first stream
  std::mutex mutex_;                                     // guards owned_ (a model's first stream)
  std::vector<std::unique_ptr<ServiceRates>> owned_;
};

}  // namespace prefixgate::routing
