#include "engine_sim/kv_transfer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <vector>

namespace prefixgate::sim {
namespace {

using nlohmann::json;

constexpr int64_t kMaxPort = 65535;
// The fields a decode leg needs to find its KV (NixlConnectorScheduler.update_state_after_alloc).
constexpr const char* kRemoteFields[] = {"remote_block_ids", "remote_engine_id", "remote_request_id", "remote_host",
                                         "remote_port"};

bool isSet(const json& params, const char* key) {
  auto it = params.find(key);
  return it != params.end() && !it->is_null();
}

bool isUnsigned(const json& value, int64_t max) {
  return value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= max;
}

// The type each known field must have when set; "" when every set field has it.
std::string checkTypes(const json& params) {
  for (const char* key : {"do_remote_decode", "do_remote_prefill"})
    if (isSet(params, key) && !params[key].is_boolean())
      return fmt::format("'kv_transfer_params.{}' must be a boolean", key);
  for (const char* key : {"remote_engine_id", "remote_request_id", "remote_host"})
    if (isSet(params, key) && !params[key].is_string())
      return fmt::format("'kv_transfer_params.{}' must be a string", key);
  if (isSet(params, "remote_port") && !isUnsigned(params["remote_port"], kMaxPort))
    return "'kv_transfer_params.remote_port' must be a port number";
  if (isSet(params, "tp_size") && !(params["tp_size"].is_number_integer() && params["tp_size"].get<int64_t>() >= 1))
    return "'kv_transfer_params.tp_size' must be a positive integer";
  if (isSet(params, "remote_block_ids")) {
    const json& ids = params["remote_block_ids"];
    if (!ids.is_array()) return "'kv_transfer_params.remote_block_ids' must be a list of block ids";
    for (const json& id : ids)
      if (!isUnsigned(id, UINT32_MAX)) return "'kv_transfer_params.remote_block_ids' must be a list of block ids";
  }
  return "";
}

bool flag(const json& params, const char* key) { return isSet(params, key) && params[key].get<bool>(); }

}  // namespace

KvTransferParse parseKvTransferParams(const json& body) {
  KvTransferParse parse;
  auto it = body.find("kv_transfer_params");
  if (it == body.end() || it->is_null()) return parse;
  if (!it->is_object()) {
    parse.error = "'kv_transfer_params' must be an object";
    return parse;
  }
  const json& params = *it;
  parse.error = checkTypes(params);
  if (!parse.ok()) return parse;
  bool decode = flag(params, "do_remote_decode");
  bool prefill = flag(params, "do_remote_prefill");
  if (decode && prefill) {
    parse.error = "'kv_transfer_params' cannot ask for both do_remote_decode and do_remote_prefill";
    return parse;
  }
  parse.params.present = true;
  if (decode) parse.params.leg = KvTransfer::kSend;
  if (!prefill) return parse;
  for (const char* key : kRemoteFields) {
    if (isSet(params, key)) continue;
    parse.error = fmt::format("'kv_transfer_params.{}' is required with do_remote_prefill", key);
    return parse;
  }
  parse.params.leg = KvTransfer::kReceive;
  parse.params.remote_blocks = params["remote_block_ids"].size();
  return parse;
}

json prefillLegParams(const KvOrigin& origin, std::string_view request_id, std::span<const uint32_t> block_ids) {
  return json{{"do_remote_prefill", true},
              {"do_remote_decode", false},
              {"remote_block_ids", json(std::vector<uint32_t>(block_ids.begin(), block_ids.end()))},
              {"remote_engine_id", origin.engine_id},
              {"remote_request_id", std::string(request_id)},
              {"remote_host", origin.host},
              {"remote_port", origin.port},
              {"tp_size", 1}};  // the simulated engine is one GPU
}

const char* kvRoleLeg(KvTransfer leg) {
  switch (leg) {
    case KvTransfer::kSend: return "prefill";
    case KvTransfer::kReceive: return "decode";
    case KvTransfer::kNone: break;
  }
  return "";
}

}  // namespace prefixgate::sim
