#pragma once
// The simulator's HTTP/1.1 server (Boost.Beast, one event loop): the OpenAI endpoints backed by the Engine,
// /health, /metrics, /tokenize and the test aids under /sim/. The only translation unit that includes Beast.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine_sim/sim_config.h"

namespace prefixgate::sim {

struct ServerState;

class Server {
 public:
  explicit Server(SimConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the KV event sockets when configured (throws zmq::error_t when it cannot).
  // run(): binds host:port (port 0 = a free one), calls on_listening with the bound address, then serves until SIGINT or
  // SIGTERM. Returns the process exit code. Throws boost::system::system_error when it cannot bind (start-up).
  int run(const std::function<void(const std::string& host, uint16_t port)>& on_listening);

  // The bound KV event endpoints ("tcp://0.0.0.0:5557"), "" when not publishing.
  std::string kvEventsEndpoint() const;
  std::string kvReplayEndpoint() const;

 private:
  std::unique_ptr<ServerState> state_;
};

}  // namespace prefixgate::sim
