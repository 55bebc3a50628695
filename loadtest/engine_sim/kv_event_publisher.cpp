#include "engine_sim/kv_event_publisher.h"

#include <array>
#include <chrono>
#include <iterator>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "util/log.h"

namespace prefixgate::sim {
namespace {

constexpr auto kReplayPollInterval = std::chrono::milliseconds(100);

std::array<uint8_t, 8> bigEndian(int64_t value) {
  std::array<uint8_t, 8> bytes{};
  auto bits = static_cast<uint64_t>(value);
  for (int i = 7; i >= 0; --i) {
    bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(bits & 0xffu);
    bits >>= 8;
  }
  return bytes;
}

int64_t fromBigEndian(const zmq::message_t& frame) {
  uint64_t value = 0;
  const auto* data = static_cast<const uint8_t*>(frame.data());
  for (size_t i = 0; i < 8; ++i) value = (value << 8) | data[i];
  return static_cast<int64_t>(value);
}

std::string lastEndpoint(zmq::socket_t& socket) { return socket.get(zmq::sockopt::last_endpoint); }

}  // namespace

std::string zmqBindEndpoint(const std::string& endpoint) {
  if (endpoint.size() > 2 && endpoint.compare(endpoint.size() - 2, 2, ":0") == 0)
    return endpoint.substr(0, endpoint.size() - 1) + "*";
  return endpoint;
}

KvEventPublisher::KvEventPublisher(const std::string& endpoint, const std::string& replay_endpoint,
                                   size_t buffer_messages)
    : context_(std::make_unique<zmq::context_t>(1)), buffer_messages_(buffer_messages) {
  pub_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pub);
  pub_->set(zmq::sockopt::sndhwm, 100000);
  pub_->set(zmq::sockopt::linger, 0);
  pub_->bind(zmqBindEndpoint(endpoint));
  endpoint_ = lastEndpoint(*pub_);
  if (replay_endpoint.empty()) return;
  replay_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::router);
  replay_->set(zmq::sockopt::linger, 0);
  replay_->bind(zmqBindEndpoint(replay_endpoint));
  replay_endpoint_ = lastEndpoint(*replay_);
  replay_thread_ = std::thread([this] { serveReplay(); });
}

KvEventPublisher::~KvEventPublisher() {
  stopping_ = true;
  if (replay_thread_.joinable()) replay_thread_.join();
}

void KvEventPublisher::publish(std::string payload) {
  uint64_t sequence = next_sequence_++;
  auto seq_bytes = bigEndian(static_cast<int64_t>(sequence));
  std::array<zmq::const_buffer, 3> frames = {zmq::const_buffer("", 0), zmq::buffer(seq_bytes),
                                             zmq::buffer(payload)};
  if (!zmq::send_multipart(*pub_, frames, zmq::send_flags::dontwait))
    log::warn("engine-sim: KV event message {} dropped (publisher queue full)", sequence);
  std::lock_guard lock(buffer_mutex_);
  buffer_.emplace_back(sequence, std::move(payload));
  if (buffer_.size() > buffer_messages_) buffer_.pop_front();
}

void KvEventPublisher::serveReplay() {
  while (!stopping_) {
    std::array<zmq::pollitem_t, 1> items = {zmq::pollitem_t{replay_->handle(), 0, ZMQ_POLLIN, 0}};
    if (zmq::poll(items.data(), items.size(), kReplayPollInterval) <= 0) continue;
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(*replay_, std::back_inserter(request), zmq::recv_flags::dontwait)) continue;
    if (request.size() != 3 || request[2].size() != 8) {
      log::warn("engine-sim: ignored a replay request of {} frames", request.size());
      continue;
    }
    int64_t start = fromBigEndian(request[2]);
    std::string client = request[0].to_string();
    auto reply = [&](int64_t sequence, std::string_view payload) {
      auto seq_bytes = bigEndian(sequence);
      std::array<zmq::const_buffer, 4> frames = {zmq::buffer(client), zmq::const_buffer("", 0),
                                                 zmq::buffer(seq_bytes), zmq::buffer(payload.data(), payload.size())};
      zmq::send_multipart(*replay_, frames);
    };
    // Copied out so that a long replay never holds up publish().
    std::vector<std::pair<uint64_t, std::string>> wanted;
    {
      std::lock_guard lock(buffer_mutex_);
      for (const auto& entry : buffer_)
        if (static_cast<int64_t>(entry.first) >= start) wanted.push_back(entry);
    }
    for (const auto& [sequence, payload] : wanted) reply(static_cast<int64_t>(sequence), payload);
    reply(-1, "");
  }
}

}  // namespace prefixgate::sim
