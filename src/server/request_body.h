#pragma once
// The request bodies the gateway holds in memory. A body's buffer grows as its bytes arrive, never to the length a
// head merely announces (a head alone costs no body memory), and every growth is charged, before it is allocated,
// to one budget shared by all event loops (limits.max_buffered_body_bytes), released when the request is done.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace prefixgate::server {

// The gateway-wide budget of body bytes held. Thread-safe (atomics only); outlives every request.
class BodyBudget {
 public:
  explicit BodyBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}
  // Takes `bytes` when they fit under the limit with what is held; otherwise takes nothing, counts a refusal and
  // returns false.
  bool tryCharge(uint64_t bytes);
  void release(uint64_t bytes);
  uint64_t held() const { return held_.load(std::memory_order_relaxed); }
  uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> refusals_{0};
};

// A body is read in steps of its buffer's free capacity; the first step is at most this, and the capacity doubles
// from there. Most prompts fit the first step (one allocation, as before); a head announcing 32 MiB and sending
// nothing costs this much at most.
inline constexpr size_t kFirstBodyStepBytes = 64 * 1024;

// The capacity (body bytes, padding apart) a body buffer of `capacity` grows to so that it holds `needed` bytes:
// doubled (at least kFirstBodyStepBytes), never beyond `limit` (the announced length, or limits.max_body_bytes),
// never below `needed`. Pure.
size_t nextBodyCapacity(size_t capacity, size_t needed, size_t limit);

// One request's share of the budget: grows its body's string ahead of each read, charging the growth first.
// Releases everything it charged when destroyed (declare it before the parser that holds the body, so the body is
// freed first). One request, one thread.
class BodyCharge {
 public:
  // `padding_bytes`: room kept after the body for the JSON parser (openai::paddingBytes()), not charged.
  BodyCharge(BodyBudget& budget, size_t padding_bytes) : budget_(budget), padding_(padding_bytes) {}
  ~BodyCharge() { budget_.release(charged_); }
  BodyCharge(const BodyCharge&) = delete;
  BodyCharge& operator=(const BodyCharge&) = delete;

  // Makes `body`'s capacity hold min(needed, limit) bytes plus the padding, growing it by nextBodyCapacity. False,
  // with nothing allocated or charged, when the growth does not fit the budget.
  bool reserve(std::string& body, size_t needed, size_t limit);
  uint64_t charged() const { return charged_; }

 private:
  BodyBudget& budget_;
  const size_t padding_;
  uint64_t charged_ = 0;  // the body capacity charged so far (padding apart)
};

// A request body in a std::string that Beast's parser only appends to. Beast's own string_body reserves the whole
// announced Content-Length when the body begins; the session reserves ahead of each parse step instead
// (BodyCharge::reserve), so an append stays within the capacity it charged.
struct GrowingStringBody {
  using value_type = std::string;

  static std::uint64_t size(const value_type& body) { return body.size(); }

  // Appends `bytes` to `body`: all of them (the count returned), or none and buffer_overflow when they do not fit.
  static std::size_t append(value_type& body, std::string_view bytes, boost::beast::error_code& ec) {
    if (bytes.size() > body.max_size() - body.size()) {
      ec = boost::beast::http::error::buffer_overflow;
      return 0;
    }
    body.append(bytes.data(), bytes.size());
    return bytes.size();
  }

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) { ec = {}; }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      size_t total = 0;
      ec = {};
      for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
           ++it) {
        const boost::asio::const_buffer b = *it;
        total += append(body_, {static_cast<const char*>(b.data()), b.size()}, ec);
        if (ec) break;
      }
      return total;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace prefixgate::server
