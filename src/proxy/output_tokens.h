#pragma once
// Counts the output tokens of a relayed response on the way through, without parsing it: the last
// `"completion_tokens": N` seen (the usage object, in a JSON body or a stream's usage chunk), else the number of
// SSE `data: {` events (one token per chunk, as vLLM streams). Feeds each pod's measured capacity.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace prefixgate::proxy {

class OutputTokenCounter {
 public:
  // Consumes the next bytes of the body (any split: patterns across calls are found).
  void feed(std::string_view bytes);
  // The count so far: usage's completion_tokens when seen, else the SSE events seen.
  uint64_t tokens() const { return has_usage_ ? usage_tokens_ : events_; }

 private:
  static constexpr size_t kCarryBytes = 48;  // holds a key, its colon and a 20-digit number
  void scan(std::string_view text, size_t boundary, bool straddling_only);
  std::string carry_;  // the last bytes of the previous feed, so a pattern split across feeds is still found
  uint64_t usage_tokens_ = 0;
  bool has_usage_ = false;
  uint64_t events_ = 0;
};

}  // namespace prefixgate::proxy
