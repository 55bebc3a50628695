#include "sync/resp.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace prefixgate::sync {

namespace {

// What is reserved for a bulk string or an array before its bytes arrive: enough for the common small reply,
// never the declared size (a hostile length would otherwise allocate before a byte of it is sent).
constexpr size_t kReserveBulkBytes = 64u << 10;
constexpr size_t kReserveArrayElements = 1024;
// How much of a bad line an error message quotes.
constexpr size_t kQuoteBytes = 32;

void appendBulk(std::string& out, std::string_view arg) {
  out += '$';
  out += std::to_string(arg.size());
  out += "\r\n";
  out.append(arg);
  out += "\r\n";
}

// `text` for an error message: at most kQuoteBytes, bytes outside printable ASCII as '?'.
std::string quote(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, kQuoteBytes)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > kQuoteBytes) out += "...";
  return out + "'";
}

RedisReply makeReply(RedisReply::Type type, std::string str = {}, int64_t integer = 0) {
  RedisReply reply;
  reply.type = type;
  reply.str = std::move(str);
  reply.integer = integer;
  return reply;
}

bool parseInt(std::string_view text, int64_t& value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return !text.empty() && ec == std::errc() && ptr == end;
}

}  // namespace

void appendCommand(std::string& out, std::span<const std::string_view> args) {
  out += '*';
  out += std::to_string(args.size());
  out += "\r\n";
  for (std::string_view arg : args) appendBulk(out, arg);
}

void appendCommand(std::string& out, std::initializer_list<std::string_view> args) {
  appendCommand(out, std::span<const std::string_view>(args.begin(), args.size()));
}

RespParser::RespParser(Limits limits) : limits_(limits) {}

bool RespParser::pending() const { return state_ != State::kLine || !line_.empty() || !stack_.empty(); }

size_t RespParser::feed(std::string_view in, std::vector<RedisReply>& out) {
  if (failed()) return 0;
  size_t pos = 0;
  while (pos < in.size()) {
    switch (state_) {
      case State::kLine: {
        // Only the new bytes are searched: a line cut across pieces is never scanned twice.
        const void* lf = std::memchr(in.data() + pos, '\n', in.size() - pos);
        const size_t end = lf ? static_cast<const char*>(lf) - in.data() + 1 : in.size();
        line_.append(in.data() + pos, end - pos);
        if (line_.size() > limits_.max_line_bytes + 2) {
          fail("a line longer than " + std::to_string(limits_.max_line_bytes) + " bytes without CRLF");
          return pos;
        }
        pos = end;
        if (lf && !onLine(out)) return pos;
        break;
      }
      case State::kBulk: {
        const size_t n = std::min(in.size() - pos, bulk_bytes_ - bulk_.size());
        bulk_.append(in.data() + pos, n);
        pos += n;
        if (bulk_.size() == bulk_bytes_) state_ = State::kBulkCr;
        break;
      }
      case State::kBulkCr:
      case State::kBulkLf: {
        const bool cr = state_ == State::kBulkCr;
        if (in[pos] != (cr ? '\r' : '\n')) {
          fail("a bulk string of " + std::to_string(bulk_bytes_) + " bytes not followed by CRLF");
          return pos;
        }
        ++pos;
        state_ = cr ? State::kBulkLf : State::kLine;
        if (!cr) complete(makeReply(RedisReply::Type::kBulk, std::move(bulk_)), out);
        break;
      }
    }
  }
  return pos;
}

// Handles the complete line in line_ (CRLF included): a whole reply, or the head of a bulk string or an array.
bool RespParser::onLine(std::vector<RedisReply>& out) {
  if (line_.size() < 2 || line_[line_.size() - 2] != '\r') {
    fail("a line ending in LF without CR: " + quote(line_));
    return false;
  }
  if (line_.size() == 2) {
    fail("an empty line where a reply was expected");
    return false;
  }
  const char type = line_[0];
  const std::string_view body = std::string_view(line_).substr(1, line_.size() - 3);
  if (type == '+' || type == '-') {
    complete(makeReply(type == '+' ? RedisReply::Type::kStatus : RedisReply::Type::kError, std::string(body)), out);
    line_.clear();
    return true;
  }
  int64_t n = 0;
  if ((type == ':' || type == '$' || type == '*') && !parseInt(body, n)) {
    fail(std::string("a bad number in a '") + type + "' line: " + quote(body));
    return false;
  }
  line_.clear();
  switch (type) {
    case ':':
      complete(makeReply(RedisReply::Type::kInteger, {}, n), out);
      return true;
    case '$':
      if (n < -1 || (n > 0 && static_cast<uint64_t>(n) > limits_.max_bulk_bytes)) break;
      if (n == -1) {
        complete({}, out);
        return true;
      }
      bulk_bytes_ = static_cast<size_t>(n);
      bulk_.clear();
      bulk_.reserve(std::min(bulk_bytes_, kReserveBulkBytes));
      state_ = State::kBulk;
      return true;
    case '*':
      if (n < -1 || (n > 0 && static_cast<uint64_t>(n) > limits_.max_array_elements)) break;
      if (n <= 0) {
        complete(makeReply(n == 0 ? RedisReply::Type::kArray : RedisReply::Type::kNil), out);
        return true;
      }
      if (stack_.size() >= limits_.max_depth) {
        fail("arrays nested deeper than " + std::to_string(limits_.max_depth));
        return false;
      }
      // Checked on the declared count (never above max_reply_elements, so the subtraction cannot wrap): a server
      // sends what it declares, so a reply that would pass the bound fails before its elements are parsed.
      if (static_cast<uint64_t>(n) > limits_.max_reply_elements - reply_elements_) {
        fail("arrays of more than " + std::to_string(limits_.max_reply_elements) + " elements in one reply");
        return false;
      }
      reply_elements_ += static_cast<size_t>(n);
      stack_.push_back({makeReply(RedisReply::Type::kArray), static_cast<size_t>(n)});
      stack_.back().array.elements.reserve(std::min(stack_.back().expected, kReserveArrayElements));
      return true;
    default:
      fail("an unknown reply type byte " + quote(std::string_view(&type, 1)) + " (RESP2 has + - : $ *)");
      return false;
  }
  // A length out of range (the only way here).
  const bool bulk = type == '$';
  fail(std::string(bulk ? "a bulk string length " : "an array length ") + std::to_string(n) +
       (n < -1 ? " below -1" : " over the limit of " +
                                   std::to_string(bulk ? limits_.max_bulk_bytes : limits_.max_array_elements)));
  return false;
}

// Hands a finished reply to the array it belongs to, closing every array it completes, or to `out`.
void RespParser::complete(RedisReply reply, std::vector<RedisReply>& out) {
  while (!stack_.empty()) {
    Frame& top = stack_.back();
    top.array.elements.push_back(std::move(reply));
    if (top.array.elements.size() < top.expected) return;
    reply = std::move(top.array);
    stack_.pop_back();
  }
  reply_elements_ = 0;
  out.push_back(std::move(reply));
}

void RespParser::fail(std::string message) {
  error_ = std::move(message);
  // Free what a failed parser no longer needs (it may hold a large partial reply).
  line_ = {};
  stack_ = {};
  bulk_ = {};
}

}  // namespace prefixgate::sync
