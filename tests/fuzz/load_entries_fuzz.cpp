// libFuzzer target for the replicas' in-flight counts as they are read from Redis (sync/load_entries.h): anything
// that reaches Redis can write them. The first byte of the input chooses where the text is cut at a line end. Nothing
// may crash, leak, hang or trip a sanitizer (UBSan: no signed overflow); every count kept is in
// [1, kMaxRemoteInFlight] under an address of its own line; the two halves decoded one after the other give what
// the whole text gives; what was decoded, encoded again, decodes to itself; sums never leave [0, kMaxRemoteInFlight].
// Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "sync/load_entries.h"

namespace {

using namespace prefixgate::sync;
using prefixgate::fuzz::check;
using Loads = std::map<std::string, int32_t, std::less<>>;

bool inRange(int64_t n, int64_t low) { return n >= low && n <= kMaxRemoteInFlight; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  Loads whole;
  decodeLoads(text, whole);
  size_t lines = 1;
  for (char c : text) lines += c == '\n';
  check(whole.size() <= lines);
  for (const auto& [address, n] : whole) {
    check(inRange(n, 1));
    check(!address.empty() && address.find('\n') == std::string::npos);
    check(text.find(address) != std::string_view::npos);
  }
  // Cut after a line end chosen by the control byte: decoding adds, so the halves give the whole.
  const size_t cut = text.find('\n', text.empty() ? 0 : data[0] % text.size());
  if (cut != std::string_view::npos) {
    Loads halves;
    decodeLoads(text.substr(0, cut + 1), halves);
    decodeLoads(text.substr(cut + 1), halves);
    check(halves == whole);
  }
  std::vector<std::pair<std::string, int32_t>> entries(whole.begin(), whole.end());
  Loads again;
  decodeLoads(encodeLoads(entries), again);
  check(again == whole);
  check(inRange(sumLoads(whole), 0));
  // Any two 64-bit values (the input's first bytes) add within the bounds, whatever their sign or size.
  if (size >= 17) {
    int64_t a = 0, b = 0;
    __builtin_memcpy(&a, data + 1, 8);
    __builtin_memcpy(&b, data + 9, 8);
    check(inRange(addLoads(a, b), 0));
  }
  return 0;
}
