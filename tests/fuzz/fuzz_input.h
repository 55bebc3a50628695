#pragma once
// Input shaping shared by the fuzz targets: the first byte of an input chooses how the rest is cut into the
// pieces a socket would deliver, so the fuzzer explores split points without the seeds losing their shape (a
// seed is one control byte followed by a realistic message).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace prefixgate::fuzz {

inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Cuts a payload into pieces. Control byte: its low two bits pick the mode (0: one piece; 1: one byte each;
// 2, 3: pseudo-random lengths from 1 to 2^(2 + high bits) bytes, drawn from a generator seeded by the byte).
class Pieces {
 public:
  Pieces(uint8_t control, std::string_view payload)
      : payload_(payload),
        mode_(control & 3u),
        max_piece_(size_t{4} << (control >> 5)),
        state_(control | 0x9e3779b9u) {}

  bool done() const { return offset_ >= payload_.size(); }
  // The next piece (empty once done).
  std::string_view next() {
    size_t n = payload_.size() - offset_;
    if (mode_ == 1) n = std::min<size_t>(n, 1);
    if (mode_ >= 2) n = std::min(n, 1 + draw() % max_piece_);
    std::string_view piece = payload_.substr(offset_, n);
    offset_ += n;
    return piece;
  }

 private:
  uint32_t draw() {  // xorshift32: cheap, and the same cuts for the same byte on every run
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return state_;
  }
  std::string_view payload_;
  size_t offset_ = 0;
  unsigned mode_;
  size_t max_piece_;
  uint32_t state_;
};

// The control byte and the payload of a fuzz input (an empty input: mode 0, no payload).
struct SplitInput {
  uint8_t control = 0;
  std::string_view payload;
};
inline SplitInput splitInput(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  return {data[0], std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1)};
}

}  // namespace prefixgate::fuzz
