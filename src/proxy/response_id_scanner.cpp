#include "proxy/response_id_scanner.h"

#include <algorithm>

#include "openai/responses_request.h"

namespace prefixgate::proxy {

void ResponseIdScanner::feed(std::string_view bytes) {
  if (done_ || bytes.empty()) return;
  head_.append(bytes.substr(0, kMaxScanBytes - head_.size()));
  const std::string_view text(head_);
  static constexpr std::string_view kKey = "\"id\"";
  // The key is `"id"` preceded by `{` or `,` (and spaces): never the end of another key or an escaped quote.
  for (size_t pos = text.find(kKey); pos != std::string_view::npos; pos = text.find(kKey, pos + 1)) {
    size_t before = pos;
    while (before > 0 && (text[before - 1] == ' ' || text[before - 1] == '\n' || text[before - 1] == '\t')) --before;
    if (before == 0 || (text[before - 1] != '{' && text[before - 1] != ',')) continue;
    size_t i = pos + kKey.size();
    while (i < text.size() && (text[i] == ' ' || text[i] == ':')) ++i;
    if (i >= text.size()) break;  // the value is still to come
    if (text[i] != '"') {
      done_ = true;  // an id that is no string: nothing to remember
      break;
    }
    const size_t end = text.find('"', i + 1);
    if (end == std::string_view::npos) break;  // still to come (or beyond kMaxScanBytes)
    const std::string_view id = text.substr(i + 1, end - i - 1);
    if (openai::validResponseId(id)) id_.assign(id);
    done_ = true;
    break;
  }
  if (head_.size() >= kMaxScanBytes) done_ = true;
  if (done_) std::string().swap(head_);
}

}  // namespace prefixgate::proxy
