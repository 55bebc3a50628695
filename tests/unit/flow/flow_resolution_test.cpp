#include "flow/flow_resolution.h"

#include <gtest/gtest.h>

#include <string>

namespace prefixgate::flow {
namespace {

// Three classes, highest first; `standard` is the default and carries its own TTFT objective.
FlowConfig threeClasses() {
  FlowConfig config;
  config.classes = {ClassSpec{"interactive", 0, 1000}, ClassSpec{"standard", 2000, 5000}, ClassSpec{"batch"}};
  config.default_class = "standard";
  config.min_ttft_slo_ms = 50;
  config.max_ttft_slo_ms = 60000;
  return config;
}

// Ensures the API key's name wins over the tenant header and the body's user.
TEST(FlowResolution, TenantFromKeyFirst) {
  const ResolvedFlow flow =
      resolveFlow(FlowRequest{.api_key_name = "team-a", .tenant_header = "hdr", .body_user = "u"}, threeClasses());
  EXPECT_EQ(flow.error, "");
  EXPECT_EQ(flow.tenant, "team-a");
}

// Ensures that without a key the tenant header wins over the body's user.
TEST(FlowResolution, TenantFromHeaderBeforeUser) {
  const ResolvedFlow flow = resolveFlow(FlowRequest{.tenant_header = "hdr", .body_user = "u"}, threeClasses());
  EXPECT_EQ(flow.tenant, "hdr");
}

// Ensures that without key and header the body's user names the tenant.
TEST(FlowResolution, TenantFromUser) {
  EXPECT_EQ(resolveFlow(FlowRequest{.body_user = "u"}, threeClasses()).tenant, "u");
}

// Ensures a request naming no tenant at all shares the one default flow.
TEST(FlowResolution, TenantDefault) {
  const ResolvedFlow flow = resolveFlow(FlowRequest{}, threeClasses());
  EXPECT_EQ(flow.error, "");
  EXPECT_EQ(flow.tenant, kDefaultTenant);
}

// Ensures a tenant of exactly the maximum length is accepted and one byte more is refused, naming the header.
TEST(FlowResolution, TenantTooLong) {
  const FlowConfig config = threeClasses();
  EXPECT_EQ(resolveFlow(FlowRequest{.tenant_header = std::string(kMaxTenantNameBytes, 'a')}, config).error, "");
  const ResolvedFlow flow =
      resolveFlow(FlowRequest{.tenant_header = std::string(kMaxTenantNameBytes + 1, 'a')}, config);
  EXPECT_NE(flow.error.find("x-tenant-id"), std::string::npos) << flow.error;
}

// Ensures control bytes, DEL and non-ASCII bytes in a tenant name are refused, naming where it came from.
TEST(FlowResolution, TenantNotPrintableAscii) {
  const FlowConfig config = threeClasses();
  for (const std::string& bad : {std::string("a\nb"), std::string("a\x7f"), std::string("caf\xc3\xa9"),
                                std::string("a\0b", 3)}) {
    const ResolvedFlow flow = resolveFlow(FlowRequest{.body_user = bad}, config);
    EXPECT_NE(flow.error.find("user"), std::string::npos) << flow.error;
  }
  EXPECT_EQ(resolveFlow(FlowRequest{.body_user = "a b~!"}, config).error, "");
}

// Ensures the key's own name is checked too (it becomes a metric label like any tenant).
TEST(FlowResolution, KeyNameChecked) {
  EXPECT_NE(resolveFlow(FlowRequest{.api_key_name = "bad\tname"}, threeClasses()).error, "");
}

// Ensures the key's priority class wins over the priority header.
TEST(FlowResolution, ClassFromKeyFirst) {
  const ResolvedFlow flow = resolveFlow(
      FlowRequest{.api_key_name = "k", .key_priority_class = "batch", .priority_header = "interactive"},
      threeClasses());
  EXPECT_EQ(flow.error, "");
  EXPECT_EQ(flow.class_index, 2u);
}

// Ensures the priority header picks the class when the key names none.
TEST(FlowResolution, ClassFromHeader) {
  EXPECT_EQ(resolveFlow(FlowRequest{.priority_header = "interactive"}, threeClasses()).class_index, 0u);
}

// Ensures a request naming no class gets default_class, and the lowest class when default_class is empty.
TEST(FlowResolution, ClassDefault) {
  FlowConfig config = threeClasses();
  EXPECT_EQ(resolveFlow(FlowRequest{}, config).class_index, 1u);
  config.default_class.clear();
  EXPECT_EQ(resolveFlow(FlowRequest{}, config).class_index, 2u);
}

// Ensures that without configured classes every request is in the single class `default`.
TEST(FlowResolution, NoClassesConfigured) {
  const FlowConfig config;
  ASSERT_EQ(classesOf(config).size(), 1u);
  EXPECT_EQ(classesOf(config)[0].name, kDefaultClassName);
  const ResolvedFlow flow = resolveFlow(FlowRequest{.priority_header = "default"}, config);
  EXPECT_EQ(flow.error, "");
  EXPECT_EQ(flow.class_index, 0u);
}

// Ensures an unknown class in the header is an error naming the header and the valid classes.
TEST(FlowResolution, UnknownClassHeader) {
  const ResolvedFlow flow = resolveFlow(FlowRequest{.priority_header = "urgent"}, threeClasses());
  EXPECT_NE(flow.error.find("x-request-priority"), std::string::npos) << flow.error;
  EXPECT_NE(flow.error.find("interactive, standard, batch"), std::string::npos) << flow.error;
}

// Ensures an unknown class in the key's settings is an error naming the key.
TEST(FlowResolution, UnknownClassInKey) {
  const ResolvedFlow flow =
      resolveFlow(FlowRequest{.api_key_name = "k1", .key_priority_class = "gold"}, threeClasses());
  EXPECT_NE(flow.error.find("k1"), std::string::npos) << flow.error;
}

// Ensures a malformed header that the key overrides is ignored rather than refused.
TEST(FlowResolution, OverriddenHeadersNotChecked) {
  const ResolvedFlow flow = resolveFlow(FlowRequest{.key_priority_class = "batch", .key_ttft_slo_ms = 500,
                                                    .priority_header = "nope", .slo_ttft_header = "abc"},
                                        threeClasses());
  EXPECT_EQ(flow.error, "");
  EXPECT_EQ(flow.ttft_slo_ms, 500u);
}

// Ensures the TTFT objective comes from the key, then the model, then the header, then the class.
TEST(FlowResolution, TtftPrecedence) {
  const FlowConfig config = threeClasses();
  EXPECT_EQ(resolveFlow(FlowRequest{.key_ttft_slo_ms = 300, .slo_ttft_header = "700", .model_ttft_slo_ms = 400},
                        config).ttft_slo_ms, 300u);
  EXPECT_EQ(resolveFlow(FlowRequest{.slo_ttft_header = "700", .model_ttft_slo_ms = 400}, config).ttft_slo_ms, 400u);
  EXPECT_EQ(resolveFlow(FlowRequest{.slo_ttft_header = "700"}, config).ttft_slo_ms, 700u);
  EXPECT_EQ(resolveFlow(FlowRequest{}, config).ttft_slo_ms, 2000u);  // class `standard`
  EXPECT_EQ(resolveFlow(FlowRequest{.priority_header = "batch"}, config).ttft_slo_ms, 0u);  // none
}

// Ensures every source of objective is clamped to [min_ttft_slo_ms, max_ttft_slo_ms], header 0 included.
TEST(FlowResolution, TtftClamped) {
  const FlowConfig config = threeClasses();
  EXPECT_EQ(resolveFlow(FlowRequest{.key_ttft_slo_ms = 10}, config).ttft_slo_ms, 50u);
  EXPECT_EQ(resolveFlow(FlowRequest{.model_ttft_slo_ms = 90000}, config).ttft_slo_ms, 60000u);
  EXPECT_EQ(resolveFlow(FlowRequest{.slo_ttft_header = "0"}, config).ttft_slo_ms, 50u);
  EXPECT_EQ(resolveFlow(FlowRequest{.slo_ttft_header = "99999999999999999999999"}, config).ttft_slo_ms, 60000u);
  EXPECT_EQ(resolveFlow(FlowRequest{.slo_ttft_header = " 1234 "}, config).ttft_slo_ms, 1234u);
}

// Ensures a negative, fractional, signed or non-numeric SLO header is an error naming the header.
TEST(FlowResolution, SloHeaderUnparsable) {
  for (const char* bad : {"-5", "1.5", "+10", "abc", "10ms", " ", "1 2"}) {
    const ResolvedFlow flow = resolveFlow(FlowRequest{.slo_ttft_header = bad}, threeClasses());
    EXPECT_NE(flow.error.find("x-slo-ttft-ms"), std::string::npos) << "'" << bad << "': " << flow.error;
  }
}

// Ensures validateFlowConfig accepts the defaults and names the field of each mistake.
TEST(FlowConfigValidation, NamesTheField) {
  EXPECT_EQ(validateFlowConfig(FlowConfig{}), "");
  EXPECT_EQ(validateFlowConfig(threeClasses()), "");
  FlowConfig config = threeClasses();
  config.default_class = "gold";
  EXPECT_NE(validateFlowConfig(config).find("default_class"), std::string::npos);
  config = threeClasses();
  config.classes.push_back(ClassSpec{"batch"});
  EXPECT_NE(validateFlowConfig(config).find("classes[3].name"), std::string::npos);
  config = threeClasses();
  config.min_ttft_slo_ms = 70000;
  EXPECT_NE(validateFlowConfig(config).find("min_ttft_slo_ms"), std::string::npos);
  config = threeClasses();
  config.max_queued_per_tenant = 0;
  EXPECT_NE(validateFlowConfig(config).find("max_queued"), std::string::npos);
  config = threeClasses();
  config.output_token_weight = -1;
  EXPECT_NE(validateFlowConfig(config).find("weight"), std::string::npos);
}

// Ensures a queued request's deadline is its class's max_wait_ms after it was queued.
TEST(FlowConfigValidation, QueueDeadline) {
  EXPECT_EQ(queueDeadlineMs(threeClasses(), 0, 100), 1100);
  EXPECT_EQ(queueDeadlineMs(threeClasses(), 2, 100), 30100);
}

}  // namespace
}  // namespace prefixgate::flow
