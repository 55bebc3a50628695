#pragma once
// A small Redis client for the state-sync thread: RESP2 encoding, an incremental reply parser with limits, and
// one connection that runs pipelined command batches as C++20 coroutines on an Asio io_context. Nothing here
// blocks a thread: every wait is an asynchronous operation with a deadline. The pure parts (the URL, the
// protocol) are in redis_address.h and resp.h, so config validation and the fuzz target build without Asio.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "sync/redis_address.h"
#include "sync/resp.h"

namespace prefixgate::sync {

// One connection. Batches run one at a time (a caller awaits each; a second run() while one is in flight fails
// at once); a batch is written in one write and its replies are read in order. Any failure (connect, AUTH,
// SELECT, I/O, a protocol error, the deadline) closes the connection and is returned as an error; the next call
// to run() reconnects. Use it from its io_context's thread only (destruction included).
class RedisConnection {
 public:
  struct Result {
    std::string error;                 // empty on success (a Redis error reply is a reply, not a failure)
    std::vector<RedisReply> replies;   // one per command, in order
    size_t bytes_sent = 0;
    size_t bytes_received = 0;
    bool ok() const { return error.empty(); }
  };
  // `limits`: what one reply may hold (resp.h); the caller bounds them by what it reads.
  RedisConnection(boost::asio::io_context& io, RedisAddress address, std::chrono::milliseconds timeout,
                  RespParser::Limits limits = {});
  // A batch still in flight fails (its socket is closed) and never touches the destroyed connection.
  ~RedisConnection();

  // Runs `commands` (appendCommand's encoding of `count` commands): connects first when not connected (resolve,
  // connect, AUTH when a password is set, SELECT when db != 0, all within the timeout). The whole batch must
  // complete within timeout + extra (extra: a blocking command's own wait, e.g. XREAD BLOCK). Never throws.
  boost::asio::awaitable<Result> run(std::string commands, size_t count,
                                     std::chrono::milliseconds extra = std::chrono::milliseconds(0));
  bool connected() const;
  // Closes the socket (a batch in progress fails). Safe to call from the connection's io_context only.
  void close();
  // Connections opened so far (the first and every reconnect).
  uint64_t connects() const;

 private:
  struct Impl;
  // Shared with the batch in flight, which may outlive the connection.
  std::shared_ptr<Impl> impl_;
};

}  // namespace prefixgate::sync
