#include "auth/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "config/yaml_reader.h"

namespace prefixgate::auth {
namespace {

// "keys[3] (team-b)": the entry's index, and its name when it has a readable one, for messages
// ("keys[3] (team-b).key: ...").
std::string entryPath(const YAML::Node& entry, size_t index) {
  std::string path = "keys[" + std::to_string(index) + "]";
  if (entry.IsMap() && entry["name"] && entry["name"].IsScalar() && !entry["name"].Scalar().empty())
    path += " (" + entry["name"].Scalar() + ")";
  return path;
}

void checkEntry(config::YamlReader& r, const ApiKeySpec& spec, const std::vector<std::string>& classes) {
  if (spec.name.empty()) r.problem("name", "required (shown in logs and metrics)");
  if (spec.key.empty()) r.problem("key", "required and must not be empty");
  if (spec.requests_per_minute && *spec.requests_per_minute == 0)
    r.problem("requests_per_minute", "must be greater than 0 (omit it for no limit)");
  if (spec.tokens_per_minute && *spec.tokens_per_minute == 0)
    r.problem("tokens_per_minute", "must be greater than 0 (omit it for no limit)");
  for (const std::string& model : spec.models)
    if (model.empty()) r.problem("models", "a model name must not be empty");
  if (!spec.priority_class.empty() && !classes.empty() &&
      std::find(classes.begin(), classes.end(), spec.priority_class) == classes.end()) {
    std::string names;
    for (const std::string& c : classes) names += (names.empty() ? "" : ", ") + c;
    r.problem("priority_class", "unknown class '" + spec.priority_class + "' (flow_control.classes: " + names + ")");
  }
  if (spec.ttft_slo_ms && (*spec.ttft_slo_ms == 0 || *spec.ttft_slo_ms > UINT32_MAX))
    r.problem("ttft_slo_ms", "must be from 1 to 4294967295 (omit it for none)");
}

}  // namespace

std::vector<ApiKeySpec> parseApiKeysFile(const std::string& text, const std::string& source,
                                         std::vector<std::string>& problems,
                                         const std::vector<std::string>& priority_classes) {
  std::vector<ApiKeySpec> specs;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    problems.push_back(source + ": line " + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
    return specs;
  }
  if (!root.IsMap() || !root["keys"]) {
    problems.push_back(source + ": keys: required (a list of API keys)");
    return specs;
  }
  config::YamlReader top(root, source, "", problems);
  top.allow("keys");
  top.finish();
  YAML::Node list = root["keys"];
  if (list.IsNull()) return specs;  // no keys: every request is refused (401)
  if (!list.IsSequence()) {
    problems.push_back(source + ": keys: expected a list of API keys");
    return specs;
  }
  std::map<std::string, std::string> names, secrets;  // -> the path of the entry that has it first
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = entryPath(list[i], i);
    config::YamlReader r(list[i], source, path, problems);
    ApiKeySpec spec;
    r.read("name", spec.name);
    r.read("key", spec.key);
    r.read("models", spec.models);
    r.read("requests_per_minute", spec.requests_per_minute);
    r.read("tokens_per_minute", spec.tokens_per_minute);
    r.read("priority_class", spec.priority_class);
    r.read("ttft_slo_ms", spec.ttft_slo_ms);
    r.finish();
    checkEntry(r, spec, priority_classes);
    if (!spec.name.empty() && !names.emplace(spec.name, path).second)
      r.problem("name", "duplicate name (also " + names[spec.name] + ")");
    // The message names the other entry, never the key.
    if (!spec.key.empty() && !secrets.emplace(spec.key, path).second)
      r.problem("key", "the same key as " + secrets[spec.key] + " (keys must be unique)");
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::vector<ApiKeySpec> loadApiKeysFile(const std::string& path, std::vector<std::string>& problems,
                                        const std::vector<std::string>& priority_classes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problems.push_back(path + ": cannot read the API keys file");
    return {};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parseApiKeysFile(ss.str(), path, problems, priority_classes);
}

bool constantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  // Every byte position up to the longer length is visited, and differences are accumulated, not branched on.
  unsigned diff = a.size() ^ b.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  // Through a volatile, so the compiler cannot turn the loop into an early-exit comparison.
  volatile unsigned result = diff;
  return result == 0;
}

bool ApiKey::allows(std::string_view model) const {
  return models.empty() || std::find(models.begin(), models.end(), model) != models.end();
}

ApiKeySet::ApiKeySet(std::vector<ApiKeySpec> specs, const ApiKeySet* previous, int64_t now_ms) {
  for (ApiKeySpec& spec : specs) {
    auto key = std::make_shared<ApiKey>();
    if (previous) {
      for (const auto& old : previous->keys_) {
        if (old->name != spec.name) continue;
        key->limiter = old->limiter;
        key->limiter->setLimits(spec.requests_per_minute, spec.tokens_per_minute, now_ms);
      }
    }
    if (!key->limiter)
      key->limiter = std::make_shared<KeyLimiter>(spec.requests_per_minute, spec.tokens_per_minute, now_ms);
    key->name = std::move(spec.name);
    key->key = std::move(spec.key);
    key->models = std::move(spec.models);
    key->priority_class = std::move(spec.priority_class);
    key->ttft_slo_ms = static_cast<uint32_t>(spec.ttft_slo_ms.value_or(0));
    longest_key_bytes_ = std::max(longest_key_bytes_, key->key.size());
    // Keys are unique (parseApiKeysFile): the first one stays. A key whose digest failed is never found.
    if (auto digest = keyDigest(key->key)) by_digest_.emplace(*digest, key);
    keys_.push_back(std::move(key));
  }
}

namespace {
thread_local uint64_t digests_on_this_thread = 0;
}  // namespace

std::optional<KeyDigest> keyDigest(std::string_view key) {
  KeyDigest digest{};
  unsigned int size = 0;
  // SHA-256 (preimage resistant): the digest says nothing usable about a key, so looking it up in a hash map (whose
  // time depends on the digest's bytes) leaks nothing about the key's.
  // Fetched once: OpenSSL 3 looks an implicit EVP_sha256() up again (under a lock) on every digest.
  static const EVP_MD* const sha256 = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched ? fetched : EVP_sha256();
  }();
  if (EVP_Digest(key.data(), key.size(), digest.data(), &size, sha256, nullptr) != 1 || size != digest.size())
    return std::nullopt;
  return digest;
}

uint64_t ApiKeySet::digestsOnThisThread() { return digests_on_this_thread; }

bool ApiKeySet::DigestEqual::operator()(const KeyDigest& a, const KeyDigest& b) const {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::shared_ptr<const ApiKey> ApiKeySet::find(std::string_view presented) const {
  // No key is longer: refused at once, without reading (or digesting) what may be megabytes of header.
  if (presented.size() > longest_key_bytes_) return nullptr;
  ++digests_on_this_thread;
  const std::optional<KeyDigest> digest = keyDigest(presented);
  if (!digest) return nullptr;
  const auto it = by_digest_.find(*digest);
  return it == by_digest_.end() ? nullptr : it->second;
}

std::string_view bearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return {};
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

}  // namespace prefixgate::auth
