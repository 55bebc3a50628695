#include "discovery/file/pods_file.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "config/yaml_reader.h"
#include "net/listener.h"
#include "util/log.h"

namespace prefixgate::discovery {
namespace {

// Data-parallel ranks of one pod: each is a KV event subscription of its own.
constexpr uint32_t kMaxDataParallelSize = 64;

}  // namespace

std::vector<PodSpec> parsePodsFile(const std::string& text, const std::string& source, std::vector<std::string>& problems) {
  std::vector<PodSpec> pods;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    problems.push_back(source + ": line " + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
    return pods;
  }
  if (!root.IsMap() || !root["pods"]) {
    problems.push_back(source + ": pods: required (a list of pods)");
    return pods;
  }
  config::YamlReader top(root, source, "", problems);
  top.allow("pods");
  top.finish();
  YAML::Node list = root["pods"];
  if (list.IsNull()) return pods;  // an empty pod set is valid (nothing to route to yet)
  if (!list.IsSequence()) {
    problems.push_back(source + ": pods: expected a list of pods");
    return pods;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i) {
    std::string path = "pods[" + std::to_string(i) + "]";
    config::YamlReader r(list[i], source, path, problems);
    PodSpec spec;
    r.read("name", spec.name);
    r.read("address", spec.address);
    r.read("models", spec.models);
    r.read("kv_events", spec.kv_events);
    r.read("kv_replay", spec.kv_replay);
    r.read("kv_capacity_tokens", spec.kv_capacity_tokens);
    r.read("data_parallel_size", spec.data_parallel_size);
    std::string engine = "auto";
    r.read("engine", engine);
    std::string role = "both";
    r.read("role", role);
    r.finish();
    if (auto kind = engine::parseEngineKind(engine)) spec.engine = *kind;
    else r.problem("engine", "expected " + std::string(engine::kEngineKindChoices) + ", got '" + engine + "'");
    if (auto parsed = parseRole(role)) spec.role = *parsed;
    else
      r.problem("role", "expected " + std::string(kRoleChoices) + ", got '" + role + "'" +
                            (spec.name.empty() ? "" : " (pod " + spec.name + ")"));
    if (spec.name.empty()) r.problem("name", "required");
    else if (!names.insert(spec.name).second) r.problem("name", "duplicate pod name '" + spec.name + "'");
    if (!net::splitHostPort(spec.address, spec.host, spec.port) || spec.port == 0)
      r.problem("address", "expected HOST:PORT, got '" + spec.address + "'");
    if (spec.models.empty()) r.problem("models", "required: the models this pod serves");
    if (spec.data_parallel_size == 0 || spec.data_parallel_size > kMaxDataParallelSize)
      r.problem("data_parallel_size", "must be 1 to " + std::to_string(kMaxDataParallelSize));
    pods.push_back(std::move(spec));
  }
  return pods;
}

std::vector<PodSpec> loadPodsFile(const std::string& path, std::vector<std::string>& problems) {
  std::string text;
  if (!util::readFileText(path, text)) {
    problems.push_back(path + ": cannot read the pods file");
    return {};
  }
  return parsePodsFile(text, path, problems);
}

void checkPodsFile(const std::string& path, std::vector<std::string>& problems) {
  const size_t before = problems.size();
  std::vector<PodSpec> pods = loadPodsFile(path, problems);
  if (problems.size() != before) return;
  for (const std::string& model : undecodableModels(pods)) problems.push_back(path + ": " + model);
}

void warnUndecodable(const std::vector<PodSpec>& pods, const std::string& source) {
  for (const std::string& model : undecodableModels(pods)) log::warn("{}: {}", source, model);
}

FilePodSource::FilePodSource(boost::asio::io_context& io, std::string path, std::chrono::milliseconds poll_interval,
                             PodRegistry& registry)
    : path_(path),
      registry_(registry),
      file_(io, std::move(path), poll_interval, [this](const std::string& text) { apply(text); }) {}

std::vector<std::string> FilePodSource::start() {
  std::vector<std::string> problems;
  std::string text;
  if (!util::readFileText(path_, text)) {
    problems.push_back(path_ + ": cannot read the pods file");
    return problems;
  }
  auto pods = parsePodsFile(text, path_, problems);
  if (!problems.empty()) return problems;
  warnUndecodable(pods, path_);
  registry_.update(std::move(pods));
  file_.start(std::move(text));
  return problems;
}

void FilePodSource::stop() { file_.stop(); }

void FilePodSource::apply(const std::string& text) {
  std::vector<std::string> problems;
  auto pods = parsePodsFile(text, path_, problems);
  if (!problems.empty()) {
    for (const auto& p : problems) log::warn("pods file ignored, keeping the last good pod set: {}", p);
    return;
  }
  log::info("pods file {} changed: {} pods", path_, pods.size());
  warnUndecodable(pods, path_);
  registry_.update(std::move(pods));
}

}  // namespace prefixgate::discovery
