#pragma once
// vLLM's ZMQ KV event publisher: a PUB socket sending [topic, 8-byte big-endian sequence number, msgpack batch]
// per message (sequence from 0, +1 per message), and an optional ROUTER replay socket: a client (DEALER) sends
// [empty, 8-byte big-endian start sequence] and gets [empty, sequence, payload] for every buffered message from
// that sequence on, then [empty, -1, empty payload]. The replay socket is served by its own thread; publish() is
// called from the engine's event loop and never blocks (PUB drops at its high-water mark, as vLLM's does).
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace prefixgate::sim {

class KvEventPublisher {
 public:
  // Binds the PUB socket to `endpoint` ("tcp://*:5557"; port 0 picks a free one) and, unless `replay_endpoint` is
  // empty, the ROUTER socket. Keeps the last `buffer_messages` messages for replay. Throws zmq::error_t when a bind
  // fails.
  KvEventPublisher(const std::string& endpoint, const std::string& replay_endpoint, size_t buffer_messages = 10000);
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Sends one message with the next sequence number and keeps it for replay.
  void publish(std::string payload);

  // The endpoints actually bound ("tcp://0.0.0.0:41234"); "" for no replay socket.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replayEndpoint() const { return replay_endpoint_; }
  uint64_t published() const { return next_sequence_; }

 private:
  void serveReplay();

  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> pub_;
  std::unique_ptr<zmq::socket_t> replay_;
  std::string endpoint_;
  std::string replay_endpoint_;
  size_t buffer_messages_;
  uint64_t next_sequence_ = 0;
  std::mutex buffer_mutex_;
  std::deque<std::pair<uint64_t, std::string>> buffer_;  // guarded by buffer_mutex_
  std::atomic<bool> stopping_{false};
  std::thread replay_thread_;
};

// "tcp://*:0" -> "tcp://*:*" (ZMQ's spelling of an ephemeral port); other endpoints unchanged.
std::string zmqBindEndpoint(const std::string& endpoint);

}  // namespace prefixgate::sim
