#pragma once
// I/O that is already possible, done at once instead of through the event loop. asio completes an async operation
// that needed no wait by posting its handler (and Beast's tcp_stream arms, then cancels, a timer for it): each is
// one more round of the loop, often one more epoll_wait, per request. A response that fits the socket's send
// buffer, or a request whose bytes are already read, needs none of that.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <chrono>
#include <memory>

#include "util/recycling_allocator.h"

namespace prefixgate::net {

// Sends what the socket takes of `buffers` at once (it is switched to non-blocking mode, so a full send buffer
// never blocks the thread); returns the bytes sent, `ec` a socket error (not "would block"). A plain function, not
// a coroutine: the usual case, all sent, costs no coroutine frame.
template <class Buffers>
size_t sendNow(boost::beast::tcp_stream& stream, const Buffers& buffers, boost::system::error_code& ec) {
  auto& socket = stream.socket();
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  const size_t sent = ec ? 0 : socket.send(buffers, 0, ec);
  if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) ec = {};
  return sent;
}

// Writes what sendNow left of `buffers` (from byte `sent` on) under the stream's timeout.
template <class Buffers>
boost::asio::awaitable<boost::system::error_code> writeRest(boost::beast::tcp_stream& stream, const Buffers& buffers,
                                                            size_t sent) {
  boost::beast::buffers_suffix<Buffers> rest(buffers);
  rest.consume(sent);
  boost::system::error_code ec;
  co_await boost::asio::async_write(stream, rest, boost::asio::redirect_error(boost::asio::use_awaitable, ec));
  co_return ec;
}

// Feeds `parser` what `buffer` already holds, as http::async_read_some does before it reads. True when that
// settled the call (the parser advanced, or `ec` has its error); false when more bytes must be read first.
template <class Parser, class Buffer>
bool parseBuffered(Parser& parser, Buffer& buffer, boost::system::error_code& ec) {
  if (buffer.size() == 0) return false;
  const size_t used = parser.put(buffer.data(), ec);
  buffer.consume(used);
  if (ec != boost::beast::http::error::need_more) return true;
  ec = {};
  return false;
}

// A deadline for the waits of one socket that costs nothing per wait: restart() moves the deadline (a clock read and a
// store), pause() says no wait is in progress (a store), and one timer, armed at the first restart(), re-arms itself
// when it fires early: at most once per `tick`, the shortest limit the deadline has been given. When the deadline
// passes during a wait, the socket's pending operations are cancelled and expired() says that this was why; a timer
// that fires while paused stops, and the next restart() arms it again. So a deadline kept for a connection's life (a
// client's keep-alive waits, a pooled engine connection's reads) arms no timer per request, where Beast's tcp_stream
// arms one per operation and cancels it after (one more handler, one more pass of the event loop). A limit shorter
// than any before it re-arms the timer once. Same thread as the socket; the socket must outlive this object.
class IdleDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit IdleDeadline(boost::asio::ip::tcp::socket& socket) : socket_(socket) {}
  ~IdleDeadline() {
    if (!state_) return;
    state_->socket = nullptr;  // the timer's handler may still run: it must not touch the socket
    state_->timer.cancel();
  }
  IdleDeadline(const IdleDeadline&) = delete;
  IdleDeadline& operator=(const IdleDeadline&) = delete;

  // A new wait begins: it fails when `limit` passes before it ends (or before the next restart() or pause()).
  void restart(Clock::duration limit) {
    const Clock::time_point now = Clock::now();
    if (!state_) state_ = std::allocate_shared<State>(util::RecyclingAllocator<State>(), socket_, limit);
    State& s = *state_;
    s.deadline = now + limit;
    s.paused = false;
    s.expired = false;
    if (limit < s.tick) s.tick = limit;
    // Armed for a later time than the new deadline (a shorter limit than the timer was armed under): re-armed now.
    if (!s.armed || s.timer.expiry() > s.deadline) arm(state_, now);
  }
  // No wait is in progress until the next restart(): the deadline cannot pass.
  void pause() {
    if (state_) state_->paused = true;
  }
  bool expired() const { return state_ && state_->expired; }

 private:
  struct State {
    State(boost::asio::ip::tcp::socket& s, Clock::duration first_limit)
        : timer(s.get_executor()), socket(&s), tick(first_limit) {}
    boost::asio::steady_timer timer;
    boost::asio::ip::tcp::socket* socket;
    Clock::time_point deadline;
    Clock::duration tick;   // the shortest limit given: the timer never sleeps longer
    uint64_t generation = 0;  // which wait of the timer is the current one (a re-arm leaves a cancelled one behind)
    bool armed = false;
    bool paused = false;
    bool expired = false;
  };
  static void arm(std::shared_ptr<State> state, Clock::time_point now) {
    State& s = *state;
    s.armed = true;
    s.timer.expires_at(std::min(s.deadline, now + s.tick));  // cancels a wait still pending (a re-arm)
    s.timer.async_wait([state = std::move(state), generation = ++s.generation](const boost::system::error_code& ec) mutable {
      if (generation != state->generation) return;  // a re-arm replaced this wait
      state->armed = false;
      if (ec || !state->socket || state->paused) return;
      const Clock::time_point now = Clock::now();
      if (now < state->deadline) return arm(std::move(state), now);
      state->expired = true;
      boost::system::error_code ignored;
      state->socket->cancel(ignored);
    });
  }
  boost::asio::ip::tcp::socket& socket_;
  std::shared_ptr<State> state_;  // shared with the timer's pending handler
};

// Reads a response body into an HTTP parser with as few system calls per SSE event as asio 1.81's reactor allows,
// and no timer work per read (tcp_stream arms and cancels a timer around every operation; the cancelled wait is one
// more handler, often one more pass of the loop and an epoll_wait(0), per event). A read that filled its space is
// followed by another at once (non-blocking: more is likely waiting). After one that did not, the next is asio's
// read operation on the bare socket, which waits for the edge-triggered registration to report the socket readable
// and carries the data in the reactor's read. Whether asio first tries a recv that meets EAGAIN depends on what the
// last reactor read learnt: on a socket with TCP_INQ on (upstream connections: net/drained_reads.h) a read that the
// kernel says left nothing queued, and no FIN pending, marks the socket drained and the next read waits at once;
// without it asio tries once. (`async_wait(wait_read)` would start without the recv but re-arms the descriptor with
// an EPOLL_CTL_MOD every time, and since an upstream socket keeps EPOLLOUT registered from its connect, each re-arm
// also reports it writable: a spurious wake-up per event. nginx's rule, a short read drained the socket, needs
// EPOLLRDHUP, which asio does not register: tried and reverted, docs/benchmarks.md "One write per read; a short read
// is not proof of a drained socket".) A wait is ended by bytes, by `deadline` passing (beast::error::timeout, as
// tcp_stream's expiry reported it), or by the socket's closing (the client watcher's hang-up: operation_aborted or
// bad_descriptor). A response head is read the same way (a parser stops after the head unless it is eager).
class ReadyReader {
 public:
  // At most this much is read at once (Beast's http::async_read_some reads as much).
  static constexpr size_t kMaxReadBytes = 64 * 1024;
  // Each read() waits at most `limit` (a deadline restarted per read).
  ReadyReader(boost::asio::ip::tcp::socket& socket, IdleDeadline& deadline, IdleDeadline::Clock::duration limit)
      : socket_(socket), deadline_(deadline), limit_(limit) {}

  // Feeds `parser` what `buffer` holds, then the socket's next bytes, until the parser advanced (for a buffer_body:
  // body bytes, or its buffer is full: need_buffer; a head: the whole head), ended or failed (`ec`). The socket is
  // switched to non-blocking mode. Restarts `deadline` first, as one tcp_stream expiry covered one
  // http::async_read_some, unless `restart_deadline` is false (the read goes on under the last restart's limit:
  // several heads within one limit).
  template <class Parser, class Buffer>
  boost::asio::awaitable<void> read(Parser& parser, Buffer& buffer, boost::system::error_code& ec,
                                    bool restart_deadline = true) {
    ec = {};
    if (restart_deadline) deadline_.restart(limit_);
    for (;;) {
      if (parseBuffered(parser, buffer, ec)) co_return;
      if (drained_) {
        const size_t room = boost::beast::read_size(buffer, kMaxReadBytes);
        const size_t n = co_await socket_.async_read_some(buffer.prepare(room),
                                    boost::asio::redirect_error(boost::asio::use_awaitable, ec));
        if (ec == boost::asio::error::eof) {
          ec = {};
          if (parser.got_some()) parser.put_eof(ec);
          else ec = boost::beast::http::error::end_of_stream;
          co_return;
        }
        if (ec) {
          if (deadline_.expired()) ec = boost::beast::error::timeout;
          co_return;
        }
        buffer.commit(n);
        drained_ = n < room;
        continue;
      }
      if (readNow(parser, buffer, ec)) co_return;
    }
  }

 private:
  // One non-blocking read into `buffer`; true when it settled the call (the end of the stream, or an error).
  template <class Parser, class Buffer>
  bool readNow(Parser& parser, Buffer& buffer, boost::system::error_code& ec) {
    namespace http = boost::beast::http;
    const size_t room = boost::beast::read_size(buffer, kMaxReadBytes);
    if (room == 0) {
      ec = http::error::buffer_overflow;
      return true;
    }
    if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
    const size_t n = ec ? 0 : socket_.read_some(buffer.prepare(room), ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
      ec = {};
      drained_ = true;  // nothing yet: asio's read waits for it
      return false;
    }
    if (ec == boost::asio::error::eof) {
      // As Beast's read: the end of a close-delimited body, else a cut (partial_message) or no message at all.
      ec = {};
      if (parser.got_some()) parser.put_eof(ec);
      else ec = http::error::end_of_stream;
      return true;
    }
    if (ec) return true;
    buffer.commit(n);
    drained_ = n < room;
    return false;
  }

  boost::asio::ip::tcp::socket& socket_;
  IdleDeadline& deadline_;
  IdleDeadline::Clock::duration limit_;
  bool drained_ = true;  // the first read is asio's: the head's read took what had come
};

}  // namespace prefixgate::net
