#pragma once
// vLLM's prefill/decode hand-off (NixlConnector) at the HTTP edge, pure: what a request's kv_transfer_params ask
// for, and the kv_transfer_params a finished prefill leg answers with (NixlConnectorScheduler.request_finished in
// vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py). The engine side is KvTransfer in
// step_scheduler.h; the rules are in docs/simulator.md, "Prefill/decode roles".
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "engine_sim/step_scheduler.h"

namespace prefixgate::sim {

struct KvTransferParams {
  // The body had a kv_transfer_params object: the (non-streamed) response then carries "kv_transfer_params" too,
  // null unless it is a finished prefill leg's, as vLLM's response models always have the field.
  bool present = false;
  KvTransfer leg = KvTransfer::kNone;  // kSend: do_remote_decode; kReceive: do_remote_prefill
  uint64_t remote_blocks = 0;          // decode leg: how many remote_block_ids the prefill pod handed out
};

struct KvTransferParse {
  KvTransferParams params;
  std::string error;  // for a 400 answer
  bool ok() const { return error.empty(); }
};

// Reads body["kv_transfer_params"] (absent or null: none). Types are checked as vLLM's connector reads them: the
// do_remote_* flags booleans; remote_block_ids a list of block ids; remote_engine_id, remote_request_id and
// remote_host strings; remote_port a port; tp_size a positive integer; each may be null (the disaggregation proxy
// sends the prefill leg nulls). A decode leg (do_remote_prefill true) needs every remote_* field. Other keys are
// ignored.
KvTransferParse parseKvTransferParams(const nlohmann::json& body);

// Where a prefill leg's KV lives: the pod's NixlConnector engine id and its address.
struct KvOrigin {
  std::string engine_id;
  std::string host;
  uint16_t port = 0;
};

// NixlConnector's request_finished answer for a prefill leg finished by its length cap:
// {"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [...], "remote_engine_id",
//  "remote_request_id", "remote_host", "remote_port", "tp_size": 1}.
nlohmann::json prefillLegParams(const KvOrigin& origin, std::string_view request_id,
                                std::span<const uint32_t> block_ids);

// "prefill", "decode" or "" (/sim/requests' kv_role_leg).
const char* kvRoleLeg(KvTransfer leg);

}  // namespace prefixgate::sim
