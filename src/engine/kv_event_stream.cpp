#include "engine/kv_event_stream.h"

namespace prefixgate::engine {

KvEventStream::KvEventStream(bool can_replay, size_t max_held, int64_t replay_timeout_ms, size_t max_held_bytes)
    : can_replay_(can_replay),
      max_held_(max_held),
      replay_timeout_ms_(replay_timeout_ms),
      max_held_bytes_(max_held_bytes) {}

KvEventStream::Action KvEventStream::startReplay(int64_t from, int64_t now_ms, bool reset) {
  state_ = State::kReplaying;
  next_ = from;
  replay_deadline_ms_ = now_ms + replay_timeout_ms_;
  replay_reset_ = reset;
  overflowed_ = false;
  ++counters_.replays;
  if (reset) ++counters_.resets;
  Action action;
  action.reset = reset;
  action.replay_from = from;
  action.hold = true;
  return action;
}

KvEventStream::Action KvEventStream::subscribed(int64_t now_ms) {
  if (!can_replay_ || state_ != State::kJoining) return Action{};
  Action action = startReplay(0, now_ms, false);
  action.hold = false;  // there is no message to hold
  return action;
}

KvEventStream::Action KvEventStream::live(int64_t sequence, int64_t now_ms) {
  Action action;
  switch (state_) {
    case State::kJoining:
      if (sequence == 0 || !can_replay_) {
        if (sequence != 0) ++counters_.late_joins;
        state_ = State::kLive;
        next_ = sequence + 1;
        action.apply = true;
        return action;
      }
      return startReplay(0, now_ms, false);  // the history before we joined
    case State::kLive:
      if (sequence == next_) {
        ++next_;
        action.apply = true;
        return action;
      }
      if (sequence < next_) {
        // The publisher restarted: its engine's cache is new, and what it sent before this message we missed.
        ++counters_.restarts;
        if (can_replay_ && sequence > 0) return startReplay(0, now_ms, true);
        ++counters_.resets;
        next_ = sequence + 1;
        action.reset = true;
        action.apply = true;
        return action;
      }
      ++counters_.gaps;
      if (can_replay_) return startReplay(next_, now_ms, false);
      ++counters_.resets;
      next_ = sequence + 1;
      action.reset = true;
      action.apply = true;
      return action;
    case State::kReplaying:
      action.hold = true;
      return action;
  }
  return action;
}

void KvEventStream::hold(int64_t sequence, std::span<const uint8_t> payload) {
  // Dropping any held message makes the replay fail (the pod's blocks are forgotten), so the oldest go first.
  const bool fits = payload.size() <= max_held_bytes_ && max_held_ > 0;
  while (fits && !held_.empty() && (held_.size() >= max_held_ || held_bytes_ + payload.size() > max_held_bytes_)) {
    held_bytes_ -= held_.front().second.size();
    held_.pop_front();
    overflowed_ = true;
    ++counters_.held_dropped;
  }
  if (!fits) {
    overflowed_ = true;
    ++counters_.held_dropped;
    return;
  }
  held_bytes_ += payload.size();
  held_.emplace_back(sequence, std::vector<uint8_t>(payload.begin(), payload.end()));
}

KvEventStream::Action KvEventStream::replayed(int64_t sequence) {
  Action action;
  if (state_ != State::kReplaying || sequence < next_) return action;  // late or duplicate: nothing to do
  if (sequence > next_) {
    // The publisher's buffer no longer reaches back to what we miss: rebuild from here.
    if (!replay_reset_) {
      replay_reset_ = true;
      action.reset = true;
      ++counters_.resets;
      ++counters_.replay_failures;
    }
  }
  next_ = sequence + 1;
  action.apply = true;
  return action;
}

KvEventStream::Drain KvEventStream::replayEnded(bool complete) {
  Drain drain;
  if (state_ != State::kReplaying) return drain;
  state_ = State::kLive;
  bool failed = !complete || overflowed_;
  // Held messages continue where the replay stopped, unless something between them is missing.
  bool gap = !held_.empty() && held_.front().first > next_ && next_ >= 0;
  if ((failed || gap) && !replay_reset_) {
    drain.reset = true;
    ++counters_.resets;
    ++counters_.replay_failures;
  }
  for (auto& [sequence, payload] : held_) {
    if (sequence < next_ && !drain.reset) continue;  // already replayed
    next_ = sequence + 1;
    drain.messages.emplace_back(sequence, std::move(payload));
  }
  held_.clear();
  held_bytes_ = 0;
  if (next_ < 0) next_ = 0;
  return drain;
}

}  // namespace prefixgate::engine
