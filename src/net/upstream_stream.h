#pragma once
// A connection to an engine, as the upstream pool keeps it and both the relay and the remote tokenizer use it.
#include <boost/beast/core/tcp_stream.hpp>
#include <utility>

#include "net/ready_io.h"

namespace prefixgate::net {

// Beast's stream (the connect and the request's write under its own timeout) and the deadline its reads wait under
// (the response head, then each read of the body), kept for the connection's life so that a pooled connection's
// next request arms no timer for its reads (IdleDeadline). Held by unique_ptr<UpstreamStream>, never through a
// pointer to tcp_stream (whose destructor is not virtual).
class UpstreamStream : public boost::beast::tcp_stream {
 public:
  template <class ExecutorOrContext>
  explicit UpstreamStream(ExecutorOrContext&& ex)
      : boost::beast::tcp_stream(std::forward<ExecutorOrContext>(ex)), reads_(socket()) {}
  IdleDeadline& reads() { return reads_; }

 private:
  IdleDeadline reads_;
};

}  // namespace prefixgate::net
