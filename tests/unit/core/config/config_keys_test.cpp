// conf/prefixgate.yaml tells the truth: it lists every key the configuration parser accepts (each strategy's
// settings, the Kubernetes discovery section and an example model with a profile included), each at its built-in
// default, and no key the parser refuses; docs/configuration.md names every one of them.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "config/config.h"
#include "config/value_parse.h"
#include "config/yaml_reader.h"
#include "routing/strategy_registry.h"

namespace prefixgate::config {
namespace {

const std::string kConfFile = std::string(PREFIXGATE_SOURCE_DIR) + "/conf/prefixgate.yaml";
const std::string kDocsFile = std::string(PREFIXGATE_SOURCE_DIR) + "/docs/configuration.md";

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every key the gateway accepts in its configuration file, with its default as YAML text: the parser's own
// (knownKeys) and each strategy's settings, as the registry reads them at start.
std::map<std::string, std::string> acceptedKeys() {
  std::map<std::string, std::string> keys = knownKeys();
  KeyLog log;
  Problems ignored;
  routing::StrategyRegistry::builtin().checkSettings(Config{}, ignored);
  keys.insert(log.keys().begin(), log.keys().end());
  return keys;
}

// The conf file with its discovery.kubernetes section switched on. The section is written commented out (setting it
// replaces file discovery): a "# kubernetes:" line, then its keys each behind "#   " at the same indent.
std::string withKubernetesUncommented(const std::string& text) {
  std::istringstream in(text);
  std::string line, out, indent;
  bool inside = false;
  while (std::getline(in, line)) {
    if (inside && line.rfind(indent + "#   ", 0) == 0) {
      line.erase(indent.size(), 2);
    } else {
      inside = false;
      const size_t hash = line.find("# kubernetes:");
      if (hash != std::string::npos && line.find_first_not_of(' ') == hash) {
        indent = line.substr(0, hash);
        line.erase(hash, 2);
        inside = true;
      }
    }
    out += line + "\n";
  }
  return out;
}

// Each value of `node` (not the mappings holding them) under its dotted key; the names of models and of a model's
// profiles become <model> and <profile>, as knownKeys() writes them. An empty mapping is a value.
void flatten(const YAML::Node& node, const std::string& path, std::map<std::string, YAML::Node>& out) {
  if (!node.IsMap() || node.size() == 0) {
    out[path] = node;
    return;
  }
  for (const auto& kv : node) {
    std::string name = kv.first.Scalar();
    if (path == "models") name = "<model>";
    if (path == "models.<model>.profiles") name = "<profile>";
    flatten(kv.second, path.empty() ? name : path + "." + name, out);
  }
}

std::map<std::string, YAML::Node> confKeys() {
  std::map<std::string, YAML::Node> keys;
  flatten(YAML::Load(withKubernetesUncommented(readText(kConfFile))), "", keys);
  return keys;
}

// Whether `value` (from the conf file) is the default `default_yaml`: numbers by value (0.10 is 0.1), booleans as
// the parser reads them, lists item by item, null only as null.
bool isDefault(const YAML::Node& value, const std::string& default_yaml) {
  const YAML::Node d = YAML::Load(default_yaml);
  if (d.IsNull() || value.IsNull()) return d.IsNull() && value.IsNull();
  if (d.IsSequence()) {
    if (!value.IsSequence() || value.size() != d.size()) return false;
    for (size_t i = 0; i < d.size(); ++i)
      if (!value[i].IsScalar() || value[i].Scalar() != d[i].Scalar()) return false;
    return true;
  }
  if (!value.IsScalar()) return false;
  double a = 0, b = 0;
  if (parseDouble(value.Scalar(), a) && parseDouble(d.Scalar(), b)) return a == b;
  bool x = false, y = false;
  if (parseBool(value.Scalar(), x, true) && parseBool(d.Scalar(), y, true)) return x == y;
  return value.Scalar() == d.Scalar();
}

// The parser logs what it reads: a plain key, an optional, a list, a model's and a profile's keys, the Kubernetes
// section and a strategy's setting, each with its default.
TEST(ConfigKeys, TheParserNamesEveryKeyWithItsDefault) {
  const std::map<std::string, std::string> keys = acceptedKeys();
  auto at = [&keys](const std::string& key) { return keys.count(key) ? keys.at(key) : "(absent)"; };
  EXPECT_EQ(at("limits.max_json_depth"), "64");
  EXPECT_EQ(at("routing.prefix_cache.hash_seed"), "null");
  EXPECT_EQ(at("routing.prefix_cache.tokenizer"), "\"character\"");
  EXPECT_EQ(at("routing.load_balance.kv_critical"), "0.1");
  EXPECT_EQ(at("discovery.kubernetes.namespaces"), "[\"default\"]");
  EXPECT_EQ(at("models.<model>.routing_config.load_balance.alpha"), "null");
  EXPECT_EQ(at("models.<model>.profiles.<profile>.routing_strategy"), "\"\"");
  EXPECT_EQ(at("routing.strategies.session-affinity.ttl_ms"), "600000");
  EXPECT_EQ(keys.count("models"), 0u) << "mappings are not values";
}

// Every key the parser accepts is in conf/prefixgate.yaml, and every key there is one the parser accepts.
TEST(ConfigKeys, ConfListsExactlyTheAcceptedKeys) {
  const std::map<std::string, std::string> accepted = acceptedKeys();
  const std::map<std::string, YAML::Node> listed = confKeys();
  std::string missing, refused;
  for (const auto& [key, default_yaml] : accepted)
    if (!listed.count(key)) missing += "\n  " + key + ": " + default_yaml;
  for (const auto& [key, value] : listed)
    if (!accepted.count(key)) refused += "\n  " + key;
  EXPECT_TRUE(missing.empty()) << "accepted by the parser but missing from conf/prefixgate.yaml (key: default):"
                               << missing;
  EXPECT_TRUE(refused.empty()) << "in conf/prefixgate.yaml but not accepted by the parser:" << refused;
}

// Every value in conf/prefixgate.yaml is the built-in default (the example model's and profile's included: they
// inherit everything, so the entry changes nothing), but discovery.file, which has none (a source is required).
TEST(ConfigKeys, ConfShowsTheDefaults) {
  const std::map<std::string, std::string> accepted = acceptedKeys();
  for (const auto& [key, value] : confKeys()) {
    auto it = accepted.find(key);
    if (it == accepted.end() || key == "discovery.file") continue;  // unknown keys: ConfListsExactlyTheAcceptedKeys
    EXPECT_TRUE(isDefault(value, it->second)) << key << ": conf/prefixgate.yaml says " << YAML::Dump(value)
                                              << ", the default is " << it->second;
  }
}

// conf/prefixgate.yaml passes the checks `prefixgate --check` makes (but reading its pods file); so does its
// Kubernetes section, switched on in place of the pods file.
TEST(ConfigKeys, ConfPassesTheChecks) {
  const routing::StrategyRegistry registry = routing::StrategyRegistry::builtin();
  Problems problems;
  Config c = loadFile(kConfFile, problems);
  validate(c, registry.names(), problems);
  registry.checkSettings(c, problems);
  validateDecodeStrategy(c, registry.names(), {}, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();

  YAML::Node kubernetes = YAML::Load(withKubernetesUncommented(readText(kConfFile)));
  ASSERT_TRUE(kubernetes["discovery"]["kubernetes"].IsMap());
  kubernetes["discovery"].remove("file");
  Problems k_problems;
  Config k = parseYaml(YAML::Dump(kubernetes), kConfFile, k_problems);
  validate(k, registry.names(), k_problems);
  EXPECT_TRUE(k_problems.empty()) << k_problems.front();
  EXPECT_TRUE(k.discovery.kubernetes.has_value());
}

// docs/configuration.md names every accepted key (its tables abbreviate sibling keys, so the key's last part in
// backticks is what is looked for).
TEST(ConfigKeys, DocsNameEveryKey) {
  const std::string docs = readText(kDocsFile);
  ASSERT_FALSE(docs.empty()) << kDocsFile;
  std::string undocumented;
  for (const auto& [key, default_yaml] : acceptedKeys()) {
    const std::string last = key.substr(key.rfind('.') + 1);
    if (docs.find("`" + key + "`") == std::string::npos && docs.find("`" + last + "`") == std::string::npos &&
        docs.find("." + last + "`") == std::string::npos)
      undocumented += "\n  " + key;
  }
  EXPECT_TRUE(undocumented.empty()) << "not named in docs/configuration.md:" << undocumented;
}

}  // namespace
}  // namespace prefixgate::config
