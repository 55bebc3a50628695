#pragma once
// A stream socket read that returns fewer bytes than it asked for leaves the socket marked drained in asio's
// reactor, so the next read of that socket waits for epoll to report it readable instead of first trying a recv that
// finds nothing (EAGAIN).
//
// Why: asio 1.81 marks a socket "exhausted" only after a read of 0 bytes (reactive_socket_recv_op.hpp), so after
// every successful read its next read is tried at once and, when the peer has not written yet (the next SSE event,
// the next request on a kept-alive connection, an engine's answer), fails with EAGAIN before the reactor waits:
// one wasted system call per SSE event and about two per proxied request (docs/benchmarks.md, "Streaming" and
// "System calls"). For TCP a read that returned less than asked for emptied the receive queue (the kernel copies
// until the queue or the buffer ends), and with asio's edge-triggered registration every later arrival reports the
// socket readable again, which makes the reactor try reads again (epoll_reactor's perform_io sets
// try_speculative_): nginx relies on the same rule (ngx_unix_recv: n < size clears `ready`). A peek is never
// taken as draining (it leaves the bytes queued).
//
// How: asio has no option for it, so this explicitly specializes reactive_socket_recv_op_base, the part of asio's
// read operation that performs the recv and reports its status, for the buffer types the gateway reads into: a
// mutable_buffer (asio::buffer, a flat_buffer's prepare(), asio::async_read) and Beast's buffers_prefix_view of
// one (beast::tcp_stream's reads). The specializations must precede every use, so this header is force-included in
// every translation unit of the targets linking prefixgate_base (CMakeLists.txt), as util/coroutine_frames.h is.
// Reads into other buffer sequences keep asio's own rule.
#include <boost/asio/buffer.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/detail/reactive_socket_recv_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/beast/core/buffers_prefix.hpp>
#include <boost/version.hpp>

static_assert(BOOST_VERSION == 108100,
              "net/drained_reads.h mirrors asio 1.81's reactive_socket_recv_op_base (constructor, do_perform's "
              "status): check it against this Boost's reactive_socket_recv_op.hpp");

namespace prefixgate::net::drained_reads {

// The one buffer a read into these types fills (Beast's prefix view of one buffer is a mutable_buffer).
inline boost::asio::mutable_buffer onlyBuffer(const boost::asio::mutable_buffer& b) { return b; }

// Counts the recv calls made by the operations below (tests: a read after a short one waits without a recv).
inline thread_local unsigned long long recv_calls = 0;

// asio's reactive_socket_recv_op_base for a single buffer, except the status of a short read on a stream socket.
template <class Buffers>
class RecvOpBase : public boost::asio::detail::reactor_op {
 public:
  RecvOpBase(const boost::system::error_code& success_ec, boost::asio::detail::socket_type socket,
             boost::asio::detail::socket_ops::state_type state, const Buffers& buffers,
             boost::asio::socket_base::message_flags flags, func_type complete_func)
      : reactor_op(success_ec, &RecvOpBase::do_perform, complete_func),
        socket_(socket),
        state_(state),
        buffer_(onlyBuffer(buffers)),
        flags_(flags) {}

  static status do_perform(reactor_op* base) {
    namespace socket_ops = boost::asio::detail::socket_ops;
    auto* o = static_cast<RecvOpBase*>(base);
    const bool stream = (o->state_ & socket_ops::stream_oriented) != 0;
    ++recv_calls;
    if (!socket_ops::non_blocking_recv1(o->socket_, o->buffer_.data(), o->buffer_.size(), o->flags_, stream, o->ec_,
                                        o->bytes_transferred_))
      return not_done;  // would block: the reactor waits for readiness
    if (!stream) return done;
    // asio's own rule: 0 bytes (the end of the stream, an error) is exhausted. Ours adds a short read, unless a peek.
    if (o->bytes_transferred_ == 0) return done_and_exhausted;
    const bool peek = (o->flags_ & boost::asio::socket_base::message_peek) != 0;
    return !peek && o->bytes_transferred_ < o->buffer_.size() ? done_and_exhausted : done;
  }

 private:
  boost::asio::detail::socket_type socket_;
  boost::asio::detail::socket_ops::state_type state_;
  boost::asio::mutable_buffer buffer_;
  boost::asio::socket_base::message_flags flags_;
};

}  // namespace prefixgate::net::drained_reads

namespace boost::asio::detail {

template <>
class reactive_socket_recv_op_base<mutable_buffer> : public prefixgate::net::drained_reads::RecvOpBase<mutable_buffer> {
 public:
  using RecvOpBase::RecvOpBase;
};

template <>
class reactive_socket_recv_op_base<boost::beast::buffers_prefix_view<mutable_buffer>>
    : public prefixgate::net::drained_reads::RecvOpBase<boost::beast::buffers_prefix_view<mutable_buffer>> {
 public:
  using RecvOpBase::RecvOpBase;
};

}  // namespace boost::asio::detail
