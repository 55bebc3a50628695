#include "trace/span_names.h"

#include <array>

namespace prefixgate::trace {

std::string httpSpanName(std::string_view method, std::string_view path) {
  static constexpr std::array<std::string_view, 10> kRoutes = {
      "/v1/chat/completions", "/v1/completions", "/v1/embeddings",  "/v1/rerank",
      "/v2/rerank",           "/v1/score",       "/v1/responses",   "/v1/messages",
      "/v1/messages/count_tokens", "/v1/models"};
  path = path.substr(0, path.find('?'));
  std::string name(method);
  for (std::string_view route : kRoutes)
    if (path == route) return name.append(" ").append(route);
  constexpr std::string_view kResponses = "/v1/responses/";
  if (path.starts_with(kResponses) && path.size() > kResponses.size())
    return name.append(path.ends_with("/cancel") ? " /v1/responses/{id}/cancel" : " /v1/responses/{id}");
  return name;
}

}  // namespace prefixgate::trace
