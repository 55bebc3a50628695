#include "trace/otlp_json.h"

#include <nlohmann/json.hpp>

namespace prefixgate::trace {
namespace {

using nlohmann::json;

json anyValue(const AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return {{"stringValue", v}};
        else if constexpr (std::is_same_v<T, int64_t>) return {{"intValue", std::to_string(v)}};  // int64: a string
        else if constexpr (std::is_same_v<T, double>) return {{"doubleValue", v}};
        else return {{"boolValue", v}};
      },
      value);
}

json attributes(const std::vector<Attribute>& list) {
  json out = json::array();
  for (const Attribute& a : list) out.push_back({{"key", a.key}, {"value", anyValue(a.value)}});
  return out;
}

json spanJson(const Span& s) {
  json out = {{"traceId", std::string(view(s.trace_id))}, {"spanId", std::string(view(s.span_id))}};
  if (s.has_parent) out["parentSpanId"] = std::string(view(s.parent_span_id));
  if (!s.trace_state.empty()) out["traceState"] = s.trace_state;
  out["name"] = s.name;
  out["kind"] = static_cast<int>(s.kind);
  out["startTimeUnixNano"] = std::to_string(s.start_time_unix_nano);  // fixed64: a decimal string
  out["endTimeUnixNano"] = std::to_string(s.end_time_unix_nano);
  out["attributes"] = attributes(s.attributes);
  if (!s.events.empty()) {
    json events = json::array();
    for (const SpanEvent& e : s.events)
      events.push_back(
          {{"timeUnixNano", std::to_string(e.time_unix_nano)}, {"name", e.name}, {"attributes", attributes(e.attributes)}});
    out["events"] = std::move(events);
  }
  json status = {{"code", static_cast<int>(s.status)}};
  if (s.status == StatusCode::kError && !s.status_message.empty()) status["message"] = s.status_message;
  out["status"] = std::move(status);
  return out;
}

}  // namespace

std::string encodeExportRequest(const Resource& resource, std::span<const Span> spans) {
  std::vector<Attribute> resource_attributes{{"service.name", resource.service_name}};
  if (!resource.service_instance_id.empty())
    resource_attributes.push_back({"service.instance.id", resource.service_instance_id});
  if (!resource.service_version.empty()) resource_attributes.push_back({"service.version", resource.service_version});
  json span_list = json::array();
  for (const Span& s : spans) span_list.push_back(spanJson(s));
  json scope = {{"name", std::string(kScopeName)}};
  if (!resource.service_version.empty()) scope["version"] = resource.service_version;
  json request = {
      {"resourceSpans",
       json::array({{{"resource", {{"attributes", attributes(resource_attributes)}}},
                     {"scopeSpans", json::array({{{"scope", scope}, {"spans", std::move(span_list)}}})}}})}};
  // Client text (a model name, a path) may hold bytes that are not UTF-8: replaced, never an exception.
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace prefixgate::trace
