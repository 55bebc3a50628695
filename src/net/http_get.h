#pragma once
// HTTP/1.1 exchanges for background tasks (health checks, metrics scraping, the tracing exporter): one-shot on a
// fresh connection, or on a connection kept alive between a task's rounds (KeptConnection).
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace prefixgate::net {

struct GetResult {
  int status = 0;     // 0 when no response arrived
  std::string error;  // why, when status is 0
  bool timed_out = false;  // the exchange ran past its timeout (error says at which step)
  std::string body;
};

// One request with a body (`content_type`; an empty body is sent as none), as httpGet; the tracing exporter's POST.
boost::asio::awaitable<GetResult> httpRequest(boost::beast::http::verb method, std::string host, uint16_t port,
                                              std::string target, std::string body, std::string_view content_type,
                                              std::chrono::milliseconds timeout, size_t max_body_bytes);

// Never throws; the whole exchange (connect included) must finish within `timeout`.
boost::asio::awaitable<GetResult> httpGet(std::string host, uint16_t port, std::string target,
                                          std::chrono::milliseconds timeout, size_t max_body_bytes = 8 << 20);

// Whether an idle connection's socket can carry a request: nothing to read (the peer neither closed it nor sent
// anything unasked). A one-byte non-blocking peek: 0 = the peer closed it (FIN), a byte = it sent something unasked
// (it would be read as the next request's response), an error other than "would block" = reset.
bool idleSocketOpen(int fd);

// A connection to one server kept alive between the GETs of a task that asks it again and again (a pod's /metrics
// every scrape interval, its /health every check): a fresh connection per round costs the server and the gateway a
// connect, a TIME_WAIT socket and about four more system calls each (docs/benchmarks.md, issue 29). Reused while the
// server keeps it open: checked before each use (idleSocketOpen), dropped when the server's answer says it closes
// (Connection: close, HTTP/1.0) or after any failure. A GET on a reused connection that fails before any answer
// (the server closed it as the request went out) is tried once more on a fresh one: GETs are idempotent.
// Not thread-safe: one exchange at a time (a task's rounds are sequential), on the io_context of its first use.
class KeptConnection {
 public:
  KeptConnection();
  ~KeptConnection();
  KeptConnection(const KeptConnection&) = delete;
  KeptConnection& operator=(const KeptConnection&) = delete;

  // As httpGet, to host:port (a connection to another address is closed first).
  boost::asio::awaitable<GetResult> get(std::string host, uint16_t port, std::string target,
                                        std::chrono::milliseconds timeout, size_t max_body_bytes = 8 << 20);
  // Connections opened, and GETs sent on a reused one (for tests and views).
  uint64_t connects() const { return connects_; }
  uint64_t reuses() const { return reuses_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  uint64_t connects_ = 0;
  uint64_t reuses_ = 0;
};

// Per pod (by id), a background task's KeptConnection, made on first use. Not thread-safe: the task's io thread.
class KeptConnections {
 public:
  std::shared_ptr<KeptConnection> of(uint32_t pod) {
    std::shared_ptr<KeptConnection>& connection = by_pod_[pod];
    if (!connection) connection = std::make_shared<KeptConnection>();
    return connection;
  }
  // The pod left: its connection closes (at once, or when an exchange in flight that holds it ends).
  void forget(uint32_t pod) { by_pod_.erase(pod); }
  size_t size() const { return by_pod_.size(); }

 private:
  std::unordered_map<uint32_t, std::shared_ptr<KeptConnection>> by_pod_;
};

}  // namespace prefixgate::net
