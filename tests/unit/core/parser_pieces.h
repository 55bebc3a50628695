#pragma once
// What the tests comparing the gateway's HTTP parsers with Beast's share (proxy/response_parser_test.cpp,
// server/request_parser_test.cpp): bytes fed in pieces as socket reads would give them, the fuzz targets' seeds, and
// a field name in the cases a peer may write it.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace prefixgate::test_support {

// `input` delivered in pieces of `piece` bytes (0: all at once) into a buffer, as reads from a socket.
class PieceFeeder {
 public:
  PieceFeeder(std::string_view input, size_t piece) : input_(input), piece_(piece) {}

  // Beast's read_some on a parser: parse what is buffered, read when more is needed, at EOF finish what began.
  template <class Parser>
  boost::beast::error_code readSome(Parser& parser) {
    boost::beast::error_code ec;
    for (;;) {
      if (buffer_.size() > 0) {
        const size_t used = parser.put(buffer_.data(), ec);
        buffer_.consume(used);
        consumed_ += used;
        if (ec != boost::beast::http::error::need_more) return ec;
        ec = {};
      }
      if (!readMore()) {
        if (!parser.got_some()) return boost::beast::http::error::end_of_stream;
        parser.put_eof(ec);
        return ec;
      }
    }
  }
  // The bytes the parser took so far.
  size_t consumed() const { return consumed_; }

 private:
  bool readMore() {
    if (offset_ >= input_.size()) return false;
    const size_t n = piece_ == 0 ? input_.size() - offset_ : std::min(piece_, input_.size() - offset_);
    buffer_.commit(boost::asio::buffer_copy(buffer_.prepare(n), boost::asio::buffer(input_.data() + offset_, n)));
    offset_ += n;
    return true;
  }

  std::string_view input_;
  size_t piece_;
  size_t offset_ = 0;
  size_t consumed_ = 0;
  boost::beast::flat_buffer buffer_;
};

// Calls `each(bytes, file name)` for every seed of tests/fuzz/corpus/<corpus> (its first byte, the fuzz target's
// control byte, dropped); returns how many there were.
template <class Each>
size_t forEachFuzzSeed(std::string_view corpus, Each each) {
  const std::filesystem::path dir = std::filesystem::path(PREFIXGATE_SOURCE_DIR) / "tests/fuzz/corpus" / corpus;
  size_t seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string bytes = text.str();
    if (bytes.empty()) continue;
    each(std::string_view(bytes).substr(1), entry.path().filename().string());
    ++seeds;
  }
  return seeds;
}

// `name` as written, in lower case and in upper case.
inline std::array<std::string, 3> caseVariants(std::string_view name) {
  std::array<std::string, 3> v{std::string(name), std::string(name), std::string(name)};
  for (char& c : v[1]) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (char& c : v[2]) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v;
}

}  // namespace prefixgate::test_support
