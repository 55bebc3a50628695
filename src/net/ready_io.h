#pragma once
// I/O that is already possible, done at once instead of through the event loop. asio completes an async operation
// that needed no wait by posting its handler (and Beast's tcp_stream arms, then cancels, a timer for it): each is
// one more round of the loop, often one more epoll_wait, per request. A response that fits the socket's send
// buffer, or a request whose bytes are already read, needs none of that.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>

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

}  // namespace prefixgate::net
