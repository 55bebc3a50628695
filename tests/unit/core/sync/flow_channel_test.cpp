// State sync's flow service channel without Redis (docs/state-sync.md, "Flow service"): the text each replica
// publishes, what a hostile text does, and which increases of another replica's totals are charged. The exchange
// runs end to end in tests/integration/test_state_sync.py.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "sync/flow_channel.h"
#include "sync/flow_service_entries.h"
#include "unit/core/sync/redis_commands.h"

namespace prefixgate::sync {
namespace {

using test_support::bulk;

using flow::FlowService;
using flow::ModelService;
using flow::RemoteService;

ModelService model(std::string name, uint64_t created, std::vector<FlowService> flows) {
  return ModelService{std::move(name), created, std::move(flows)};
}

FlowService service(std::string tenant, double total, uint64_t seq, std::string class_name = "batch") {
  return FlowService{std::move(class_name), std::move(tenant), total, seq};
}

// (tenant, amount) of each charge, for short expectations.
std::vector<std::pair<std::string, double>> amounts(const std::vector<RemoteService>& charges) {
  std::vector<std::pair<std::string, double>> out;
  for (const RemoteService& c : charges) out.emplace_back(c.tenant, c.amount);
  return out;
}

using Amounts = std::vector<std::pair<std::string, double>>;

// Ensures what one replica encodes another decodes unchanged, names with spaces and UTF-8 included.
TEST(FlowServiceEntries, RoundTrip) {
  const std::vector<ModelService> models = {
      model("sim-model", 7, {service("a", 1234.5, 3), service("tenant with spaces", 1e12, 6, "gold tier")}),
      model("mödel", 1, {service("_other", 2, 0, "interactive")})};
  const std::string text = encodeFlowService(models);
  EXPECT_TRUE(text.starts_with("PF1\nm\t7\tsim-model\nf\t3\t1234.5\tbatch\ta\n")) << text;
  std::vector<ModelService> decoded;
  ASSERT_EQ(decodeFlowService(text, decoded), FlowServiceDecode::kOk);
  ASSERT_EQ(decoded.size(), 2u);
  EXPECT_EQ(decoded[0].model, "sim-model");
  EXPECT_EQ(decoded[0].flows_created, 7u);
  ASSERT_EQ(decoded[0].flows.size(), 2u);
  EXPECT_EQ(decoded[0].flows[1].tenant, "tenant with spaces");
  EXPECT_EQ(decoded[0].flows[1].class_name, "gold tier");
  EXPECT_EQ(decoded[0].flows[1].total, 1e12);
  EXPECT_EQ(decoded[0].flows[1].flow_seq, 6u);
  EXPECT_EQ(decoded[1].model, "mödel");
  EXPECT_EQ(decoded[1].flows[0].total, 2.0);
  std::vector<ModelService> empty;
  EXPECT_EQ(decodeFlowService(encodeFlowService({}), empty), FlowServiceDecode::kOk);
  EXPECT_TRUE(empty.empty());
}

// Ensures the encoder leaves out what the text cannot carry, and stays within the decoder's bounds however much
// it is given.
TEST(FlowServiceEntries, EncoderStaysWithinTheBounds) {
  std::vector<ModelService> models = {model("m\tx", 1, {service("a", 1, 0)}),
                                      model("m", 1, {service("bad\x01", 1, 0), service("a", 0, 0),
                                                     service("b", std::nan(""), 1), service("c", 1, 2, "cl\nass"),
                                                     service("d", 5, 3)})};
  std::vector<ModelService> decoded;
  ASSERT_EQ(decodeFlowService(encodeFlowService(models), decoded), FlowServiceDecode::kOk);
  ASSERT_EQ(decoded.size(), 1u);
  ASSERT_EQ(decoded[0].flows.size(), 2u);  // a flow served nothing yet is carried at 0 (a reader's baseline)
  EXPECT_EQ(decoded[0].flows[0].tenant, "a");
  EXPECT_EQ(decoded[0].flows[0].total, 0.0);
  EXPECT_EQ(decoded[0].flows[1].tenant, "d");
  // 5,000 flows of the longest tenant and class names: cut to what one text may hold.
  std::vector<FlowService> many;
  for (int i = 0; i < 5000; ++i)
    many.push_back(service(std::to_string(i) + std::string(120, 't'), 1e14 + i, i, std::string(256, 'c')));
  const std::string text = encodeFlowService({model("m", 5000, many)});
  EXPECT_LE(text.size(), kMaxFlowServiceBytes);
  ASSERT_EQ(decodeFlowService(text, decoded), FlowServiceDecode::kOk);
  EXPECT_GT(decoded[0].flows.size(), 400u);
  many.resize(2000);
  for (FlowService& f : many) f.class_name = "c", f.tenant.resize(4);
  ASSERT_EQ(decodeFlowService(encodeFlowService({model("m", 5000, many)}), decoded), FlowServiceDecode::kOk);
  EXPECT_EQ(decoded[0].flows.size(), kMaxFlowServiceFlows);
}

// Ensures every text a replica would not write is dropped whole, with its reason, and never charges anything.
TEST(FlowServiceEntries, HostileTextsAreDropped) {
  const std::string head = "PF1\nm\t1\tm\n";
  const std::vector<std::string> malformed = {
      "", "PF2\n", "PF1", head + "f\t0\t5\tc\ta",  // no final newline
      "PF1\nf\t0\t5\tc\ta\n",                      // a flow before any model
      head + "x\t1\n", head + "f\t0\t5\tc\n", head + "f\t-1\t5\tc\ta\n", head + "f\t0\t-5\tc\ta\n",
      head + "f\t0\tnan\tc\ta\n", head + "f\t0\tinf\tc\ta\n", head + "f\t0\t1e400\tc\ta\n", head + "f\t0\t5x\tc\ta\n",
      head + "f\t0\t+5\tc\ta\n", head + "f\t0\t 5\tc\ta\n", head + "f\t99999999999999999999\t5\tc\ta\n",
      head + "f\t0\t5\t\ta\n",                                        // empty class
      head + "f\t0\t5\tc\t" + std::string(129, 'a') + "\n",           // tenant too long
      head + "f\t0\t5\tc\ta\xc3\xa9\n",                               // tenant not ASCII
      head + "f\t0\t5\tc\ta\tb\n",                                    // a tab in the tenant
      head + "f\t0\t5\t" + std::string(257, 'c') + "\ta\n",           // class too long
      head + "f\t0\t5\tc\ta\nf\t1\t6\tc\ta\n",                        // the same flow twice
      head + "m\t1\tm\n",                                             // the same model twice
      "PF1\nm\t\tm\n", "PF1\nm\t1\t\n", std::string("PF1\nm\t1\tm\0x\n", 12)};
  for (const std::string& text : malformed) {
    std::vector<ModelService> out = {model("stale", 1, {})};
    EXPECT_EQ(decodeFlowService(text, out), FlowServiceDecode::kMalformed) << text;
    EXPECT_TRUE(out.empty()) << text;
  }
  std::string flows = head;
  for (size_t i = 0; i <= kMaxFlowServiceFlows; ++i) flows += "f\t0\t1\tc\t" + std::to_string(i) + "\n";
  std::vector<ModelService> out;
  EXPECT_EQ(decodeFlowService(flows, out), FlowServiceDecode::kMalformed);  // one flow too many
  std::string huge = head + "f\t0\t1\tc\ta\n";
  huge.resize(kMaxFlowServiceBytes + 1, '\n');
  EXPECT_EQ(decodeFlowService(huge, out), FlowServiceDecode::kTooLarge);
  EXPECT_EQ(flowServiceDropLabel(FlowServiceDecode::kTooLarge), "too_large");
  // A total past the bound is clamped, not refused.
  ASSERT_EQ(decodeFlowService(head + "f\t0\t9e300\tc\ta\n", out), FlowServiceDecode::kOk);
  EXPECT_EQ(out[0].flows[0].total, kMaxFlowServiceTotal);
}

// Ensures a replica's first text is a baseline, then each flow's increase is charged, and a decrease is not.
TEST(FlowServiceDeltas, ChargesIncreasesAfterABaseline) {
  FlowServiceDeltas deltas;
  EXPECT_TRUE(deltas.update("r1", {model("m", 2, {service("a", 1000, 0), service("b", 10, 1)})}).empty());
  EXPECT_EQ(amounts(deltas.update("r1", {model("m", 2, {service("a", 1500, 0), service("b", 10, 1)})})),
            (Amounts{{"a", 500}}));
  const std::vector<RemoteService> charges = deltas.update("r1", {model("m", 2, {service("a", 1400, 0)})});
  EXPECT_TRUE(charges.empty());  // never a decrease (a flow_seq that stayed cannot lose service)
  EXPECT_EQ(amounts(deltas.update("r1", {model("m", 2, {service("a", 1600, 0)})})), (Amounts{{"a", 200}}));
  const std::vector<RemoteService> named =
      deltas.update("r1", {model("m", 2, {service("a", 1700, 0, "interactive")})});  // another class: a new flow?
  EXPECT_TRUE(named.empty());  // flow_seq 0 < flows_created 2: it existed before, unlisted: a baseline
}

// Ensures a flow created since the last read is charged its whole total, a flow created again (forgotten, or its
// replica restarted) likewise, and an old flow that comes back into the bounded list only from there.
TEST(FlowServiceDeltas, NewRecreatedAndReturningFlows) {
  FlowServiceDeltas deltas;
  deltas.update("r1", {model("m", 3, {service("a", 100, 0)})});
  EXPECT_EQ(amounts(deltas.update("r1", {model("m", 4, {service("a", 100, 0), service("new", 40, 3)})})),
            (Amounts{{"new", 40}}));
  // a was forgotten and created again as flow 5: its whole (smaller) total is new service.
  EXPECT_EQ(amounts(deltas.update("r1", {model("m", 6, {service("a", 30, 5), service("new", 40, 3)})})),
            (Amounts{{"a", 30}}));
  // b, flow 1, was never listed (beyond the list's bound): its total is a baseline, then its increases count.
  EXPECT_TRUE(deltas.update("r1", {model("m", 6, {service("b", 9000, 1)})}).empty());
  EXPECT_EQ(amounts(deltas.update("r1", {model("m", 6, {service("b", 9100, 1)})})), (Amounts{{"b", 100}}));
  // A model new to a known replica's list: its flows are new.
  const std::vector<RemoteService> other = deltas.update("r1", {model("m2", 1, {service("c", 7, 0)})});
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0].model, "m2");
  EXPECT_EQ(other[0].class_name, "batch");
  EXPECT_EQ(other[0].amount, 7.0);
}

// Ensures replicas are remembered apart and forgotten when they go: a replica back after that is a baseline again.
TEST(FlowServiceDeltas, ReplicasApartAndForgotten) {
  FlowServiceDeltas deltas;
  deltas.update("r1", {model("m", 1, {service("a", 100, 0)})});
  deltas.update("r2", {model("m", 1, {service("a", 5, 0)})});
  EXPECT_EQ(amounts(deltas.update("r2", {model("m", 1, {service("a", 8, 0)})})), (Amounts{{"a", 3}}));
  EXPECT_EQ(deltas.replicaCount(), 2u);
  deltas.keepOnly({"r2"});
  EXPECT_EQ(deltas.replicaCount(), 1u);
  EXPECT_TRUE(deltas.update("r1", {model("m", 1, {service("a", 500, 0)})}).empty());
  deltas.forget("r2");
  EXPECT_TRUE(deltas.update("r2", {model("m", 1, {service("a", 50, 0)})}).empty());
}

// Records what the channel hands to flow control, and serves a fixed local list.
struct FakeSharing : flow::ServiceSharing {
  std::vector<ModelService> local;
  std::vector<RemoteService> charged;
  mutable size_t asked_max = 0;
  std::vector<ModelService> localService(size_t max_flows) const override {
    asked_max = max_flows;
    return local;
  }
  void chargeRemote(const std::vector<RemoteService>& charges) override {
    charged.insert(charged.end(), charges.begin(), charges.end());
  }
};

RedisReply values(std::vector<RedisReply> elements) {
  RedisReply r;
  r.type = RedisReply::Type::kArray;
  r.elements = std::move(elements);
  return r;
}

struct Channel {
  config::StateSyncConfig config;  // replica_ttl_ms 1500
  SyncKeys keys{"pg"};
  prometheus::Registry registry;
  StateSyncMetrics metrics{registry};
  log::Throttle warnings;
  FakeSharing sharing;
  FlowChannel channel{config, keys, "me", sharing, metrics, warnings};
};

std::vector<std::vector<std::string>> commandsOf(const std::string& commands) {
  RespParser parser;
  std::vector<RedisReply> replies;
  parser.feed(commands, replies);
  std::vector<std::vector<std::string>> out;
  for (const RedisReply& command : replies) {
    out.emplace_back();
    for (const RedisReply& arg : command.elements) out.back().push_back(arg.str);
  }
  return out;
}

// Ensures the channel publishes its own totals with the heartbeat's expiry, reads at most
// kMaxFlowServiceReplicas others by id, charges the others' increases, and counts what it drops without charging.
TEST(FlowChannel, PublishesReadsAndCharges) {
  Channel c;
  c.sharing.local = {model("m", 1, {service("a", 42, 0)})};
  std::string commands;
  c.channel.appendPublish(commands);
  auto parsed = commandsOf(commands);
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0], (std::vector<std::string>{"SET", "pg:flow:me", "PF1\nm\t1\tm\nf\t0\t42\tbatch\ta\n", "PX",
                                                 "1500"}));
  EXPECT_EQ(c.sharing.asked_max, kMaxFlowServiceFlows);

  std::vector<std::string> others;
  for (int i = 99; i >= 0; --i) others.push_back("r" + std::to_string(100 + i));
  const std::vector<std::string> readable = FlowChannel::readable(others);
  ASSERT_EQ(readable.size(), kMaxFlowServiceReplicas);
  EXPECT_EQ(readable.front(), "r100");
  commands.clear();
  c.channel.appendRead(commands, {"r1", "r2"});
  EXPECT_EQ(commandsOf(commands)[0], (std::vector<std::string>{"MGET", "pg:flow:r1", "pg:flow:r2"}));

  const std::vector<std::string> ids = {"r1", "r2", "r3"};
  RedisReply nil;
  c.channel.apply(ids, values({bulk(encodeFlowService({model("m", 1, {service("a", 100, 0)})})), bulk("junk"), nil}));
  EXPECT_TRUE(c.sharing.charged.empty());  // r1's first text: a baseline
  EXPECT_EQ(c.metrics.flow_service_malformed.Value(), 1);
  std::string huge(kMaxFlowServiceBytes + 1, 'x');
  c.channel.apply(ids, values({bulk(encodeFlowService({model("m", 1, {service("a", 350, 0)})})), bulk(huge), nil}));
  EXPECT_EQ(amounts(c.sharing.charged), (Amounts{{"a", 250}}));
  EXPECT_EQ(c.metrics.flow_service_too_large.Value(), 1);
  EXPECT_EQ(c.metrics.flow_service_charges.Value(), 1);
  // r1 expired (nil), then came back: a baseline again, nothing charged.
  c.channel.apply(ids, values({nil, nil, nil}));
  c.channel.apply(ids, values({bulk(encodeFlowService({model("m", 1, {service("a", 900, 0)})})), nil, nil}));
  EXPECT_EQ(c.sharing.charged.size(), 1u);
  // An array where a string belongs, or a reply with fewer values than replicas: counted or ignored, no crash.
  c.channel.apply(ids, values({values({bulk("x")})}));
  EXPECT_EQ(c.metrics.flow_service_malformed.Value(), 2);
  c.channel.apply({}, RedisReply{});
}

}  // namespace
}  // namespace prefixgate::sync
