#pragma once
// Typed reads from a YAML mapping that record a problem naming the file and the dotted key instead of throwing,
// and report keys that nobody read (typos) as unknown.
#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace prefixgate::config {

// While one lives, every value a YamlReader on this thread reads is logged: its dotted key and the value it held
// before the read, as YAML text ("null" for an unset optional). Read from a document that sets nothing, that is each
// accepted key with its built-in default: what knownKeys() and the test that conf/prefixgate.yaml lists every key
// are built on. Thread-local rather than handed to each reader, so that readers made elsewhere (each strategy's
// settings, read through the strategy registry) are logged too; outside such a scope nothing is recorded.
class KeyLog {
 public:
  KeyLog();
  ~KeyLog();
  KeyLog(const KeyLog&) = delete;
  KeyLog& operator=(const KeyLog&) = delete;
  // Dotted key -> its value before the read, as YAML text.
  const std::map<std::string, std::string>& keys() const { return keys_; }

 private:
  friend class YamlReader;
  KeyLog* outer_;
  std::map<std::string, std::string> keys_;
};

class YamlReader {
 public:
  YamlReader(YAML::Node node, std::string source, std::string path, std::vector<std::string>& problems);

  bool has(const std::string& key) const;
  void read(const std::string& key, std::string& out);
  void read(const std::string& key, bool& out);
  void read(const std::string& key, double& out);
  void read(const std::string& key, uint32_t& out);
  void read(const std::string& key, uint64_t& out);
  void read(const std::string& key, std::optional<uint64_t>& out);  // null keeps it unset
  void read(const std::string& key, std::optional<double>& out);
  void read(const std::string& key, std::vector<std::string>& out);
  // A nested mapping; an absent key yields an empty reader.
  YamlReader child(const std::string& key);
  // A list of mappings (`classes: [{name: a}, ...]`): one reader per item, its keys named `key[i].field`; an absent
  // key yields none, and a value that is not a list is a problem.
  std::vector<YamlReader> children(const std::string& key);
  // The keys of a mapping-valued key (for maps keyed by user names, like models).
  std::vector<std::string> keys() const;
  // A key's value as YAML text (read later by whoever owns it); "" when absent.
  std::string rawYaml(const std::string& key);
  bool isMap() const { return node_.IsMap(); }
  // Records every key of this mapping not read or declared through allow().
  void allow(const std::string& key) { seen_.insert(key); }
  // A key that was a setting and is now fixed in code: a document that still sets it gets a problem naming it,
  // "no longer a setting (<why>); remove it", rather than the bare "unknown key" a typo gets.
  void retired(const std::string& key, const std::string& why);
  void finish();

  void problem(const std::string& key, const std::string& what);
  std::string keyPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& source() const { return source_; }

 private:
  // The value of `key` (Undefined when absent), marked as read.
  YAML::Node get(const std::string& key);
  // get() for a value read into a setting whose current value is `before` (logged while a KeyLog lives).
  template <class T>
  YAML::Node recorded(const std::string& key, const T& before);
  YAML::Node node_;
  std::string source_;
  std::string path_;
  std::vector<std::string>& problems_;
  std::set<std::string> seen_;
};

}  // namespace prefixgate::config
