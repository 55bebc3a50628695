#include "engine_sim/kv_cache_model.h"

namespace prefixgate::sim {

std::optional<KvCacheModel> parseKvCacheModel(std::string_view name) {
  if (name == "paged") return KvCacheModel::kPaged;
  if (name == "slots") return KvCacheModel::kSlots;
  return std::nullopt;
}

std::string_view kvCacheModelName(KvCacheModel model) {
  return model == KvCacheModel::kSlots ? "slots" : "paged";
}

}  // namespace prefixgate::sim
