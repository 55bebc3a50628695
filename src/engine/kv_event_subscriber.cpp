#include "engine/kv_event_subscriber.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <utility>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "net/listener.h"
#include "util/log.h"

namespace prefixgate::engine {
namespace {

int64_t steadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::span<const uint8_t> bytesOf(const zmq::message_t& frame) {
  return {static_cast<const uint8_t*>(frame.data()), frame.size()};
}

// Notes a socket's disconnections. libzmq reconnects a publisher that went away, but not one it dropped for a
// protocol error, such as a message over ZMQ_MAXMSGSIZE: without this, one such message would end the subscription
// for good (the pod silent until it is edited or the gateway restarts).
class DisconnectWatch : public zmq::monitor_t {
 public:
  bool disconnected = false;
  void on_event_disconnected(const zmq_event_t&, const char*) override { disconnected = true; }
};

}  // namespace

// One publisher: a pod's data-parallel rank (rank r publishes on the pod's kv_events port + r).
struct KvEventSubscriber::Subscription {
  Subscription(const discovery::PodPtr& p, uint32_t r, const KvEventSubscriber::Options& options)
      : pod(p),
        rank(r),
        stream(!p->spec().kv_replay.empty(), options.max_held_messages, options.replay_timeout_ms,
               options.max_held_bytes) {}
  discovery::PodPtr pod;
  uint32_t rank;
  KvEventStream stream;
  std::string events_endpoint, replay_endpoint;
  std::unique_ptr<zmq::socket_t> sub;
  std::unique_ptr<zmq::socket_t> replay;
  // After the sockets: a watch is closed before the socket it watches.
  std::unique_ptr<DisconnectWatch> sub_watch, replay_watch;
  int64_t reopen_at_ms = -1;  // when to open the sockets again after a disconnection; -1: not planned
  int reopen_backoff_ms = KvEventSubscriber::kReconnectMs;
  KvStreamCounters reported;  // what the observer was last told
  KvEventBatch batch;         // reused
};

struct KvEventSubscriber::Impl {
  zmq::context_t context{1};
  std::unordered_map<uint64_t, std::unique_ptr<Subscription>> subscriptions;  // key: pod << 32 | rank
  uint64_t watches = 0;  // numbers the watches' inproc endpoints
};

namespace {
uint64_t subscriptionKey(PodId pod, uint32_t rank) { return (uint64_t{pod.value} << 32) | rank; }
}  // namespace

std::string offsetEndpointPort(const std::string& endpoint, uint32_t offset) {
  if (offset == 0) return endpoint;
  constexpr std::string_view kTcp = "tcp://";
  if (endpoint.compare(0, kTcp.size(), kTcp) != 0) return "";
  const std::string_view address = std::string_view(endpoint).substr(kTcp.size());
  std::string host;
  uint16_t port = 0;
  if (!net::splitHostPort(address, host, port) || port == 0 || port + offset > 65535) return "";
  return endpoint.substr(0, endpoint.rfind(':') + 1) + std::to_string(port + offset);
}

KvEventSubscriber::KvEventSubscriber(discovery::PodRegistry& pods, Sink sink, KvEventObserver* observer,
                                     Options options)
    : pods_(pods), sink_(std::move(sink)), observer_(observer), options_(options), impl_(std::make_unique<Impl>()) {
  pods_.onAdded([this](const discovery::PodPtr& pod) {
    std::lock_guard lock(changes_mutex_);
    added_.push_back(pod);
  });
  pods_.onRemoved([this](PodId id) {
    std::lock_guard lock(changes_mutex_);
    removed_.push_back(id);
  });
  // An edit of the pod's publisher endpoints (the same pod: name and address) subscribes again; its prefix records
  // stay (they are its engine's cache, which did not change), and the new publisher's replay resynchronises them.
  pods_.onChanged([this](const discovery::PodPtr& pod, const discovery::PodSpec& before) {
    const auto& now = pod->spec();
    if (now.kv_events == before.kv_events && now.kv_replay == before.kv_replay &&
        now.data_parallel_size == before.data_parallel_size)
      return;
    std::lock_guard lock(changes_mutex_);
    resubscribe_.push_back(pod->id());
    added_.push_back(pod);
  });
}

KvEventSubscriber::~KvEventSubscriber() { stop(); }

void KvEventSubscriber::start() {
  {
    std::lock_guard lock(changes_mutex_);
    for (const auto& pod : pods_.snapshot()->pods()) added_.push_back(pod);
  }
  thread_ = std::thread([this] { run(); });
}

void KvEventSubscriber::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void KvEventSubscriber::sync() {
  std::vector<discovery::PodPtr> added;
  std::vector<PodId> removed;
  std::vector<PodId> resubscribe;
  {
    std::lock_guard lock(changes_mutex_);
    added.swap(added_);
    removed.swap(removed_);
    resubscribe.swap(resubscribe_);
  }
  for (PodId id : removed) {
    if (closeSubscriptions(id) > 0) log::info("kv events: unsubscribed from pod {}", id.value);
    sink_.removed(id);
  }
  for (PodId id : resubscribe) {
    const size_t closed = closeSubscriptions(id);
    log::info("kv events: pod {}'s publisher was edited: {} subscriptions closed, subscribing again", id.value,
              closed);
  }
  for (const auto& pod : added) {
    const auto& spec = pod->spec();
    if (spec.kv_events.empty() || pod->removed()) continue;
    for (uint32_t rank = 0; rank < std::max<uint32_t>(1, spec.data_parallel_size); ++rank) subscribe(pod, rank);
  }
}

size_t KvEventSubscriber::closeSubscriptions(PodId id) {
  size_t closed = 0;
  for (auto it = impl_->subscriptions.begin(); it != impl_->subscriptions.end();) {
    if (it->first >> 32 == id.value) {
      it = impl_->subscriptions.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  return closed;
}

void KvEventSubscriber::subscribe(const discovery::PodPtr& pod, uint32_t rank) {
  const auto& spec = pod->spec();
  const uint64_t key = subscriptionKey(pod->id(), rank);
  if (impl_->subscriptions.count(key) != 0) return;
  const std::string events = offsetEndpointPort(spec.kv_events, rank);
  const std::string replay = spec.kv_replay.empty() ? "" : offsetEndpointPort(spec.kv_replay, rank);
  if (events.empty() || (!spec.kv_replay.empty() && replay.empty())) {
    log::warn("kv events: pod {}: no endpoint for data-parallel rank {} ({} + {})", spec.name, rank, spec.kv_events,
              rank);
    return;
  }
  {
    auto sub = std::make_unique<Subscription>(pod, rank, options_);
    sub->events_endpoint = events;
    sub->replay_endpoint = replay;
    try {
      openSockets(*sub);
    } catch (const zmq::error_t& e) {
      // A malformed endpoint: this pod routes without events (it looks silent), the others are unaffected.
      log::warn("kv events: pod {}: cannot subscribe to {}: {}", spec.name, events, e.what());
      return;
    }
    log::info("kv events: subscribed to pod {} rank {} at {}{}", spec.name, rank, events,
              replay.empty() ? "" : " (replay " + replay + ")");
    if (sink_.subscribed) sink_.subscribed(*pod);
    Subscription& added_sub = *impl_->subscriptions.emplace(key, std::move(sub)).first->second;
    requestReplay(added_sub, added_sub.stream.subscribed(steadyMs()).replay_from);
  }
}

void KvEventSubscriber::openSockets(Subscription& sub) {
  sub.sub_watch.reset();
  sub.replay_watch.reset();
  const auto open = [this](zmq::socket_type type, const std::string& endpoint, std::unique_ptr<zmq::socket_t>& socket,
                           std::unique_ptr<DisconnectWatch>& watch) {
    socket = std::make_unique<zmq::socket_t>(impl_->context, type);
    socket->set(zmq::sockopt::reconnect_ivl, kReconnectMs);
    socket->set(zmq::sockopt::reconnect_ivl_max, kReconnectMaxMs);
    socket->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxKvEventPayloadBytes));
    socket->set(zmq::sockopt::linger, 0);
    if (type == zmq::socket_type::sub) socket->set(zmq::sockopt::subscribe, "");
    watch = std::make_unique<DisconnectWatch>();
    watch->init(*socket, "inproc://prefixgate-kv-watch-" + std::to_string(++impl_->watches), ZMQ_EVENT_DISCONNECTED);
    socket->connect(endpoint);
  };
  open(zmq::socket_type::sub, sub.events_endpoint, sub.sub, sub.sub_watch);
  if (!sub.replay_endpoint.empty()) open(zmq::socket_type::dealer, sub.replay_endpoint, sub.replay, sub.replay_watch);
}

void KvEventSubscriber::watchConnection(Subscription& sub, int64_t now_ms) {
  bool dropped = false;
  for (DisconnectWatch* watch : {sub.sub_watch.get(), sub.replay_watch.get()}) {
    if (watch == nullptr) continue;
    while (watch->check_event(0)) {
    }
    dropped = std::exchange(watch->disconnected, false) || dropped;
  }
  if (dropped && sub.reopen_at_ms < 0) {
    sub.reopen_at_ms = now_ms + sub.reopen_backoff_ms;
    sub.reopen_backoff_ms = std::min(sub.reopen_backoff_ms * 2, kReconnectMaxMs);
  }
  if (sub.reopen_at_ms < 0 || now_ms < sub.reopen_at_ms) return;
  sub.reopen_at_ms = -1;
  try {
    // What the publisher sends meanwhile is lost: the next message's sequence number shows the gap (replayed).
    openSockets(sub);
    log::info("kv events: pod {} rank {}: the publisher's connection dropped; subscribed again", sub.pod->name(),
              sub.rank);
  } catch (const zmq::error_t& e) {
    log::warn("kv events: pod {} rank {}: cannot subscribe again: {}", sub.pod->name(), sub.rank, e.what());
    sub.reopen_at_ms = now_ms + sub.reopen_backoff_ms;
  }
}

void KvEventSubscriber::run() {
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<Subscription*, bool>> owners;  // (subscription, is the replay socket)
  std::vector<zmq::message_t> frames;
  while (!stopping_) {
    sync();
    items.clear();
    owners.clear();
    for (auto& [id, sub] : impl_->subscriptions) {
      items.push_back(zmq::pollitem_t{sub->sub->handle(), 0, ZMQ_POLLIN, 0});
      owners.emplace_back(sub.get(), false);
      if (sub->replay) {
        items.push_back(zmq::pollitem_t{sub->replay->handle(), 0, ZMQ_POLLIN, 0});
        owners.emplace_back(sub.get(), true);
      }
    }
    if (items.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      continue;
    }
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(kPollMs));
    const int64_t now = steadyMs();
    for (size_t i = 0; i < items.size(); ++i) {
      auto [sub, is_replay] = owners[i];
      // Drain what is there, within the round's budget: one busy or hostile pod cannot starve the others (what is
      // left stays in the socket's queue for the next round, which then starts at once).
      size_t round_bytes = 0;
      for (size_t n = 0; n < options_.round_messages && round_bytes < options_.round_bytes &&
                         (items[i].revents & ZMQ_POLLIN);
           ++n) {
        frames.clear();
        zmq::socket_t& socket = is_replay ? *sub->replay : *sub->sub;
        if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
        std::vector<std::span<const uint8_t>> spans;
        for (const auto& f : frames) {
          spans.push_back(bytesOf(f));
          round_bytes += f.size();
        }
        auto message = is_replay ? splitKvReplayReply(spans) : splitKvEventMessage(spans);
        if (!message) {
          if (observer_) observer_->decodeFailed(*sub->pod, "bad_frames");
          continue;
        }
        if (is_replay) {
          onReplay(*sub, message->sequence, message->payload, now);
        } else {
          onLive(*sub, message->sequence, message->payload, now);
        }
      }
      if (sub->stream.replayTimedOut(now)) endReplay(*sub, false);
      report(*sub);
    }
    for (auto& [key, sub] : impl_->subscriptions) watchConnection(*sub, now);
  }
  impl_->subscriptions.clear();
}

void KvEventSubscriber::onLive(Subscription& sub, int64_t sequence, std::span<const uint8_t> payload,
                               int64_t now_ms) {
  sub.reopen_backoff_ms = kReconnectMs;  // the publisher is heard again
  KvEventStream::Action action = sub.stream.live(sequence, now_ms);
  if (action.reset) sink_.reset(*sub.pod);
  if (action.apply) apply(sub, payload);
  if (action.hold) sub.stream.hold(sequence, payload);
  requestReplay(sub, action.replay_from);
}

void KvEventSubscriber::requestReplay(Subscription& sub, std::optional<int64_t> from) {
  if (!from || !sub.replay) return;
  auto start = encodeKvSequence(*from);
  std::array<zmq::const_buffer, 2> request = {zmq::const_buffer("", 0), zmq::buffer(start)};
  if (!zmq::send_multipart(*sub.replay, request, zmq::send_flags::dontwait)) endReplay(sub, false);
}

void KvEventSubscriber::onReplay(Subscription& sub, int64_t sequence, std::span<const uint8_t> payload,
                                 int64_t now_ms) {
  if (sequence == kKvReplayEndSequence) {
    endReplay(sub, true);
    return;
  }
  KvEventStream::Action action = sub.stream.replayed(sequence);
  if (action.reset) sink_.reset(*sub.pod);
  if (action.apply) apply(sub, payload);
}

void KvEventSubscriber::endReplay(Subscription& sub, bool complete) {
  KvEventStream::Drain drain = sub.stream.replayEnded(complete);
  if (drain.reset) sink_.reset(*sub.pod);
  for (const auto& [sequence, payload] : drain.messages) apply(sub, payload);
  if (!complete) log::warn("kv events: pod {}: replay timed out; its blocks were forgotten", sub.pod->name());
}

void KvEventSubscriber::apply(Subscription& sub, std::span<const uint8_t> payload) {
  std::string error;
  if (!decodeKvEventBatch(payload, sub.batch, error)) {
    if (observer_) observer_->decodeFailed(*sub.pod, error);
    return;
  }
  // The rank's own view: the publisher of rank r says so, and an older one that leaves it out is known by its port.
  if (!sub.batch.data_parallel_rank) sub.batch.data_parallel_rank = sub.rank;
  sink_.apply(*sub.pod, sub.batch);
  if (observer_) observer_->messageApplied(*sub.pod, sub.batch, std::max(0.0, unixSeconds() - sub.batch.timestamp));
}

void KvEventSubscriber::report(Subscription& sub) {
  if (!observer_) return;
  const KvStreamCounters& now = sub.stream.counters();
  KvStreamCounters delta{now.gaps - sub.reported.gaps,
                         now.restarts - sub.reported.restarts,
                         now.replays - sub.reported.replays,
                         now.replay_failures - sub.reported.replay_failures,
                         now.resets - sub.reported.resets,
                         now.late_joins - sub.reported.late_joins,
                         now.held_dropped - sub.reported.held_dropped};
  if (delta.gaps || delta.restarts || delta.replays || delta.replay_failures || delta.resets || delta.late_joins ||
      delta.held_dropped)
    observer_->streamCounters(*sub.pod, delta);
  sub.reported = now;
}

}  // namespace prefixgate::engine
