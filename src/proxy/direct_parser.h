#pragma once
// What the two direct readers of HTTP/1.1 messages share (proxy/response_parser.h for an engine's response,
// server/request_parser.h for a client's request): the message, Beast's parser inside that reads every message the
// direct reader leaves (from its first byte) and every chunked body, and the state that says which of the two
// reads now, with the parts of Beast's basic_parser interface that only depend on that state.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/optional/optional.hpp>
#include <cstdint>

namespace prefixgate::proxy {

// `Message`: what the parsers write into; `BeastParser`: a basic_parser subclass constructed with a Message& that has
// startChunkedBody() (it reads a synthetic head that says only `Transfer-Encoding: chunked`, writing nothing).
template <class Message, class BeastParser>
class DirectParser {
 public:
  DirectParser(const DirectParser&) = delete;
  DirectParser& operator=(const DirectParser&) = delete;

  void header_limit(uint32_t v) { header_limit_ = v; }
  void body_limit(boost::optional<uint64_t> v) { body_limit_ = v; }
  Message& get() { return message_; }
  const Message& get() const { return message_; }

  bool got_some() const { return mode_ == Mode::kBeast ? beast_.got_some() : mode_ != Mode::kStart; }
  bool is_header_done() const { return mode_ == Mode::kBeast ? beast_.is_header_done() : mode_ != Mode::kStart; }
  bool is_done() const {
    switch (mode_) {
      case Mode::kBeast:
      case Mode::kChunked: return beast_.is_done();
      case Mode::kDone: return true;
      default: return false;
    }
  }
  bool chunked() const { return mode_ == Mode::kBeast ? beast_.chunked() : chunked_; }
  boost::optional<uint64_t> content_length() const {
    if (mode_ == Mode::kBeast) return beast_.content_length();
    return has_length_ ? boost::optional<uint64_t>(length_) : boost::none;
  }
  // True when the head was read directly (not by Beast's parser): for tests and measurements.
  bool headReadDirectly() const { return mode_ != Mode::kStart && mode_ != Mode::kBeast; }

 protected:
  enum class Mode : uint8_t {
    kStart,    // nothing read yet
    kBeast,    // Beast's parser reads the whole message
    kLength,   // a body of remaining_ more bytes
    kToEof,    // a body up to the connection's end (responses)
    kChunked,  // a chunked body, framed by Beast's parser (started by startChunked)
    kDone,     // read directly, complete
  };

  // `body_limit`: Beast's default for the kind of message (1 MiB for requests, 8 MiB for responses).
  explicit DirectParser(uint64_t body_limit) : beast_(message_), body_limit_(body_limit) {}
  ~DirectParser() = default;

  // Not a head to read directly: Beast's parser reads the whole message, from this first byte on.
  size_t putToBeast(boost::asio::const_buffer buffer, boost::beast::error_code& ec) {
    mode_ = Mode::kBeast;
    beast_.header_limit(header_limit_);
    beast_.body_limit(body_limit_);
    return beast_.put(buffer, ec);
  }
  // After a head read directly that said chunked: Beast's parser frames the body from the next byte, under the
  // limits it would hold the message to had it read the head.
  void startChunked() {
    beast_.header_limit(header_limit_);
    beast_.body_limit(body_limit_);
    beast_.startChunkedBody();
    mode_ = Mode::kChunked;
  }

  Message message_;
  BeastParser beast_;
  Mode mode_ = Mode::kStart;
  // What a head read directly said (the flags Beast's parser keeps).
  bool has_length_ = false;
  bool chunked_ = false;
  uint64_t length_ = 0;
  uint64_t remaining_ = 0;
  uint32_t header_limit_ = 8192;  // Beast's default
  boost::optional<uint64_t> body_limit_;
};

}  // namespace prefixgate::proxy
