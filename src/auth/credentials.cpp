#include "auth/credentials.h"

#include "util/log.h"

namespace prefixgate::auth {

std::string parseAdminToken(const std::string& text, const std::string& source, std::vector<std::string>& problems) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string::npos) {
    problems.push_back(source + ": the admin token file is empty");
    return {};
  }
  return text.substr(begin, text.find_last_not_of(kSpace) - begin + 1);
}

void checkFiles(const config::AuthConfig& config, std::vector<std::string>& problems,
                const std::vector<std::string>& priority_classes) {
  Credentials(config, [] { return int64_t{0}; }, priority_classes).load(problems);
}

Credentials::Credentials(config::AuthConfig config, Clock clock, std::vector<std::string> priority_classes)
    : config_(std::move(config)), priority_classes_(std::move(priority_classes)), clock_(std::move(clock)) {}

bool Credentials::load(std::vector<std::string>& problems) {
  const size_t before = problems.size();
  if (!config_.api_keys_file.empty()) {
    if (!util::readFileText(config_.api_keys_file, keys_text_)) {
      problems.push_back(config_.api_keys_file + ": cannot read the API keys file (auth.api_keys_file)");
    } else {
      std::vector<std::string> found;
      auto specs = parseApiKeysFile(keys_text_, config_.api_keys_file, found, priority_classes_);
      if (found.empty()) api_keys_.store(std::make_shared<const ApiKeySet>(std::move(specs), nullptr, clock_()));
      problems.insert(problems.end(), found.begin(), found.end());
    }
  }
  if (!config_.admin_token_file.empty()) {
    if (!util::readFileText(config_.admin_token_file, token_text_)) {
      problems.push_back(config_.admin_token_file + ": cannot read the admin token file (auth.admin_token_file)");
    } else {
      std::string token = parseAdminToken(token_text_, config_.admin_token_file, problems);
      if (!token.empty()) admin_token_.store(std::make_shared<const std::string>(std::move(token)));
    }
  }
  return problems.size() == before;
}

std::vector<std::unique_ptr<util::PolledFile>> Credentials::watch(boost::asio::io_context& io) {
  const std::chrono::milliseconds interval(config_.file_poll_interval_ms);
  std::vector<std::unique_ptr<util::PolledFile>> watchers;
  if (!config_.api_keys_file.empty()) {
    watchers.push_back(std::make_unique<util::PolledFile>(io, config_.api_keys_file, interval,
                                                          [this](const std::string& text) { applyKeys(text); }));
    watchers.back()->start(keys_text_);
  }
  if (!config_.admin_token_file.empty()) {
    watchers.push_back(std::make_unique<util::PolledFile>(io, config_.admin_token_file, interval,
                                                          [this](const std::string& text) { applyAdminToken(text); }));
    watchers.back()->start(token_text_);
  }
  return watchers;
}

void Credentials::applyKeys(const std::string& text) {
  std::vector<std::string> problems;
  auto specs = parseApiKeysFile(text, config_.api_keys_file, problems, priority_classes_);
  if (!problems.empty()) {
    for (const auto& p : problems) log::warn("API keys file ignored, keeping the keys in force: {}", p);
    return;
  }
  auto next = std::make_shared<const ApiKeySet>(std::move(specs), apiKeys().get(), clock_());
  log::info("API keys file {} changed: {} keys", config_.api_keys_file, next->keys().size());
  api_keys_.store(std::move(next), std::memory_order_release);
}

void Credentials::applyAdminToken(const std::string& text) {
  std::vector<std::string> problems;
  std::string token = parseAdminToken(text, config_.admin_token_file, problems);
  if (!problems.empty()) {
    for (const auto& p : problems) log::warn("admin token file ignored, keeping the token in force: {}", p);
    return;
  }
  log::info("admin token file {} changed: new token in force", config_.admin_token_file);
  admin_token_.store(std::make_shared<const std::string>(std::move(token)), std::memory_order_release);
}

}  // namespace prefixgate::auth
