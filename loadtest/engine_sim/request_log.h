#pragma once
// The last requests the engine received, for integration tests (GET /sim/requests): which headers reached the
// engine, how much of the prompt was cached, and whether a cancelled stream really stopped. Pure and
// single-threaded (the server touches it from its one event loop).
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace prefixgate::sim {

struct RequestRecord {
  uint64_t id = 0;  // assigned by RequestLog::add
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // lowercased name -> value (repeated headers joined by ", ")
  uint64_t body_bytes = 0;
  std::string model;
  bool stream = false;
  int status = 0;  // HTTP status sent; 0 until the response head is written
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t completion_tokens = 0;  // output tokens generated so far
  bool completed = false;          // the whole response was written
  bool cancelled = false;          // the client went away first; generation stopped
  std::string kv_role_leg;         // "prefill" (do_remote_decode), "decode" (do_remote_prefill) or ""
  uint64_t kv_pulled_tokens = 0;   // decode leg: prompt tokens whose KV it pulled instead of computing
  double kv_transfer_ms = 0;       // decode leg: the pull's simulated milliseconds (before --time-scale)
};

class RequestLog {
 public:
  static constexpr size_t kDefaultCapacity = 100;
  explicit RequestLog(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // Keeps the record (dropping the oldest beyond capacity), assigns its id and returns it for the session to fill
  // in as the request progresses; the session's pointer stays valid after the log has dropped the record.
  std::shared_ptr<RequestRecord> add(RequestRecord record);
  void clear() { records_.clear(); }
  size_t size() const { return records_.size(); }

  // Oldest first: [{"id","method","path","headers","body_bytes","model","stream","status","prompt_tokens",
  // "cached_tokens","completion_tokens","completed","cancelled","kv_role_leg","kv_pulled_tokens","kv_transfer_ms"}].
  nlohmann::json toJson() const;

 private:
  size_t capacity_;
  uint64_t next_id_ = 1;
  std::deque<std::shared_ptr<RequestRecord>> records_;
};

}  // namespace prefixgate::sim
