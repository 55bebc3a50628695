#include "routing/prefix/model_rates.h"

namespace prefixgate::routing {

ModelRates::ModelRates() : rates_(new std::atomic<ServiceRates*>[index::ModelRegistry::kMaxModels]) {
  for (size_t i = 0; i < index::ModelRegistry::kMaxModels; ++i) rates_[i].store(nullptr, std::memory_order_relaxed);
}
ModelRates::~ModelRates() = default;

void ModelRates::add(std::string_view model, double own_tokens, double queued_tokens, double decoding_requests,
                     double ttft_s) {
  const auto key = models_.findOrAdd(model);
  if (!key) return;  // more models than the registry holds: they keep the defaults
  ServiceRates* rates = rates_[*key].load(std::memory_order_acquire);
  if (!rates) {
    std::lock_guard lock(mutex_);
    rates = rates_[*key].load(std::memory_order_acquire);
    if (!rates) {
      rates = owned_.emplace_back(std::make_unique<ServiceRates>()).get();
      rates_[*key].store(rates, std::memory_order_release);
    }
  }
  rates->add(own_tokens, queued_tokens, decoding_requests, ttft_s);
}

ServiceRates::Rates ModelRates::read(std::string_view model) const {
  const auto key = models_.find(model);
  const ServiceRates* rates = key ? rates_[*key].load(std::memory_order_acquire) : nullptr;
  return rates ? rates->read() : ServiceRates::kDefaults;
}

}  // namespace prefixgate::routing
