// libFuzzer target for disaggregated prefill/decode's body edits (proxy/pd_protocol.h): a prefill pod's answer is
// as hostile as a client's body, and a client's body is edited for both legs. Nothing may crash, leak or trip a
// sanitizer; kv_transfer_params taken from an answer are a JSON object no larger than the bound; an edit of a body
// that is a JSON object gives a JSON object whose top-level fields the edit owns have the protocol's values (one
// occurrence each) and whose other top-level fields are the input's. Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "proxy/pd_protocol.h"

namespace {
using namespace prefixgate::proxy;
using prefixgate::fuzz::check;
using nlohmann::json;

constexpr size_t kMaxParams = 4096;

// The input parsed (nlohmann keeps the last of duplicate keys, as the engines' Python parser does); discarded when
// it is not JSON or holds a number nlohmann cannot represent.
json parse(std::string_view text) {
  try {
    return json::parse(text);
  } catch (const json::exception&) {
    return json(json::value_t::discarded);
  }
}

void checkEdit(const json& in, const pd::BodyEdit& edit, const json& owned) {
  if (!edit.ok()) return;
  const json out = parse(edit.body);
  check(out.is_object());
  for (const auto& [key, value] : owned.items()) {
    if (value.is_null() && key != "kv_transfer_params") check(!out.contains(key));
    else check(out.contains(key) && out[key] == value);
  }
  for (const auto& [key, value] : in.items())
    if (!owned.contains(key)) check(out.contains(key) && out[key] == value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const pd::KvTransferParams params = pd::extractKvTransferParams(text, kMaxParams);
  if (params.present()) {
    check(params.json.size() <= kMaxParams);
    const json p = parse(params.json);
    check(p.is_object() && !p.empty());
  }
  const json in = parse(text);
  if (!in.is_object()) return 0;
  // The prefill leg: stream false, max_tokens 1, the connector's request, no stream_options.
  json prefill_owned = {{"stream", false}, {"max_tokens", 1}, {"stream_options", nullptr},
                        {"min_tokens", nullptr}, {"min_completion_tokens", nullptr},
                        {"kv_transfer_params", {{"do_remote_decode", true}, {"do_remote_prefill", false},
                                                {"remote_engine_id", nullptr}, {"remote_block_ids", nullptr},
                                                {"remote_host", nullptr}, {"remote_port", nullptr}}}};
  if (in.contains("max_completion_tokens")) prefill_owned["max_completion_tokens"] = 1;
  checkEdit(in, pd::prefillBody(text), prefill_owned);
  // The decode leg with fixed params, and with none (the client's own removed).
  const std::string fixed = R"({"do_remote_prefill":true,"remote_block_ids":[1]})";
  checkEdit(in, pd::decodeBody(text, fixed), json{{"kv_transfer_params", parse(fixed)}});
  const pd::BodyEdit without = pd::decodeBody(text, "");
  if (without.ok()) check(!parse(without.body).contains("kv_transfer_params"));
  return 0;
}
