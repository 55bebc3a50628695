#pragma once
// RESP2, the Redis wire protocol: command encoding and an incremental reply parser with limits. Pure (no
// sockets), so the parser is unit-tested and fuzzed on its own (tests/fuzz/resp_fuzz.cpp).
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::sync {

// One RESP2 reply.
struct RedisReply {
  enum class Type { kNil, kStatus, kError, kInteger, kBulk, kArray };
  Type type = Type::kNil;
  std::string str;  // kStatus, kError, kBulk
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
  bool isError() const { return type == Type::kError; }
  bool isNil() const { return type == Type::kNil; }
};

// Appends one command (a RESP array of bulk strings; arguments may hold any bytes) to `out`.
void appendCommand(std::string& out, std::span<const std::string_view> args);
void appendCommand(std::string& out, std::initializer_list<std::string_view> args);

// Parses replies from a byte stream fed in arbitrary pieces; cost linear in the bytes fed (a reply cut
// anywhere, even inside a length line, resumes where it stopped). Limits bound what a broken or hostile server
// can make it allocate: nothing is reserved for a declared size beyond what a small first allocation holds, so
// memory grows with the bytes that actually arrive.
class RespParser {
 public:
  struct Limits {
    size_t max_bulk_bytes = 512u << 20;  // Redis's own proto-max-bulk-len
    size_t max_array_elements = 1u << 24;
    size_t max_depth = 16;               // arrays inside arrays; a top-level array is depth 1
    size_t max_line_bytes = 64u << 10;   // a status/error/length line, type byte included, CRLF not
    // Elements of all the arrays of one top-level reply together (nesting included): each becomes a RedisReply of
    // some 80 bytes, so a reply of tiny elements (4 wire bytes each) must not fill memory within the byte bounds.
    size_t max_reply_elements = 1u << 24;
  };
  RespParser() = default;
  explicit RespParser(Limits limits);
  // Consumes all of `in` (a reply cut short is kept inside the parser) and returns in.size(); each reply
  // completed is appended to `out`. On malformed input or a limit exceeded it stops, sets `error` (non-empty)
  // and returns the offset where it stopped; the parser then stays failed and consumes nothing more.
  size_t feed(std::string_view in, std::vector<RedisReply>& out);
  const std::string& error() const { return error_; }
  bool failed() const { return !error_.empty(); }
  // True while a reply is partly parsed (bytes were fed that do not end on a reply boundary).
  bool pending() const;

 private:
  struct Frame {  // an array in progress
    RedisReply array;
    size_t expected = 0;  // its declared element count
  };
  enum class State { kLine, kBulk, kBulkCr, kBulkLf };
  bool onLine(std::vector<RedisReply>& out);
  void complete(RedisReply reply, std::vector<RedisReply>& out);
  void fail(std::string message);

  Limits limits_;
  std::string error_;
  State state_ = State::kLine;
  std::string line_;          // a length/status line in progress
  std::vector<Frame> stack_;  // arrays in progress, outermost first
  std::string bulk_;          // a bulk string in progress
  size_t bulk_bytes_ = 0;     // its declared length
  size_t reply_elements_ = 0;  // elements declared by the arrays of the top-level reply in progress
};

}  // namespace prefixgate::sync
