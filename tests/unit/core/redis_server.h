#pragma once
// A real redis-server for tests: started on a free loopback port with persistence off, polled until it answers,
// killed with SIGKILL (a crash, as a replica would see one) and restartable on the same port.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace prefixgate::testing {

class RedisServer {
 public:
  struct Options {
    std::string requirepass;  // empty: no password
  };
  static constexpr const char* kBinary = "/usr/bin/redis-server";

  RedisServer() = default;
  explicit RedisServer(Options options) : options_(std::move(options)) {}
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  ~RedisServer() { stop(); }

  // Starts on a free port (another process may take the port between the probe and redis's bind: retried).
  // Returns an error, or empty once the server answers PING.
  std::string start() {
    std::string error;
    for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
      port_ = freePort();
      error = restart();
      if (error.empty()) return error;
    }
    return error;
  }
  // Starts again on the same port (after stop()).
  std::string restart() {
    stop();
    const std::string port = std::to_string(port_);
    std::vector<std::string> args = {kBinary, "--port", port, "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", "/tmp", "--enable-debug-command", "local",
                                     "--loglevel", "warning"};
    if (!options_.requirepass.empty()) args.insert(args.end(), {"--requirepass", options_.requirepass});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) return "fork failed";
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test binary that crashed
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      execv(kBinary, argv.data());
      _exit(127);
    }
    // Poll until it answers (bounded: kStartPolls x kPollInterval).
    for (int i = 0; i < kStartPolls; ++i) {
      if (answers()) return {};
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return std::string(kBinary) + " exited at start (status " + std::to_string(status) + ") on port " + port;
      }
      std::this_thread::sleep_for(kPollInterval);
    }
    stop();
    return std::string(kBinary) + " did not answer on port " + port;
  }
  // SIGKILL, then reaps it.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  uint16_t port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  static constexpr int kStartAttempts = 3;
  static constexpr int kStartPolls = 200;
  static constexpr std::chrono::milliseconds kPollInterval{25};

  static uint16_t freePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
  }
  // Any reply to PING (+PONG, or -NOAUTH with requirepass) means it serves.
  bool answers() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{0, 200'000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port_);
    char reply = 0;
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                    send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6 && recv(fd, &reply, 1, 0) == 1 &&
                    (reply == '+' || reply == '-');
    ::close(fd);
    return ok;
  }

  Options options_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace prefixgate::testing
