#pragma once
// Reads a Responses API answer's response id on the way through, without parsing it: the first `"id": "..."` of the
// body. A whole response's top-level `id` is its first key (OpenAI's and vLLM's field order); a stream's first
// event is response.created, whose `response` object begins with its `id`. Only the body's first kMaxScanBytes are
// kept and looked at, so a response of any length costs at most that.
#include <cstddef>
#include <string>
#include <string_view>

namespace prefixgate::proxy {

class ResponseIdScanner {
 public:
  static constexpr size_t kMaxScanBytes = 8192;
  // Consumes the next bytes of the body (any split).
  void feed(std::string_view bytes);
  // The id found ("" when none, or when it is no valid response id: openai::validResponseId).
  const std::string& id() const { return id_; }

 private:
  std::string head_;  // the body's first bytes, until the id is found or kMaxScanBytes came
  std::string id_;
  bool done_ = false;
};

}  // namespace prefixgate::proxy
