#pragma once
// Prefill/decode disaggregation (issue 26): the request bodies and header values of the two legs, as vLLM's
// NixlConnector proxy and llm-d's routing sidecar form them (docs/disaggregation-protocols.md has the upstream facts
// and sources). Pure functions over JSON text: no sockets, no clock. Bodies are edited textually so that every field
// the gateway does not own reaches the engine byte for byte as the client sent it; only top-level members are touched.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace prefixgate::proxy::pd {

// ---- Headers -------------------------------------------------------------------------------------------------------

// Both legs carry the same request id: the prefill pod keys the blocks it holds for the decode pod by it.
inline constexpr std::string_view kRequestIdHeader = "X-Request-Id";

// Sidecar mode (llm-d): the request goes to the decode pod's sidecar, which runs the prefill leg itself against the
// prefill pod named here. Value: "host:port" (an IPv6 host in brackets), one pod.
inline constexpr std::string_view kPrefillerHostPortHeader = "x-prefiller-host-port";
// The sidecar's older name for the same header, still read when the new one is absent.
inline constexpr std::string_view kLegacyPrefillerUrlHeader = "x-prefiller-url";
// A client must never choose the prefill pod (the sidecar would connect wherever it says): strip these from the
// client's request before setting our own.
inline constexpr std::array<std::string_view, 2> kPrefillerHeaders = {kPrefillerHostPortHeader,
                                                                      kLegacyPrefillerUrlHeader};

// The x-prefiller-host-port value for a pod address, as Go's net.JoinHostPort writes it.
std::string prefillerHostPort(std::string_view host, uint16_t port);

// ---- Pod role labels (defaults; a deployment may name others) -----------------------------------------------------

// llm-d: decode accepts decode, prefill-decode, both and pods without the label; prefill accepts prefill,
// prefill-decode and both ("both" is deprecated for "prefill-decode").
inline constexpr std::string_view kLlmdRoleLabel = "llm-d.ai/role";
inline constexpr std::string_view kLlmdRolePrefill = "prefill";
inline constexpr std::string_view kLlmdRoleDecode = "decode";
inline constexpr std::string_view kLlmdRolePrefillDecode = "prefill-decode";
inline constexpr std::string_view kLlmdRoleBoth = "both";

// AIBrix (StormService): a pod is a P/D candidate only with both labels; prefill and decode are paired within
// one role set.
inline constexpr std::string_view kAibrixRoleLabel = "role-name";
inline constexpr std::string_view kAibrixRoleSetLabel = "roleset-name";
inline constexpr std::string_view kAibrixRolePrefill = "prefill";
inline constexpr std::string_view kAibrixRoleDecode = "decode";

// ---- Bodies --------------------------------------------------------------------------------------------------------

struct BodyEdit {
  std::string body;   // the edited body when error is empty
  std::string error;  // why the input could not be edited ("" = ok)
  bool ok() const { return error.empty(); }
};

// The prefill leg's body, as vLLM's toy proxy builds it: stream false, max_tokens 1, max_completion_tokens 1 when the
// client gave it, stream_options / min_tokens / min_completion_tokens removed (a minimum above 1 would be refused),
// kv_transfer_params asking the pod to keep the blocks for a remote decode (any the client sent is replaced: it is
// never trusted). Every occurrence of a replaced key is removed, so duplicates cannot smuggle a value through.
BodyEdit prefillBody(std::string_view body);

// The decode leg's body: the client's body with kv_transfer_params set to `kv_transfer_params_json` (a JSON object,
// as extractKvTransferParams returns it). Empty params remove the client's kv_transfer_params and add none: the
// decode pod then prefills locally (vLLM's proxy would forward the client's own; we never trust it).
BodyEdit decodeBody(std::string_view body, std::string_view kv_transfer_params_json);

struct KvTransferParams {
  std::string json;           // the raw JSON text of the object; "" when absent
  std::string absent_reason;  // why it is absent (for the log)
  bool present() const { return !json.empty(); }
};

// The top-level kv_transfer_params of a prefill pod's non-streamed answer, when it is a non-empty JSON object of at
// most max_bytes (a pod cannot make the gateway copy more). null, {}, another type, invalid JSON, over the limit or
// an answer that is not an object: absent, with the reason. Of duplicates the last counts, as in Python's json.
KvTransferParams extractKvTransferParams(std::string_view answer_body, size_t max_bytes);

}  // namespace prefixgate::proxy::pd
