// libFuzzer target for the replicas' flow service texts as they are read from Redis (sync/flow_service_entries.h):
// anything that reaches Redis can write them. Nothing may crash, leak, hang or trip a sanitizer; a text is either
// refused whole (nothing kept) or every flow kept is within the bounds (finite total in [0, kMaxFlowServiceTotal],
// names a replica could write, at most kMaxFlowServiceFlows flows); what was decoded, encoded again, decodes to
// itself but for the models the encoder leaves out (those without a flow). Build and run: scripts/fuzz.sh.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flow/flow_resolution.h"
#include "fuzz_input.h"
#include "sync/flow_service_entries.h"

namespace {

using namespace prefixgate::sync;
using prefixgate::flow::ModelService;
using prefixgate::fuzz::check;

bool noControlBytes(const std::string& name) {
  for (char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) return false;
  }
  return true;
}

// The decoded models without those the encoder leaves out: a model line is written with its first flow (flows
// not served yet are carried at 0, so a reader charges their first service in full).
std::vector<ModelService> withFlows(std::vector<ModelService> models) {
  std::vector<ModelService> out;
  for (ModelService& m : models)
    if (!m.flows.empty()) out.push_back(std::move(m));
  return out;
}

bool same(const std::vector<ModelService>& a, const std::vector<ModelService>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].model != b[i].model || a[i].flows_created != b[i].flows_created ||
        a[i].flows.size() != b[i].flows.size())
      return false;
    for (size_t j = 0; j < a[i].flows.size(); ++j) {
      const auto& x = a[i].flows[j];
      const auto& y = b[i].flows[j];
      if (x.class_name != y.class_name || x.tenant != y.tenant || x.total != y.total || x.flow_seq != y.flow_seq)
        return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<ModelService> models;
  const FlowServiceDecode result = decodeFlowService(text, models);
  if (result != FlowServiceDecode::kOk) {
    check(models.empty());
    return 0;
  }
  size_t flows = 0;
  for (const ModelService& m : models) {
    check(!m.model.empty() && m.model.size() <= kMaxFlowServiceNameBytes && noControlBytes(m.model));
    for (const auto& f : m.flows) {
      ++flows;
      check(std::isfinite(f.total) && f.total >= 0 && f.total <= kMaxFlowServiceTotal);
      check(!f.class_name.empty() && f.class_name.size() <= kMaxFlowServiceNameBytes && noControlBytes(f.class_name));
      check(f.tenant.size() <= prefixgate::flow::kMaxTenantNameBytes && noControlBytes(f.tenant));
    }
  }
  check(flows <= kMaxFlowServiceFlows);
  std::vector<ModelService> again;
  check(decodeFlowService(encodeFlowService(models), again) == FlowServiceDecode::kOk);
  // A number may be written longer than it was read ("1e9" as "1e+09"): only a text well within the byte bound is
  // sure to be encoded whole.
  if (text.size() <= kMaxFlowServiceBytes / 4) check(same(again, withFlows(models)));
  return 0;
}
