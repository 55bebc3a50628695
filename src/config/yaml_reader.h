#pragma once
// Typed reads from a YAML mapping that record a problem naming the file and the dotted key instead of throwing,
// and report keys that nobody read (typos) as unknown.
#include <yaml-cpp/yaml.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace prefixgate::config {

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
  // The keys of a mapping-valued key (for maps keyed by user names, like models).
  std::vector<std::string> keys() const;
  // A key's value as YAML text (read later by whoever owns it); "" when absent.
  std::string rawYaml(const std::string& key);
  bool isMap() const { return node_.IsMap(); }
  // Records every key of this mapping not read or declared through allow().
  void allow(const std::string& key) { seen_.insert(key); }
  void finish();

  void problem(const std::string& key, const std::string& what);
  std::string keyPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& source() const { return source_; }

 private:
  YAML::Node get(const std::string& key);
  YAML::Node node_;
  std::string source_;
  std::string path_;
  std::vector<std::string>& problems_;
  std::set<std::string> seen_;
};

}  // namespace prefixgate::config
