#include "discovery/pod_set.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "discovery/file/pods_file.h"
#include "routing/load_guards.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::discovery {
namespace {

using routing::InFlightGuard;

PodSpec spec(const std::string& name, uint16_t port, std::vector<std::string> models = {"m"}) {
  return testing::podSpec(name, port, std::move(models));
}

// An unchanged pod keeps its state (and in-flight count) across a reload; a changed one gets a fresh id.
TEST(PodRegistry, ReloadKeepsUnchangedPods) {
  PodRegistry r;
  r.update({spec("a", 1), spec("b", 2)});
  PodPtr a = r.snapshot()->find("a");
  InFlightGuard g(a);
  r.update({spec("a", 1), spec("b", 3)});
  EXPECT_EQ(r.snapshot()->find("a"), a);
  EXPECT_EQ(r.snapshot()->find("a")->signals().inFlight(), 1);
  EXPECT_NE(r.snapshot()->find("b")->spec().port, 2);
}

// A pod is its name and address: an edit of its other fields (models, KV capacity, engine, KV event endpoints)
// keeps its id and live state (health, in-flight count), is seen by a new snapshot's model map, and is reported to
// the changed listeners with the spec before, not as a removal and an addition.
TEST(PodRegistry, EditedPodKeepsItsIdentityAndState) {
  PodRegistry r;
  std::vector<uint32_t> removed, added;
  std::vector<std::string> changed;
  r.onRemoved([&](PodId id) { removed.push_back(id.value); });
  r.onAdded([&](const PodPtr& p) { added.push_back(p->id().value); });
  r.onChanged([&](const PodPtr& p, const PodSpec& before) { changed.push_back(changedFields(before, p->spec())); });
  r.update({spec("a", 1)});
  PodPtr a = r.snapshot()->find("a");
  a->recordHealth(true, 1, 1);
  InFlightGuard g(a);
  const PodSpec& first = a->spec();
  PodSpec edited = spec("a", 1, {"m", "m2"});
  edited.kv_capacity_tokens = 4096;
  edited.engine = engine::EngineKind::kLlamaCpp;
  edited.kv_events = "tcp://127.0.0.1:5557";
  r.update({edited});
  EXPECT_EQ(r.snapshot()->find("a"), a);
  EXPECT_TRUE(a->ready(0));
  EXPECT_FALSE(a->removed());
  EXPECT_EQ(a->signals().inFlight(), 1);
  EXPECT_EQ(a->spec().kv_capacity_tokens, 4096u);
  EXPECT_EQ(a->engineKind(), engine::EngineKind::kLlamaCpp);
  ASSERT_NE(r.snapshot()->podsFor("m2"), nullptr);
  EXPECT_EQ(r.snapshot()->podsFor("m2")->front(), a);
  EXPECT_TRUE(removed.empty());
  EXPECT_EQ(added.size(), 1u);  // the first update only
  EXPECT_EQ(changed, std::vector<std::string>{"models, kv_events, kv_capacity_tokens, engine"});
  EXPECT_EQ(first.kv_capacity_tokens, 0u);  // a reference taken before the edit still reads the old version
  // A new address is a new pod.
  r.update({spec("a", 2)});
  EXPECT_NE(r.snapshot()->find("a"), a);
  EXPECT_TRUE(a->removed());
  EXPECT_EQ(removed, std::vector<uint32_t>{a->id().value});
}

// The versions an edited pod keeps for readers are bounded: past PodState::kMaxSpecVersions, an edit replaces it.
TEST(PodRegistry, PodEditedTooOftenIsReplaced) {
  PodRegistry r;
  r.update({spec("a", 1)});
  PodPtr a = r.snapshot()->find("a");
  for (uint64_t i = 1; i < PodState::kMaxSpecVersions; ++i) {
    PodSpec edited = spec("a", 1);
    edited.kv_capacity_tokens = i;
    r.update({edited});
    ASSERT_EQ(r.snapshot()->find("a"), a) << i;
  }
  PodSpec edited = spec("a", 1);
  edited.kv_capacity_tokens = 999999;
  r.update({edited});
  EXPECT_NE(r.snapshot()->find("a"), a);
  EXPECT_EQ(r.snapshot()->find("a")->spec().kv_capacity_tokens, 999999u);
}

// A removed pod is marked removed and reported; its in-flight count goes to its own state, never negative, and
// a pod re-added under the same name starts from zero with a new id.
TEST(PodRegistry, RemovedAndReAddedPodsHaveSeparateCounters) {
  PodRegistry r;
  std::vector<uint32_t> removed;
  r.onRemoved([&](PodId id) { removed.push_back(id.value); });
  r.update({spec("a", 1)});
  PodPtr old = r.snapshot()->find("a");
  {
    InFlightGuard g(old);
    r.update({});
    EXPECT_TRUE(old->removed());
    EXPECT_EQ(removed, std::vector<uint32_t>{old->id().value});
    r.update({spec("a", 1)});
    PodPtr fresh = r.snapshot()->find("a");
    EXPECT_NE(fresh, old);
    EXPECT_NE(fresh->id(), old->id());
    EXPECT_EQ(fresh->signals().inFlight(), 0);
  }
  EXPECT_EQ(old->signals().inFlight(), 0);
}

// Models map to the pods that serve them.
// Each thread caches the snapshot it read: an update (on another thread) is seen by its next read, and two
// registries on one thread never hand out each other's pods.
TEST(PodRegistry, ThreadCachedSnapshotsFollowUpdatesAndRegistries) {
  PodRegistry r;
  PodRegistry other;
  other.update({spec("x", 9)});
  r.update({spec("a", 1)});
  std::shared_ptr<const PodSet> first, second, from_other;
  std::atomic<int> step{0};
  std::thread reader([&] {
    first = r.snapshot();
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
    second = r.snapshot();
    from_other = other.snapshot();
  });
  while (step.load() != 1) std::this_thread::yield();
  r.update({spec("a", 1), spec("b", 2)});
  step = 2;
  reader.join();
  EXPECT_EQ(first->pods().size(), 1u);
  ASSERT_EQ(second->pods().size(), 2u);
  EXPECT_TRUE(second->find("b"));
  EXPECT_TRUE(from_other->find("x"));
  EXPECT_FALSE(r.snapshot()->find("x"));
}

TEST(PodSet, IndexesByModel) {
  PodSet set({std::make_shared<PodState>(PodId{1}, spec("a", 1, {"x", "y"})),
              std::make_shared<PodState>(PodId{2}, spec("b", 2, {"y"}))});
  EXPECT_EQ(set.podsFor("y")->size(), 2u);
  EXPECT_EQ(set.podsFor("x")->size(), 1u);
  EXPECT_EQ(set.podsFor("z"), nullptr);
  EXPECT_EQ(set.models(), (std::vector<std::string>{"x", "y"}));
}

// Health thresholds: a pod becomes ready after healthy_threshold passes and leaves after unhealthy_threshold
// failures in a row; a passing check does not end a passive ejection (the back-off must run out).
TEST(PodState, HealthThresholdsAndEjection) {
  PodState p(PodId{1}, spec("a", 1));
  EXPECT_FALSE(p.ready(0));
  p.recordHealth(true, 2, 2);
  EXPECT_FALSE(p.ready(0));
  p.recordHealth(true, 2, 2);
  EXPECT_TRUE(p.ready(0));
  p.recordHealth(false, 2, 2);
  EXPECT_TRUE(p.ready(0));
  p.recordHealth(false, 2, 2);
  EXPECT_FALSE(p.ready(0));
  p.recordHealth(true, 1, 2);
  p.eject(100);
  EXPECT_FALSE(p.ready(50));
  EXPECT_TRUE(p.ready(100));
  p.eject(1000);
  p.recordHealth(true, 1, 2);
  EXPECT_FALSE(p.ready(50));
  EXPECT_TRUE(p.ready(1000));
}

// The load routing weighs with state sync: the local count, plus the other replicas' as last read, plus, per other
// replica, what this gateway routed to the pod since that read (they decided on the same old view); without sync
// (no other replicas) exactly the local count.
TEST(PodState, LoadOfAllReplicasExtrapolatesSinceTheLastRead) {
  PodState p(PodId{1}, spec("a", 1));
  p.signals().addInFlight();
  p.signals().addInFlight();
  EXPECT_EQ(p.signals().inFlightAllReplicas(), 2);  // sync off: nothing else
  p.signals().setRemoteInFlight(5, 2);              // two other replicas, 5 in flight between them
  EXPECT_EQ(p.signals().remoteInFlight(), 5);
  EXPECT_EQ(p.signals().inFlightAllReplicas(), 2 + 5);
  p.signals().addInFlight();  // routed since the read: each other replica is assumed to have done the same
  EXPECT_EQ(p.signals().inFlightAllReplicas(), 3 + 5 + 2 * 1);
  p.signals().releaseInFlight();  // a request ending changes the local count only
  EXPECT_EQ(p.signals().inFlightAllReplicas(), 2 + 5 + 2 * 1);
  p.signals().setRemoteInFlight(7, 2);  // the next read already contains what the others did
  EXPECT_EQ(p.signals().inFlightAllReplicas(), 2 + 7);
  p.signals().setRemoteInFlight(0, 0);  // Redis away for longer than a heartbeat: local only
  p.signals().addInFlight();
  EXPECT_EQ(p.signals().inFlightAllReplicas(), 3);
}

// Passive ejection through PodState: a pod failure past passive_failure_threshold asks for an ejection, which
// lasts eject_base_ms, doubling per ejection in a row up to eject_max_ms; a success resets the doubling.
TEST(PodState, PassiveEjectionBacksOffExponentially) {
  PodState p(PodId{1}, spec("a", 1));
  p.recordHealth(true, 1, 1);
  config::HealthCheckConfig cfg;
  cfg.passive_failure_threshold = 2;
  cfg.eject_base_ms = 100;
  cfg.eject_max_ms = 350;
  EXPECT_FALSE(p.recordPodFailure(cfg));  // one failure is below the threshold
  ASSERT_TRUE(p.recordPodFailure(cfg));
  p.ejectPassively(0, cfg);
  EXPECT_FALSE(p.ready(99));
  EXPECT_TRUE(p.ready(100));
  EXPECT_FALSE(p.recordPodFailure(cfg));  // the ejection restarted the streak
  ASSERT_TRUE(p.recordPodFailure(cfg));
  p.ejectPassively(100, cfg);
  EXPECT_FALSE(p.ready(299));  // doubled: 200 ms
  EXPECT_TRUE(p.ready(300));
  p.recordPodFailure(cfg);
  p.recordPodFailure(cfg);
  p.ejectPassively(300, cfg);
  EXPECT_FALSE(p.ready(649));  // capped at 350 ms
  EXPECT_TRUE(p.ready(650));
  EXPECT_EQ(p.ejections(), 3u);
  p.recordSuccess();
  p.recordPodFailure(cfg);
  p.recordPodFailure(cfg);
  p.ejectPassively(650, cfg);
  EXPECT_TRUE(p.ready(750));  // the success reset the doubling: back to 100 ms
  EXPECT_EQ(p.ejections(), 1u);
}

// The pods file parses the contract's shape and reports each problem with its index and key.
TEST(PodsFile, ParsesAndReportsProblems) {
  std::vector<std::string> problems;
  auto pods = parsePodsFile(R"(pods:
  - name: engine-0
    address: 127.0.0.1:8001
    models: [m]
    kv_events: tcp://127.0.0.1:5557
    kv_replay: tcp://127.0.0.1:5558
)", "pods.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0].port, 8001);
  EXPECT_EQ(pods[0].kv_events, "tcp://127.0.0.1:5557");

  parsePodsFile(R"(pods:
  - name: a
    address: nowhere
    models: [m]
  - name: a
    address: 127.0.0.1:1
  - address: 127.0.0.1:2
    models: [m]
    colour: red
)", "pods.yaml", problems);
  auto has = [&](const std::string& s) {
    for (const auto& p : problems)
      if (p == s) return true;
    return false;
  };
  EXPECT_TRUE(has("pods.yaml: pods[0].address: expected HOST:PORT, got 'nowhere'"));
  EXPECT_TRUE(has("pods.yaml: pods[1].name: duplicate pod name 'a'"));
  EXPECT_TRUE(has("pods.yaml: pods[1].models: required: the models this pod serves"));
  EXPECT_TRUE(has("pods.yaml: pods[2].name: required"));
  EXPECT_TRUE(has("pods.yaml: pods[2].colour: unknown key"));
}

// Ensures a pod's engine dialect is read from the pods file (auto when absent) and a bad one names the choices.
TEST(PodsFile, EngineDialect) {
  std::vector<std::string> problems;
  auto pods = parsePodsFile(R"(pods:
  - {name: a, address: 127.0.0.1:1, models: [m]}
  - {name: b, address: 127.0.0.1:2, models: [m], engine: llamacpp}
  - {name: c, address: 127.0.0.1:3, models: [m], engine: sglang}
)", "pods.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(pods[0].engine, engine::EngineKind::kAuto);
  EXPECT_EQ(pods[1].engine, engine::EngineKind::kLlamaCpp);
  EXPECT_EQ(pods[2].engine, engine::EngineKind::kSglang);
  parsePodsFile("pods:\n  - {name: a, address: 127.0.0.1:1, models: [m], engine: tgi}\n", "pods.yaml", problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "pods.yaml: pods[0].engine: expected vllm, sglang, llamacpp or auto, got 'tgi'");
}

}  // namespace
}  // namespace prefixgate::discovery
