#pragma once
// A read of a TCP socket that the kernel says left nothing queued (TCP_INQ) leaves the socket marked drained in asio's
// reactor, so the next read of that socket waits for epoll to report it readable instead of first trying a recv that
// finds nothing (EAGAIN).
//
// Why: asio 1.81 marks a socket "exhausted" only after a read of 0 bytes (reactive_socket_recv_op.hpp), so after
// every successful read its next read is tried at once and, when the peer has not written yet (the next SSE event,
// the next request on a kept-alive connection, an engine's answer), fails with EAGAIN before the reactor waits: one
// wasted system call per SSE event and about three per proxied request (docs/benchmarks.md, "Bytes left queued: a
// drained socket known from the read itself").
//
// Why TCP_INQ and not nginx's rule: nginx takes a read that returned less than it asked for as draining the socket,
// which is sound only with EPOLLRDHUP (its pending_eof): a FIN that came with the last bytes is consumed by the read
// that returns them and raises no later edge, so a socket marked drained then never sees its end. asio does not
// register EPOLLRDHUP (tried and reverted: the Kubernetes watch tests hung). A socket with TCP_INQ switched on
// (drained_reads::enable, Linux 4.18+) gets, with every read, the number of bytes still queued after it as a control
// message, and the kernel reports 1 there, not 0, once a FIN was received (tcp_inq_hint: "tell the user-space to
// continue reading"). So 0 means exactly: nothing more to read and no end of stream to see yet; whatever arrives
// later wakes the socket's waiters after the count was taken, which the edge-triggered registration reports as a
// new event (epoll_reactor's perform_io sets try_speculative_ again before it runs the queued reads). A socket
// without the option (the call failed, an old kernel, not TCP) returns no count and keeps asio's own rule; a peek
// never drains (its bytes stay queued).
//
// How: asio has no option for it, so this explicitly specializes reactive_socket_recv_op_base, the part of asio's
// read operation that performs the recv and reports its status, for the buffer types the gateway reads into: a
// mutable_buffer (asio::buffer, a flat_buffer's prepare(), asio::async_read) and Beast's buffers_prefix_view of
// one (beast::tcp_stream's reads). The recv is a recvmsg with room for the count: the same one system call. The
// specializations must precede every use, so this header is force-included in every translation unit of the targets
// linking prefixgate_base (CMakeLists.txt), as util/coroutine_frames.h is. Reads into other buffer sequences keep
// asio's own rule.
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/asio/detail/reactive_socket_recv_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/beast/core/buffers_prefix.hpp>
#include <boost/version.hpp>
#include <cerrno>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static_assert(BOOST_VERSION == 108100,
              "net/drained_reads.h mirrors asio 1.81's reactive_socket_recv_op_base (constructor, do_perform's "
              "status, non_blocking_recv1's errors): check it against this Boost's reactive_socket_recv_op.hpp");

namespace prefixgate::net::drained_reads {

// Switches TCP_INQ on for a connected TCP socket, so that its reads through asio's reactor know when they drained
// it. False when the kernel refused (the socket then keeps asio's rule: one recv that meets EAGAIN before each wait).
inline bool enable(int native_socket) {
  const int on = 1;
  return ::setsockopt(native_socket, IPPROTO_TCP, TCP_INQ, &on, sizeof on) == 0;
}

// Counts the recv calls made by the operations below (tests: a read after a draining one waits without a recv).
inline thread_local unsigned long long recv_calls = 0;

// What one recvmsg found: the bytes (or the error, as asio's non_blocking_recv1 reports them) and the queued count.
struct Received {
  bool would_block = false;  // nothing yet: the reactor waits
  bool drained = false;      // the kernel said nothing is left queued and no FIN is pending
};

inline Received receive(int socket, void* data, size_t size, int flags, bool stream, boost::system::error_code& ec,
                        size_t& bytes) {
  ++recv_calls;
  iovec iov{data, size};
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int))];
  for (;;) {
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(socket, &msg, flags);
    if (n < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return {true, false};
      ec = boost::system::error_code(error, boost::asio::error::get_system_category());
      bytes = 0;
      return {};
    }
    ec.assign(0, ec.category());
    bytes = static_cast<size_t>(n);
    if (stream && n == 0) {
      ec = boost::asio::error::eof;
      return {};
    }
    if ((flags & MSG_PEEK) != 0) return {};
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != IPPROTO_TCP || c->cmsg_type != TCP_CM_INQ || c->cmsg_len < CMSG_LEN(sizeof(int))) continue;
      int queued = 0;
      __builtin_memcpy(&queued, CMSG_DATA(c), sizeof queued);
      return {false, queued == 0};
    }
    return {};
  }
}

// The one buffer a read into these types fills (Beast's prefix view of one buffer is a mutable_buffer).
inline boost::asio::mutable_buffer onlyBuffer(const boost::asio::mutable_buffer& b) { return b; }

// asio's reactive_socket_recv_op_base for a single buffer, except that a read the kernel says drained the socket
// reports it (done_and_exhausted), as asio's own does only for a read of 0 bytes.
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
    const Received got =
        receive(o->socket_, o->buffer_.data(), o->buffer_.size(), o->flags_, stream, o->ec_, o->bytes_transferred_);
    if (got.would_block) return not_done;
    // asio's own rule: a stream read of 0 bytes (its end, an error) is exhausted. Ours adds a read the kernel says
    // drained the socket.
    if (stream && o->bytes_transferred_ == 0) return done_and_exhausted;
    return got.drained ? done_and_exhausted : done;
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
