// RESP2: command encoding, and the incremental reply parser (every reply type, any split of the byte stream,
// limits, malformed input, linear work on large replies).
#include "sync/resp.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace prefixgate::sync {
namespace {

using Type = RedisReply::Type;
using namespace std::string_literals;

// A reply as text, so that two parses compare in one EXPECT_EQ with a readable difference.
std::string show(const RedisReply& r) {
  switch (r.type) {
    case Type::kNil: return "nil";
    case Type::kStatus: return "+" + r.str;
    case Type::kError: return "-" + r.str;
    case Type::kInteger: return ":" + std::to_string(r.integer);
    case Type::kBulk: return "$" + std::to_string(r.str.size()) + "[" + r.str + "]";
    case Type::kArray: {
      std::string out = "[";
      for (const RedisReply& e : r.elements) out += show(e) + ",";
      return out + "]";
    }
  }
  return "?";
}
std::string show(const std::vector<RedisReply>& replies) {
  std::string out;
  for (const RedisReply& r : replies) out += show(r) + "\n";
  return out;
}

// Feeds `pieces` in order; every piece must be consumed whole (the caller never re-feeds bytes).
std::vector<RedisReply> feedPieces(RespParser& parser, const std::vector<std::string_view>& pieces) {
  std::vector<RedisReply> out;
  for (std::string_view piece : pieces) {
    EXPECT_EQ(parser.feed(piece, out), piece.size()) << parser.error();
  }
  return out;
}
// `bytes` in pieces of `n` bytes, as socket reads of that size would give them.
std::vector<std::string_view> slices(std::string_view bytes, size_t n) {
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at < bytes.size(); at += n) pieces.push_back(bytes.substr(at, n));
  return pieces;
}
std::vector<RedisReply> parseWhole(std::string_view bytes) {
  RespParser parser;
  auto out = feedPieces(parser, {bytes});
  EXPECT_FALSE(parser.failed()) << parser.error();
  EXPECT_FALSE(parser.pending());
  return out;
}

// Replies of every type, nested arrays, nil in both forms, and binary bulk strings holding CRLF and NUL.
const std::string kStream =
    "+OK\r\n-ERR wrong type\r\n:0\r\n:-9223372036854775808\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n"
    "$6\r\na\r\n\0b\n\r\n"s
    "*3\r\n:1\r\n*2\r\n$1\r\nx\r\n*-1\r\n*1\r\n*0\r\n"
    "*2\r\n$-1\r\n-ERR inner\r\n";

// Ensures each reply type decodes to the right type and value, in stream order.
TEST(RespParser, EveryReplyType) {
  auto replies = parseWhole(kStream);
  ASSERT_EQ(replies.size(), 12u) << show(replies);
  EXPECT_EQ(replies[0].type, Type::kStatus);
  EXPECT_EQ(replies[0].str, "OK");
  EXPECT_TRUE(replies[1].isError());
  EXPECT_EQ(replies[1].str, "ERR wrong type");
  EXPECT_EQ(replies[2].type, Type::kInteger);
  EXPECT_EQ(replies[2].integer, 0);
  EXPECT_EQ(replies[3].integer, INT64_MIN);
  EXPECT_EQ(replies[4].type, Type::kBulk);
  EXPECT_EQ(replies[4].str, "hello");
  EXPECT_EQ(replies[5].type, Type::kBulk);
  EXPECT_EQ(replies[5].str, "");
  EXPECT_TRUE(replies[6].isNil());
  EXPECT_TRUE(replies[7].isNil());
  EXPECT_EQ(replies[8].type, Type::kArray);
  EXPECT_TRUE(replies[8].elements.empty());
  EXPECT_EQ(replies[9].str, "a\r\n\0b\n"s);
  EXPECT_EQ(show(replies[10]), "[:1,[$1[x],nil,],[[],],]");
  EXPECT_EQ(show(replies[11]), "[nil,-ERR inner,]");
}

// Ensures a stream cut at any one point, cut into single bytes, or cut into random pieces gives the same replies.
TEST(RespParser, EverySplitPointGivesTheSameReplies) {
  const std::string whole = show(parseWhole(kStream));
  const std::string_view s = kStream;
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    RespParser parser;
    EXPECT_EQ(show(feedPieces(parser, {s.substr(0, cut), s.substr(cut)})), whole) << "cut at " << cut;
  }
  RespParser bytewise;
  EXPECT_EQ(show(feedPieces(bytewise, slices(s, 1))), whole);
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string_view> pieces;
    for (size_t at = 0; at < s.size();) {
      const size_t n = std::uniform_int_distribution<size_t>(1, 12)(rng);
      pieces.push_back(s.substr(at, n));
      at += n;
    }
    RespParser parser;
    EXPECT_EQ(show(feedPieces(parser, pieces)), whole) << "round " << round;
  }
}

// Ensures pending() tells a reply cut short from a reply boundary.
TEST(RespParser, PendingUntilTheReplyEnds) {
  RespParser parser;
  std::vector<RedisReply> out;
  for (std::string_view piece : {"*2\r", "\n:1\r\n", "$2\r\nab", "\r", "\n"}) {
    parser.feed(piece, out);
    EXPECT_EQ(parser.pending(), out.empty()) << piece;
  }
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(show(out[0]), "[:1,$2[ab],]");
}

// Ensures arrays nested to the depth limit parse, and one level more fails.
TEST(RespParser, DepthLimit) {
  RespParser::Limits limits;
  limits.max_depth = 3;
  auto nested = [](int depth) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += "*1\r\n";
    return s + ":7\r\n";
  };
  RespParser ok(limits);
  std::vector<RedisReply> out;
  ok.feed(nested(3), out);
  ASSERT_EQ(out.size(), 1u) << ok.error();
  EXPECT_EQ(show(out[0]), "[[[:7,],],]");
  RespParser deep(limits);
  deep.feed(nested(4), out);
  EXPECT_TRUE(deep.failed());
  EXPECT_EQ(deep.error(), "arrays nested deeper than 3");
}

// Ensures bulk strings, arrays and lines over their limits fail with the limit named, and values at a limit pass.
TEST(RespParser, SizeLimits) {
  RespParser::Limits limits;
  limits.max_bulk_bytes = 10;
  limits.max_array_elements = 3;
  limits.max_line_bytes = 16;
  struct Case {
    std::string input;
    std::string error;  // empty: parses
  };
  const Case cases[] = {
      {"$10\r\n0123456789\r\n", ""},
      {"$11\r\n", "a bulk string length 11 over the limit of 10"},
      {"*3\r\n:1\r\n:2\r\n:3\r\n", ""},
      {"*4\r\n", "an array length 4 over the limit of 3"},
      {"+0123456789abcde\r\n", ""},
      {"+0123456789abcdef\r\n", "a line longer than 16 bytes without CRLF"},
  };
  for (const Case& c : cases) {
    RespParser parser(limits);
    std::vector<RedisReply> out;
    parser.feed(c.input, out);
    EXPECT_EQ(parser.error(), c.error) << c.input;
    EXPECT_EQ(out.size(), c.error.empty() ? 1u : 0u) << c.input;
  }
  // A line without LF fails once it passes the limit, not when (if ever) its end arrives.
  RespParser parser(limits);
  std::vector<RedisReply> out;
  for (int i = 0; i < 5 && !parser.failed(); ++i) parser.feed("+abcd", out);
  EXPECT_EQ(parser.error(), "a line longer than 16 bytes without CRLF");
}

// Ensures a declared size is not allocated before its bytes arrive: a 1 TiB bulk string and a 2^40-element
// array (allowed by the limits here) take their first bytes without an allocation failing or throwing.
TEST(RespParser, DeclaredSizesAreNotAllocatedUpFront) {
  RespParser::Limits limits;
  limits.max_bulk_bytes = size_t{1} << 40;
  limits.max_array_elements = size_t{1} << 40;
  limits.max_reply_elements = size_t{1} << 40;
  for (std::string input : {"$1099511627776\r\nabc"s, "*1099511627776\r\n:1\r\n$2\r\nab\r\n"s}) {
    RespParser parser(limits);
    std::vector<RedisReply> out;
    EXPECT_EQ(parser.feed(input, out), input.size());
    EXPECT_FALSE(parser.failed()) << parser.error();
    EXPECT_TRUE(parser.pending());
    EXPECT_TRUE(out.empty());
  }
}

// Ensures the elements of one reply's arrays, nesting included, are bounded together (each array within its own
// limit, many of them must not add up to millions of reply objects), counted afresh for the next reply, and
// refused on the declared count, before the elements arrive.
TEST(RespParser, ElementsOfOneReplyAreBoundedTogether) {
  RespParser::Limits limits;
  limits.max_array_elements = 4;
  limits.max_reply_elements = 6;
  const std::string at_limit = "*2\r\n*2\r\n:1\r\n:2\r\n*2\r\n:3\r\n:4\r\n";  // 2 + 2 + 2
  RespParser parser(limits);
  std::vector<RedisReply> out;
  parser.feed(at_limit + at_limit, out);  // the second reply has its own budget
  EXPECT_FALSE(parser.failed()) << parser.error();
  EXPECT_EQ(out.size(), 2u);
  RespParser over(limits);
  out.clear();
  over.feed("*3\r\n*2\r\n:1\r\n:2\r\n*2\r\n", out);  // 3 + 2 + 2 declared
  EXPECT_EQ(over.error(), "arrays of more than 6 elements in one reply");
  EXPECT_TRUE(out.empty());
  // The default bounds a hostile count whatever the nesting: 2^24 elements at most.
  RespParser defaults;
  defaults.feed("*16777216\r\n*1\r\n", out);
  EXPECT_EQ(defaults.error(), "arrays of more than 16777216 elements in one reply");
}

// Ensures malformed input fails with a message saying what is wrong, and the parser stays failed.
TEST(RespParser, MalformedInputFailsAndStaysFailed) {
  struct Case {
    std::string input;
    std::string error;
  };
  const Case cases[] = {
      {"?x\r\n", "an unknown reply type byte '?' (RESP2 has + - : $ *)"},
      {"%1\r\n", "an unknown reply type byte '%' (RESP2 has + - : $ *)"},
      {":12a\r\n", "a bad number in a ':' line: '12a'"},
      {":\r\n", "a bad number in a ':' line: ''"},
      {": 1\r\n", "a bad number in a ':' line: ' 1'"},
      {":99999999999999999999\r\n", "a bad number in a ':' line: '99999999999999999999'"},
      {"$x\r\n", "a bad number in a '$' line: 'x'"},
      {"*1\0\r\n"s, "a bad number in a '*' line: '1?'"},
      {"$-2\r\n", "a bulk string length -2 below -1"},
      {"*-3\r\n", "an array length -3 below -1"},
      {"$3\r\nabcX\r\n", "a bulk string of 3 bytes not followed by CRLF"},
      {"$3\r\nabc\rX", "a bulk string of 3 bytes not followed by CRLF"},
      {"+OK\n", "a line ending in LF without CR: '+OK?'"},
      {"\r\n", "an empty line where a reply was expected"},
      {"*2\r\n:1\r\n\n", "a line ending in LF without CR: '?'"},
  };
  for (const Case& c : cases) {
    RespParser parser;
    std::vector<RedisReply> out;
    parser.feed(c.input, out);
    EXPECT_TRUE(parser.failed()) << c.input;
    EXPECT_EQ(parser.error(), c.error) << c.input;
    EXPECT_EQ(parser.feed("+OK\r\n", out), 0u) << c.input;
    EXPECT_TRUE(out.empty()) << c.input;
    EXPECT_EQ(parser.error(), c.error) << c.input;
  }
}

// Ensures a large array reply fed in 4 KiB socket-sized pieces parses with each piece consumed once: a parser
// that re-parsed from the reply's start would do ~2,500 passes over megabytes and not finish in the test's time.
TEST(RespParser, LargeArrayInSmallPiecesIsParsedOnce) {
  constexpr size_t kElements = 1'000'000;
  constexpr size_t kPieceBytes = 4096;
  std::string bytes = "*" + std::to_string(kElements) + "\r\n";
  for (size_t i = 0; i < kElements; ++i) {
    const std::string n = std::to_string(i);
    bytes += i % 2 ? ":" + n + "\r\n" : "$" + std::to_string(n.size()) + "\r\n" + n + "\r\n";
  }
  RespParser parser;
  auto replies = feedPieces(parser, slices(bytes, kPieceBytes));
  ASSERT_EQ(replies.size(), 1u) << parser.error();
  const auto& elements = replies[0].elements;
  ASSERT_EQ(elements.size(), kElements);
  size_t wrong = 0;
  for (size_t i = 0; i < kElements; ++i)
    wrong += i % 2 ? elements[i].integer != static_cast<int64_t>(i) : elements[i].str != std::to_string(i);
  EXPECT_EQ(wrong, 0u);
  EXPECT_FALSE(parser.pending());
}

// Ensures a multi-megabyte bulk string arriving in pieces is kept whole and exact.
TEST(RespParser, LargeBulkInSmallPieces) {
  std::string value(8u << 20, '\0');
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i * 131);
  const std::string bytes = "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
  RespParser parser;
  auto replies = feedPieces(parser, slices(bytes, 4096));
  ASSERT_EQ(replies.size(), 1u) << parser.error();
  EXPECT_TRUE(replies[0].str == value);
}

// Ensures a command is one RESP array of bulk strings with any bytes kept as they are (both overloads), and
// that the parser reads it back (a command has a reply's shape).
TEST(RespEncode, CommandIsAnArrayOfBinarySafeBulkStrings) {
  std::string out;
  appendCommand(out, {"SET", "k", "a\0b\r\n"s});
  EXPECT_EQ(out, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na\0b\r\n\r\n"s);
  const std::vector<std::string_view> args = {"GET", ""};
  appendCommand(out, args);
  EXPECT_EQ(out.substr(out.find("*2")), "*2\r\n$3\r\nGET\r\n$0\r\n\r\n");
  auto replies = parseWhole(out);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(show(replies[0]), "[$3[SET],$1[k],$5[a\0b\r\n],]"s);
  EXPECT_EQ(show(replies[1]), "[$3[GET],$0[],]");
}

}  // namespace
}  // namespace prefixgate::sync
