#include "engine_sim/request_log.h"

#include <nlohmann/json.hpp>

namespace prefixgate::sim {

std::shared_ptr<RequestRecord> RequestLog::add(RequestRecord record) {
  record.id = next_id_++;
  records_.push_back(std::make_shared<RequestRecord>(std::move(record)));
  while (records_.size() > capacity_) records_.pop_front();
  return records_.back();
}

nlohmann::json RequestLog::toJson() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& record : records_) {
    const RequestRecord& r = *record;
    list.push_back(nlohmann::json{{"id", r.id},
                                  {"method", r.method},
                                  {"path", r.path},
                                  {"headers", r.headers},
                                  {"body_bytes", r.body_bytes},
                                  {"model", r.model},
                                  {"stream", r.stream},
                                  {"status", r.status},
                                  {"prompt_tokens", r.prompt_tokens},
                                  {"cached_tokens", r.cached_tokens},
                                  {"completion_tokens", r.completion_tokens},
                                  {"completed", r.completed},
                                  {"cancelled", r.cancelled},
                                  {"kv_role_leg", r.kv_role_leg},
                                  {"kv_pulled_tokens", r.kv_pulled_tokens},
                                  {"kv_transfer_ms", r.kv_transfer_ms}});
  }
  return list;
}

}  // namespace prefixgate::sim
