#pragma once
// One pod's stream of KV event messages, in order (pure: no sockets, no clock; the caller passes the time).
// vLLM numbers its messages from 0, +1 each. The subscriber feeds every live message and every replayed one
// through this and does what it says:
//   - in order: apply the message;
//   - a gap (a message was lost: slow subscriber, network): ask the pod's replay socket for the missing ones
//     and hold live messages meanwhile; without a replay socket, forget the pod's blocks and go on from here;
//   - the first message after subscribing is not number 0: fetch the history through replay (the blocks the
//     engine stored before the gateway started), or, without replay, go on with a partial view;
//   - a number going back (the publisher restarted): forget the pod's blocks (the engine's cache restarted
//     empty), and fetch what the new publisher sent before this message through replay;
//   - a replay that cannot go back far enough (the publisher's buffer is 10,000 messages), that times out, or
//     too many held live messages (by count or bytes): forget the pod's blocks and rebuild from the messages
//     there are.
// Forgetting is safe: the index then under-predicts until new events arrive, never over-predicts.
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace prefixgate::engine {

struct KvStreamCounters {
  uint64_t gaps = 0;            // live messages that skipped numbers
  uint64_t restarts = 0;        // numbers that went back
  uint64_t replays = 0;         // replay requests sent
  uint64_t replay_failures = 0; // replays that could not fill the gap (too far back, timeout, overflow)
  uint64_t resets = 0;          // times the pod's blocks were forgotten
  uint64_t late_joins = 0;      // subscriptions whose history could not be fetched
  uint64_t held_dropped = 0;    // held live messages dropped to stay within max_held / max_held_bytes
};

class KvEventStream {
 public:
  // `can_replay`: the pod has a replay socket. `max_held`, `max_held_bytes`: live messages held during a replay
  // at most, and their payloads' bytes at most (a message larger than that is not held at all).
  KvEventStream(bool can_replay, size_t max_held, int64_t replay_timeout_ms,
                size_t max_held_bytes = std::numeric_limits<size_t>::max());

  struct Action {
    bool reset = false;                    // first forget every block of the pod
    bool apply = false;                    // then apply this message
    std::optional<int64_t> replay_from;    // then send a replay request from this sequence
    bool hold = false;                     // (instead of applying) hold the message: pass it to hold()
  };
  // The subscription just started: with a replay socket, fetch everything the publisher still holds (the blocks
  // its engine stored before the gateway started) at once, without waiting for the next live message.
  Action subscribed(int64_t now_ms);
  // A live message numbered `sequence` arrived at now_ms.
  Action live(int64_t sequence, int64_t now_ms);
  // Keeps a live message the last live() said to hold; the oldest held ones make room when a bound is reached.
  void hold(int64_t sequence, std::span<const uint8_t> payload);
  // Payload bytes held now.
  size_t heldBytes() const { return held_bytes_; }

  // A replayed message (not the end marker) arrived. Only `reset` and `apply` are ever set.
  Action replayed(int64_t sequence);

  struct Drain {
    bool reset = false;  // forget the pod's blocks before applying `messages`
    std::vector<std::pair<int64_t, std::vector<uint8_t>>> messages;  // held messages to apply now, in order
  };
  // The replay ended: its end marker arrived (complete) or it timed out (not complete).
  Drain replayEnded(bool complete);

  bool replaying() const { return state_ == State::kReplaying; }
  // Whether a replay in progress has run out of time.
  bool replayTimedOut(int64_t now_ms) const { return replaying() && now_ms >= replay_deadline_ms_; }
  // The next sequence expected (-1 before the first message).
  int64_t expected() const { return next_; }
  const KvStreamCounters& counters() const { return counters_; }

 private:
  enum class State { kJoining, kLive, kReplaying };
  Action startReplay(int64_t from, int64_t now_ms, bool reset);

  bool can_replay_;
  size_t max_held_;
  int64_t replay_timeout_ms_;
  size_t max_held_bytes_;
  size_t held_bytes_ = 0;
  State state_ = State::kJoining;
  int64_t next_ = -1;
  int64_t replay_deadline_ms_ = 0;
  bool replay_reset_ = false;  // the replay in progress already forgot the pod's blocks
  bool overflowed_ = false;    // held messages were dropped during this replay
  std::deque<std::pair<int64_t, std::vector<uint8_t>>> held_;
  KvStreamCounters counters_;
};

}  // namespace prefixgate::engine
