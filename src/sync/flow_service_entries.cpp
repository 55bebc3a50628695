#include "sync/flow_service_entries.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <utility>

#include "flow/flow_resolution.h"

namespace prefixgate::sync {
namespace {

constexpr std::string_view kHeader = "PF1\n";

// A model's or a class's name as the text can carry it: not empty, bounded, no control byte (a tab or a newline
// would split it).
bool carriableName(std::string_view name) {
  if (name.empty() || name.size() > kMaxFlowServiceNameBytes) return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7f;
  });
}

// As flow resolution accepts a tenant (it becomes a metric label): printable ASCII, bounded.
bool validTenant(std::string_view name) {
  if (name.size() > flow::kMaxTenantNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte >= 0x20 && byte <= 0x7e;
  });
}

bool parseCount(std::string_view text, uint64_t& out) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return false;
  const char* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, out);
  return parsed.ec == std::errc{} && parsed.ptr == end;
}

bool parseTotal(std::string_view text, double& out) {
  // Digits first: from_chars would also take "-1", "inf" and "nan", which no replica writes.
  if (text.empty() || text.front() < '0' || text.front() > '9') return false;
  const char* end = text.data() + text.size();
  const auto parsed = std::from_chars(text.data(), end, out, std::chars_format::general);
  // Out of range (a thousand digits) is refused too: no replica writes a total beyond kMaxFlowServiceTotal.
  if (parsed.ec != std::errc{} || parsed.ptr != end || !std::isfinite(out) || out < 0) return false;
  out = std::min(out, kMaxFlowServiceTotal);
  return true;
}

// Splits `line` at tabs into exactly `n` fields, the last taking the rest (a tenant may hold spaces, never a tab).
bool fields(std::string_view line, size_t n, std::vector<std::string_view>& out) {
  out.clear();
  for (size_t i = 0; i + 1 < n; ++i) {
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos) return false;
    out.push_back(line.substr(0, tab));
    line.remove_prefix(tab + 1);
  }
  out.push_back(line);
  return true;
}

std::string formatTotal(double total) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), total);
  return std::string(buffer, result.ptr);
}

}  // namespace

std::string encodeFlowService(const std::vector<flow::ModelService>& models) {
  std::string out(kHeader);
  size_t flows = 0;
  for (const flow::ModelService& model : models) {
    if (!carriableName(model.model)) continue;
    std::string model_line = "m\t" + std::to_string(model.flows_created) + "\t" + model.model + "\n";
    bool model_written = false;
    for (const flow::FlowService& f : model.flows) {
      if (flows >= kMaxFlowServiceFlows) return out;
      if (!carriableName(f.class_name) || !validTenant(f.tenant) || !std::isfinite(f.total) || f.total < 0)
        continue;
      const std::string line = "f\t" + std::to_string(f.flow_seq) + "\t" +
                               formatTotal(std::min(f.total, kMaxFlowServiceTotal)) + "\t" + f.class_name + "\t" +
                               f.tenant + "\n";
      const size_t needed = line.size() + (model_written ? 0 : model_line.size());
      if (out.size() + needed > kMaxFlowServiceBytes) return out;
      if (!model_written) out += model_line;
      model_written = true;
      out += line;
      ++flows;
    }
  }
  return out;
}

std::string_view flowServiceDropLabel(FlowServiceDecode result) {
  return result == FlowServiceDecode::kTooLarge ? "too_large" : "malformed";
}

FlowServiceDecode decodeFlowService(std::string_view text, std::vector<flow::ModelService>& out) {
  out.clear();
  if (text.size() > kMaxFlowServiceBytes) return FlowServiceDecode::kTooLarge;
  if (!text.starts_with(kHeader)) return FlowServiceDecode::kMalformed;
  text.remove_prefix(kHeader.size());
  std::set<std::string, std::less<>> models;
  std::set<std::pair<std::string, std::string>> flows_of_model;  // (class, tenant) of the current model
  size_t flows = 0;
  std::vector<std::string_view> parts;
  const auto malformed = [&out] {
    out.clear();
    return FlowServiceDecode::kMalformed;
  };
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return malformed();  // every line ends with one: a cut text is refused
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (line.starts_with("m\t")) {
      uint64_t created = 0;
      if (!fields(line.substr(2), 2, parts) || !parseCount(parts[0], created) || !carriableName(parts[1]) ||
          !models.emplace(parts[1]).second || models.size() > kMaxFlowServiceFlows)
        return malformed();
      out.push_back(flow::ModelService{std::string(parts[1]), created, {}});
      flows_of_model.clear();
    } else if (line.starts_with("f\t")) {
      uint64_t seq = 0;
      double total = 0;
      if (out.empty() || !fields(line.substr(2), 4, parts) || !parseCount(parts[0], seq) ||
          !parseTotal(parts[1], total) || !carriableName(parts[2]) || !validTenant(parts[3]) ||
          ++flows > kMaxFlowServiceFlows || !flows_of_model.emplace(parts[2], parts[3]).second)
        return malformed();
      out.back().flows.push_back(flow::FlowService{std::string(parts[2]), std::string(parts[3]), total, seq});
    } else {
      return malformed();
    }
  }
  return FlowServiceDecode::kOk;
}

}  // namespace prefixgate::sync
