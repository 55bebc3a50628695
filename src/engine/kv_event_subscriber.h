#pragma once
// KV event sync's transport: one ZMQ SUB socket per pod that has a `kv_events` endpoint (and a DEALER socket for
// its `kv_replay` endpoint), all served by one thread of their own, so no event loop ever waits on an engine.
// Each message is put in order by the pod's KvEventStream (gaps replayed, restarts and lost history forgotten),
// decoded (decodeKvEventBatch) and handed to the sink (the KvEventIndex), on this thread.
//
// Pods come and go with the pod set (PodRegistry listeners): a new pod is subscribed at once, a removed one is
// closed and forgotten. ZMQ reconnects a lost publisher by itself, with back-off (kReconnect*), and the publisher's
// restart shows as its sequence numbers going back. A connection libzmq dropped and will not reconnect (a message
// over kMaxKvEventPayloadBytes is a protocol error) is opened again here, with the same back-off.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "discovery/pod_set.h"
#include "engine/kv_event_decoder.h"
#include "engine/kv_event_stream.h"

namespace prefixgate::engine {

// What the subscriber reports, for metrics and /debug/pods.
class KvEventObserver {
 public:
  virtual ~KvEventObserver() = default;
  virtual void messageApplied(const discovery::PodState& pod, const KvEventBatch& batch, double lag_seconds) = 0;
  virtual void decodeFailed(const discovery::PodState& pod, std::string_view reason) = 0;
  // Counts that moved since the last call (gaps, replays, resets...), from the pod's KvEventStream.
  virtual void streamCounters(const discovery::PodState& pod, const KvStreamCounters& delta) = 0;
};

// vLLM's rule for data-parallel engines: rank r binds the configured port + r. "" when the endpoint has no TCP port
// to offset (or it would pass 65535).
std::string offsetEndpointPort(const std::string& endpoint, uint32_t offset);

class KvEventSubscriber {
 public:
  struct Options {
    int64_t replay_timeout_ms = 2000;
    size_t max_held_messages = 10000;    // live messages held while a replay runs
    size_t max_held_bytes = 64u << 20;   // and their bytes, per publisher
    // What one socket may have read per polling round (at least one message), so that one publisher's flood or
    // large messages delay the others' events by a round, not by its whole backlog.
    size_t round_messages = 256;
    size_t round_bytes = 1u << 20;
  };
  // What to do with each pod's decoded batches and resets; called on the subscriber's thread only.
  struct Sink {
    std::function<void(discovery::PodState& pod, const KvEventBatch& batch)> apply;
    std::function<void(discovery::PodState& pod)> reset;         // forget the pod's blocks
    std::function<void(PodId pod)> removed;                       // the pod left the set
    std::function<void(discovery::PodState& pod)> subscribed;    // a subscription started
  };

  KvEventSubscriber(discovery::PodRegistry& pods, Sink sink, KvEventObserver* observer, Options options);
  ~KvEventSubscriber();
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // Subscribes to the pods of the current set and starts the thread. Call once.
  void start();
  // Stops the thread and closes every socket. Idempotent.
  void stop();

  // ZMQ's reconnection back-off for a publisher that went away.
  static constexpr int kReconnectMs = 100;
  static constexpr int kReconnectMaxMs = 5000;
  static constexpr int kPollMs = 50;

 private:
  struct Subscription;
  struct Impl;

  void run();
  void sync();  // applies pod additions and removals queued by the registry listeners
  void subscribe(const discovery::PodPtr& pod, uint32_t rank);
  // Opens the subscription's sockets (again: a socket dropped for a protocol error is not reconnected by libzmq).
  void openSockets(Subscription& sub);
  // Opens the sockets again, with back-off, once a watch saw a disconnection.
  void watchConnection(Subscription& sub, int64_t now_ms);
  void onLive(Subscription& sub, int64_t sequence, std::span<const uint8_t> payload, int64_t now_ms);
  void onReplay(Subscription& sub, int64_t sequence, std::span<const uint8_t> payload, int64_t now_ms);
  void endReplay(Subscription& sub, bool complete);
  void requestReplay(Subscription& sub, std::optional<int64_t> from);
  void apply(Subscription& sub, std::span<const uint8_t> payload);
  void report(Subscription& sub);
  // Closes the pod's subscriptions (every rank); returns how many.
  size_t closeSubscriptions(PodId id);

  discovery::PodRegistry& pods_;
  Sink sink_;
  KvEventObserver* observer_;
  Options options_;
  std::unique_ptr<Impl> impl_;
  std::mutex changes_mutex_;
  std::vector<discovery::PodPtr> added_;  // guarded by changes_mutex_
  std::vector<PodId> removed_;            // guarded by changes_mutex_
  std::vector<PodId> resubscribe_;        // guarded by changes_mutex_: pods whose KV event endpoints were edited
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace prefixgate::engine
