#pragma once
// The gateway's credentials in force: the client API key set (auth.api_keys_file) and the admin token
// (auth.admin_token_file). Each is an immutable snapshot swapped atomically; event loops and the control thread
// read them without a lock. The files are polled on the control thread: a valid new version replaces the old one,
// a broken one is logged (file, entry, field) and ignored, so the last good credentials stay in force.
// Thread-safe readers; load() and the file callbacks run on one thread (start-up, then the control thread).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "auth/api_keys.h"
#include "config/config.h"
#include "util/polled_file.h"

namespace prefixgate::auth {

// The token of an admin token file: its text without surrounding white space (Secrets often end in a newline).
// An empty token is a problem naming the file.
std::string parseAdminToken(const std::string& text, const std::string& source, std::vector<std::string>& problems);

// Reads and checks the files `config` names (for `--check`), appending every problem.
// `priority_classes`: flow control's class names when it is on (a key's priority_class must name one), else empty.
void checkFiles(const config::AuthConfig& config, std::vector<std::string>& problems,
                const std::vector<std::string>& priority_classes = {});

class Credentials {
 public:
  using Clock = std::function<int64_t()>;  // milliseconds, for the rate-limit windows
  Credentials(config::AuthConfig config, Clock clock, std::vector<std::string> priority_classes = {});

  // Loads the configured files; false (with the problems) when one is missing or invalid.
  bool load(std::vector<std::string>& problems);
  // Pollers of the configured files on `io` (the control thread), started; the caller keeps them while `io` lives
  // (and stops them on its thread). They call back into this object, which must outlive them.
  std::vector<std::unique_ptr<util::PolledFile>> watch(boost::asio::io_context& io);

  // The keys in force; null when auth.api_keys_file is not set (no key needed).
  std::shared_ptr<const ApiKeySet> apiKeys() const { return api_keys_.load(std::memory_order_acquire); }
  // The admin token in force; null when auth.admin_token_file is not set.
  std::shared_ptr<const std::string> adminToken() const { return admin_token_.load(std::memory_order_acquire); }
  bool forwardAuthorization() const { return config_.forward_authorization; }
  int64_t nowMs() const { return clock_(); }

 private:
  void applyKeys(const std::string& text);
  void applyAdminToken(const std::string& text);
  config::AuthConfig config_;
  std::vector<std::string> priority_classes_;  // checked against each key's priority_class (see checkFiles)
  Clock clock_;
  std::atomic<std::shared_ptr<const ApiKeySet>> api_keys_;
  std::atomic<std::shared_ptr<const std::string>> admin_token_;
  std::string keys_text_, token_text_;  // what load() read: the watchers start from it
};

}  // namespace prefixgate::auth
