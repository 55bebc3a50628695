// libFuzzer target for the RESP2 reply parser (sync/resp.h), fed as a socket would feed it: the first byte of the
// input chooses how the rest is cut into pieces (fuzz_input.h). Nothing may crash, leak, hang or trip a
// sanitizer; the pieces give exactly the replies and the error of the whole input fed at once, every piece is
// consumed whole until an error, and the replies, written back as RESP, parse to themselves.
// Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "sync/resp.h"

namespace {

using namespace prefixgate::sync;
using prefixgate::fuzz::check;

// Small limits, so that inputs of a few hundred bytes reach each of them.
RespParser::Limits fuzzLimits() {
  RespParser::Limits limits;
  limits.max_bulk_bytes = 64;
  limits.max_array_elements = 16;
  limits.max_depth = 4;
  limits.max_line_bytes = 32;
  limits.max_reply_elements = 24;
  return limits;
}

bool same(const RedisReply& a, const RedisReply& b) {
  if (a.type != b.type || a.str != b.str || a.integer != b.integer || a.elements.size() != b.elements.size())
    return false;
  for (size_t i = 0; i < a.elements.size(); ++i)
    if (!same(a.elements[i], b.elements[i])) return false;
  return true;
}
bool same(const std::vector<RedisReply>& a, const std::vector<RedisReply>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

// A reply as a server would send it.
void encode(const RedisReply& r, std::string& out) {
  switch (r.type) {
    case RedisReply::Type::kNil: out += "$-1\r\n"; return;
    case RedisReply::Type::kStatus: out += "+" + r.str + "\r\n"; return;
    case RedisReply::Type::kError: out += "-" + r.str + "\r\n"; return;
    case RedisReply::Type::kInteger: out += ":" + std::to_string(r.integer) + "\r\n"; return;
    case RedisReply::Type::kBulk: out += "$" + std::to_string(r.str.size()) + "\r\n" + r.str + "\r\n"; return;
    case RedisReply::Type::kArray:
      out += "*" + std::to_string(r.elements.size()) + "\r\n";
      for (const RedisReply& e : r.elements) encode(e, out);
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto input = prefixgate::fuzz::splitInput(data, size);
  RespParser whole(fuzzLimits());
  std::vector<RedisReply> whole_replies;
  const size_t used = whole.feed(input.payload, whole_replies);
  check(whole.failed() ? used <= input.payload.size() : used == input.payload.size());

  RespParser split(fuzzLimits());
  std::vector<RedisReply> split_replies;
  prefixgate::fuzz::Pieces pieces(input.control, input.payload);
  while (!pieces.done()) {
    const std::string_view piece = pieces.next();
    const bool was_failed = split.failed();
    const size_t n = split.feed(piece, split_replies);
    check(was_failed ? n == 0 : split.failed() || n == piece.size());
  }
  check(split.error() == whole.error());
  check(same(split_replies, whole_replies));
  check(whole.failed() || split.pending() == whole.pending());

  std::string encoded;
  for (const RedisReply& r : whole_replies) encode(r, encoded);
  RespParser again(fuzzLimits());
  std::vector<RedisReply> again_replies;
  again.feed(encoded, again_replies);
  check(!again.failed() && !again.pending());
  check(same(again_replies, whole_replies));
  return 0;
}
