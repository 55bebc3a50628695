#include "config/yaml_reader.h"

#include "config/value_parse.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace prefixgate::config {
namespace {

thread_local KeyLog* active_log = nullptr;

// A setting's value as YAML text that loads back to it (strings quoted, so "0" or "null" stay strings).
std::string yamlText(const std::string& v) {
  YAML::Emitter out;
  out << YAML::DoubleQuoted << v;
  return out.c_str();
}
std::string yamlText(bool v) { return v ? "true" : "false"; }
std::string yamlText(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // the shortest text that reads back as v
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}
std::string yamlText(uint32_t v) { return std::to_string(v); }
std::string yamlText(uint64_t v) { return std::to_string(v); }
template <class T>
std::string yamlText(const std::optional<T>& v) {
  return v ? yamlText(*v) : "null";
}
std::string yamlText(const std::vector<std::string>& v) {
  YAML::Emitter out;
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& item : v) out << YAML::DoubleQuoted << item;
  out << YAML::EndSeq;
  return out.c_str();
}

}  // namespace

KeyLog::KeyLog() : outer_(active_log) { active_log = this; }
KeyLog::~KeyLog() { active_log = outer_; }

YamlReader::YamlReader(YAML::Node node, std::string source, std::string path, std::vector<std::string>& problems)
    : node_(std::move(node)), source_(std::move(source)), path_(std::move(path)), problems_(problems) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) {
    problems_.push_back(source_ + ": " + (path_.empty() ? "(top level)" : path_) + ": expected a mapping");
    node_ = YAML::Node();
  }
}

// Lookups go through a const node: yaml-cpp's non-const operator[] inserts the key it looks for.
bool YamlReader::has(const std::string& key) const {
  const YAML::Node& node = node_;
  return node.IsMap() && node[key];
}

YAML::Node YamlReader::get(const std::string& key) {
  seen_.insert(key);
  const YAML::Node& node = node_;
  // An absent key is an Undefined node (a valid one: the "zombie" node yaml-cpp returns throws on most calls).
  if (!node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  YAML::Node value = node[key];
  if (!value) return YAML::Node(YAML::NodeType::Undefined);
  return value;
}

template <class T>
YAML::Node YamlReader::recorded(const std::string& key, const T& before) {
  if (active_log) active_log->keys_[keyPath(key)] = yamlText(before);
  return get(key);
}

void YamlReader::retired(const std::string& key, const std::string& why) {
  seen_.insert(key);
  if (has(key)) problem(key, "no longer a setting (" + why + "); remove it");
}

void YamlReader::problem(const std::string& key, const std::string& what) {
  problems_.push_back(source_ + ": " + keyPath(key) + ": " + what);
}

void YamlReader::read(const std::string& key, std::string& out) {
  YAML::Node v = recorded(key, out);
  if (!v) return;
  if (v.IsNull()) { out.clear(); return; }
  if (!v.IsScalar()) return problem(key, "expected a string");
  out = v.Scalar();
}

void YamlReader::read(const std::string& key, bool& out) {
  YAML::Node v = recorded(key, out);
  if (!v) return;
  if (!v.IsScalar() || !parseBool(v.Scalar(), out, true)) problem(key, "expected true or false");
}

void YamlReader::read(const std::string& key, double& out) {
  YAML::Node v = recorded(key, out);
  if (!v) return;
  if (!v.IsScalar() || !parseDouble(v.Scalar(), out)) problem(key, "expected a number");
}

void YamlReader::read(const std::string& key, uint32_t& out) {
  YAML::Node v = recorded(key, out);
  if (!v) return;
  if (!v.IsScalar() || !parseUnsigned(v.Scalar(), out)) problem(key, "expected a whole number from 0 to 4294967295");
}

void YamlReader::read(const std::string& key, uint64_t& out) {
  YAML::Node v = recorded(key, out);
  if (!v) return;
  if (!v.IsScalar() || !parseUnsigned(v.Scalar(), out)) problem(key, "expected a non-negative whole number");
}

void YamlReader::read(const std::string& key, std::optional<uint64_t>& out) {
  YAML::Node v = recorded(key, out);
  if (!v || v.IsNull()) return;
  uint64_t value = 0;
  if (!v.IsScalar() || !parseUnsigned(v.Scalar(), value)) return problem(key, "expected a non-negative whole number or null");
  out = value;
}

void YamlReader::read(const std::string& key, std::optional<double>& out) {
  YAML::Node v = recorded(key, out);
  if (!v || v.IsNull()) return;
  double value = 0;
  if (!v.IsScalar() || !parseDouble(v.Scalar(), value)) return problem(key, "expected a number");
  out = value;
}

void YamlReader::read(const std::string& key, std::vector<std::string>& out) {
  YAML::Node v = recorded(key, out);
  if (!v) return;
  if (!v.IsSequence()) return problem(key, "expected a list of strings");
  out.clear();
  for (const auto& item : v) {
    if (!item.IsScalar()) return problem(key, "expected a list of strings");
    out.push_back(item.Scalar());
  }
}

YamlReader YamlReader::child(const std::string& key) { return YamlReader(get(key), source_, keyPath(key), problems_); }

std::vector<YamlReader> YamlReader::children(const std::string& key) {
  std::vector<YamlReader> out;
  if (active_log) active_log->keys_[keyPath(key)] = "[]";  // lists of mappings default to none
  const YAML::Node value = get(key);
  if (!value || value.IsNull()) return out;
  if (!value.IsSequence()) {
    problem(key, "expected a list");
    return out;
  }
  for (size_t i = 0; i < value.size(); ++i)
    out.emplace_back(value[i], source_, keyPath(key) + "[" + std::to_string(i) + "]", problems_);
  return out;
}

std::vector<std::string> YamlReader::keys() const {
  std::vector<std::string> out;
  if (!node_.IsMap()) return out;
  for (const auto& kv : node_) out.push_back(kv.first.Scalar());
  return out;
}

std::string YamlReader::rawYaml(const std::string& key) {
  const YAML::Node value = get(key);
  return value ? YAML::Dump(value) : std::string();
}

void YamlReader::finish() {
  if (!node_.IsMap()) return;
  for (const auto& kv : node_) {
    const std::string key = kv.first.Scalar();
    if (!seen_.count(key)) problem(key, "unknown key");
  }
}

}  // namespace prefixgate::config
