// API keys: the keys file's parsing and validation, the constant-time lookup, the per-key token buckets (with an
// injected clock) and reloads that keep a key's windows.
#include "auth/api_keys.h"

#include <gtest/gtest.h>

#include "auth/credentials.h"
#include "auth/request_check.h"
#include "config/config.h"
#include "unit/problems.h"

namespace prefixgate::auth {
namespace {

using testing::hasProblem;

std::string joined(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) out += p + "\n";
  return out;
}

// The contract's example parses into every field.
TEST(ApiKeysFile, ParsesTheContractExample) {
  std::vector<std::string> problems;
  auto specs = parseApiKeysFile(
      "keys:\n"
      "  - name: team-a\n"
      "    key: sk-team-a-0123456789\n"
      "    models: [my-model]\n"
      "    requests_per_minute: 600\n"
      "    tokens_per_minute: 200000\n"
      "  - {name: team-b, key: sk-b}\n",
      "/etc/keys.yaml", problems);
  ASSERT_TRUE(problems.empty()) << joined(problems);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "team-a");
  EXPECT_EQ(specs[0].key, "sk-team-a-0123456789");
  EXPECT_EQ(specs[0].models, std::vector<std::string>{"my-model"});
  EXPECT_EQ(specs[0].requests_per_minute, 600u);
  EXPECT_EQ(specs[0].tokens_per_minute, 200000u);
  EXPECT_TRUE(specs[1].models.empty());
  EXPECT_FALSE(specs[1].requests_per_minute);
  EXPECT_FALSE(specs[1].tokens_per_minute);
}

// Every rule is checked, each problem names the file, the entry (index and name) and the field, and no message
// contains a key.
TEST(ApiKeysFile, ValidationNamesFileEntryAndFieldButNeverTheKey) {
  std::vector<std::string> problems;
  parseApiKeysFile(
      "keys:\n"
      "  - {name: a, key: secret-one, requests_per_minute: 0}\n"
      "  - {name: a, key: secret-two, tokens_per_minute: 0}\n"
      "  - {name: c, key: secret-one}\n"
      "  - {name: d, key: ''}\n"
      "  - {key: secret-three, colour: red}\n"
      "  - {name: f, key: secret-four, requests_per_minute: -5}\n",
      "/etc/keys.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[0] (a).requests_per_minute: must be greater than 0"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[1] (a).name: duplicate name (also keys[0] (a))"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[1] (a).tokens_per_minute: must be greater than 0"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[2] (c).key: the same key as keys[0] (a)"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[3] (d).key: required and must not be empty"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[4].name: required"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[4].colour: unknown key"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[5] (f).requests_per_minute: expected"));
  EXPECT_EQ(problems.size(), 8u) << joined(problems);
  for (const auto& p : problems) EXPECT_EQ(p.find("secret"), std::string::npos) << p;
}

// Ensures a key's flow-control fields are read and reach the key set, that with flow control on (its class names
// given) an unknown class names the entry and the classes, and that a zero objective is refused; with flow control
// off (no names) any class is accepted, unused.
TEST(ApiKeysFile, FlowControlClassAndObjective) {
  const std::string text =
      "keys:\n"
      "  - {name: a, key: sk-a, priority_class: interactive, ttft_slo_ms: 1500}\n"
      "  - {name: b, key: sk-b, priority_class: gold}\n"
      "  - {name: c, key: sk-c, ttft_slo_ms: 0}\n";
  std::vector<std::string> problems;
  parseApiKeysFile(text, "/etc/keys.yaml", problems, {"interactive", "batch"});
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[1] (b).priority_class: unknown class 'gold' "
                                   "(flow_control.classes: interactive, batch)"));
  EXPECT_TRUE(hasProblem(problems, "/etc/keys.yaml: keys[2] (c).ttft_slo_ms: must be from 1"));
  EXPECT_EQ(problems.size(), 2u) << joined(problems);
  problems.clear();
  auto specs = parseApiKeysFile("keys:\n  - {name: a, key: sk-a, priority_class: interactive, ttft_slo_ms: 1500}\n"
                                "  - {name: b, key: sk-b, priority_class: gold}\n",
                                "/etc/keys.yaml", problems);
  ASSERT_TRUE(problems.empty()) << joined(problems);
  ApiKeySet set(std::move(specs), nullptr, 0);
  auto a = set.find("sk-a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->priority_class, "interactive");
  EXPECT_EQ(a->ttft_slo_ms, 1500u);
  EXPECT_EQ(set.find("sk-b")->ttft_slo_ms, 0u);
}

// A file that is not a list of keys is one clear problem.
TEST(ApiKeysFile, RejectsAFileWithoutAKeysList) {
  std::vector<std::string> problems;
  parseApiKeysFile("users: []\n", "k.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "k.yaml: keys: required")) << joined(problems);
  problems.clear();
  parseApiKeysFile("keys: {a: b}\n", "k.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "k.yaml: keys: expected a list")) << joined(problems);
  problems.clear();
  parseApiKeysFile("keys: [\n", "k.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "k.yaml: line")) << joined(problems);
}

// Equal bytes compare equal; any difference (a byte anywhere, a prefix, a longer string) does not.
TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(constantTimeEquals("sk-abc", "sk-abc"));
  EXPECT_TRUE(constantTimeEquals("", ""));
  EXPECT_FALSE(constantTimeEquals("sk-abc", "sk-abd"));
  EXPECT_FALSE(constantTimeEquals("xk-abc", "sk-abc"));
  EXPECT_FALSE(constantTimeEquals("sk-ab", "sk-abc"));
  EXPECT_FALSE(constantTimeEquals("sk-abc", "sk-ab"));
  EXPECT_FALSE(constantTimeEquals("", "sk"));
  EXPECT_FALSE(constantTimeEquals(std::string_view("a\0", 2), "a"));
}

// The lookup finds the key whose secret matches exactly (whatever its position), and nothing for near misses.
TEST(ApiKeySet, FindsOnlyAnExactKey) {
  ApiKeySet set({{"a", "sk-aaaa", {}, {}, {}}, {"b", "sk-bbbb", {"m1"}, {}, {}}, {"c", "sk-cccc", {}, {}, {}}}, nullptr, 0);
  ASSERT_TRUE(set.find("sk-bbbb"));
  EXPECT_EQ(set.find("sk-bbbb")->name, "b");
  EXPECT_EQ(set.find("sk-cccc")->name, "c");
  EXPECT_FALSE(set.find("sk-bbb"));
  EXPECT_FALSE(set.find("sk-bbbbb"));
  EXPECT_FALSE(set.find(""));
  EXPECT_TRUE(set.find("sk-bbbb")->allows("m1"));
  EXPECT_FALSE(set.find("sk-bbbb")->allows("m2"));
  EXPECT_TRUE(set.find("sk-aaaa")->allows("anything"));
}

// Ensures a token longer than the longest key is refused without being read: find() digests nothing for it (the
// old lookup compared it with every key, byte by byte).
TEST(ApiKeyLookup, OverlongTokenIsRefusedWithoutBeingDigested) {
  std::vector<ApiKeySpec> specs;
  for (int i = 0; i < 10; ++i)
    specs.push_back({"key-" + std::to_string(i), "sk-" + std::string(36, static_cast<char>('a' + i)), {}, {}, {}});
  ApiKeySet set(std::move(specs), nullptr, 0);
  EXPECT_EQ(set.longestKeyBytes(), 39u);
  const uint64_t before = ApiKeySet::digestsOnThisThread();
  EXPECT_FALSE(set.find(std::string(15000, 'k')));
  EXPECT_EQ(ApiKeySet::digestsOnThisThread(), before);
  EXPECT_FALSE(set.find(std::string(39, 'k')));  // a token within the longest key's length is digested once
  EXPECT_EQ(ApiKeySet::digestsOnThisThread(), before + 1);
}

TEST(BearerToken, AcceptsOnlyTheBearerScheme) {
  EXPECT_EQ(bearerToken("Bearer sk-1"), "sk-1");
  EXPECT_EQ(bearerToken("bearer  sk-1 "), "sk-1");
  EXPECT_EQ(bearerToken("Basic c2stMQ=="), "");
  EXPECT_EQ(bearerToken("sk-1"), "");
  EXPECT_EQ(bearerToken("Bearer "), "");
  EXPECT_EQ(bearerToken(""), "");
}

// requests_per_minute: a full minute's burst, then one request per 60/N s; retry-after is the wait for the next.
TEST(KeyLimiter, RequestsRefillAtTheMinuteRateWithRetryAfter) {
  int64_t now = 1000000;
  KeyLimiter limiter(6, std::nullopt, now);  // one request every 10 s once the burst is spent
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(limiter.admit(now).admitted) << i;
  Admission refused = limiter.admit(now);
  EXPECT_FALSE(refused.admitted);
  EXPECT_EQ(refused.limit, LimitKind::kRequests);
  EXPECT_EQ(refused.retry_after_s, 10u);
  now += 4000;
  EXPECT_EQ(limiter.admit(now).retry_after_s, 6u);
  now += 6000;
  EXPECT_TRUE(limiter.admit(now).admitted);
  EXPECT_FALSE(limiter.admit(now).admitted);
  // A quiet minute refills the whole burst, never more.
  now += 600000;
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(limiter.admit(now).admitted) << i;
  EXPECT_FALSE(limiter.admit(now).admitted);
}

// tokens_per_minute: charged after the response; admission stops once the allowance is spent (a response may
// overshoot it) and resumes when the debt has refilled.
TEST(KeyLimiter, TokensAreChargedAfterwardsAndRefill) {
  int64_t now = 0;
  KeyLimiter limiter(std::nullopt, 600, now);  // 10 tokens a second
  EXPECT_TRUE(limiter.admit(now).admitted);
  limiter.charge(500, now);
  EXPECT_TRUE(limiter.admit(now).admitted);  // 100 left
  limiter.charge(400, now);                  // 300 over
  Admission refused = limiter.admit(now);
  EXPECT_FALSE(refused.admitted);
  EXPECT_EQ(refused.limit, LimitKind::kTokens);
  EXPECT_EQ(refused.retry_after_s, 31u);  // 300 tokens of debt at 10/s bring it to 0 in 30 s: not yet above it
  now += 30000;
  EXPECT_FALSE(limiter.admit(now).admitted);  // exactly at 0: the whole allowance is spent
  EXPECT_EQ(limiter.admit(now).retry_after_s, 1u);
  now += 1000;
  EXPECT_TRUE(limiter.admit(now).admitted);
  // A clock that steps back refills nothing.
  limiter.charge(100, now);
  EXPECT_FALSE(limiter.admit(now - 50000).admitted);
}

// No limits: every request is admitted whatever is charged.
TEST(KeyLimiter, UnlimitedAdmitsEverything) {
  KeyLimiter limiter(std::nullopt, std::nullopt, 0);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(limiter.admit(0).admitted);
    limiter.charge(1000000, 0);
  }
}

// A reload keeps the windows of names it keeps (with their new limits) and starts new names full.
TEST(ApiKeySet, ReloadKeepsTheWindowsOfUnchangedNames) {
  ApiKeySet first({{"a", "sk-a", {}, 2, {}}, {"b", "sk-b", {}, 2, {}}}, nullptr, 0);
  auto a = first.find("sk-a");
  EXPECT_TRUE(a->limiter->admit(0).admitted);
  EXPECT_TRUE(a->limiter->admit(0).admitted);
  EXPECT_FALSE(a->limiter->admit(0).admitted);
  // "a" gets a new secret and a higher limit; "b" is dropped; "c" is new.
  ApiKeySet second({{"a", "sk-a2", {}, 3, {}}, {"c", "sk-c", {}, 1, {}}}, &first, 0);
  EXPECT_FALSE(second.find("sk-a"));
  auto a2 = second.find("sk-a2");
  EXPECT_EQ(a2->limiter, a->limiter);
  EXPECT_FALSE(a2->limiter->admit(0).admitted);  // still spent: the window survived
  EXPECT_TRUE(second.find("sk-c")->limiter->admit(0).admitted);
  // A lower limit caps what is left; removing the limit admits at once.
  ApiKeySet third({{"a", "sk-a2", {}, std::nullopt, {}}}, &second, 0);
  EXPECT_TRUE(third.find("sk-a2")->limiter->admit(0).admitted);
}

// The request checks: 401 without or with an unknown key, 403 outside the models, 429 with retry-after, and the
// refusals never carry the key.
TEST(RequestCheck, RefusalsHaveTheirStatusAndNeverTheKey) {
  ApiKeySet set({{"team-a", "sk-secret-a", {"m1"}, 1, {}}}, nullptr, 0);
  std::shared_ptr<const ApiKey> key;
  EXPECT_EQ(authenticate(set, "", "", key)->error, openai::GatewayError::kUnauthorized);
  EXPECT_EQ(authenticate(set, "Bearer sk-secret-b", "", key)->reason, "invalid_api_key");
  EXPECT_EQ(authenticate(set, "Basic sk-secret-a", "", key)->reason, "missing_api_key");
  EXPECT_FALSE(authenticate(set, "Bearer sk-secret-a", "", key));
  ASSERT_TRUE(key);
  // Anthropic's x-api-key presents the key itself when there is no authorization header (which otherwise wins).
  key.reset();
  EXPECT_FALSE(authenticate(set, "", "sk-secret-a", key));
  EXPECT_EQ(key->name, "team-a");
  EXPECT_EQ(authenticate(set, "", "sk-secret-b", key)->reason, "invalid_api_key");
  EXPECT_EQ(authenticate(set, "Bearer sk-secret-b", "sk-secret-a", key)->reason, "invalid_api_key");
  EXPECT_EQ(authenticate(set, "Basic x", "sk-secret-a", key)->reason, "missing_api_key");
  EXPECT_FALSE(authenticate(set, "Bearer sk-secret-a", "", key));
  auto forbidden = authorize(*key, "m2", 0);
  ASSERT_TRUE(forbidden);
  EXPECT_EQ(forbidden->error, openai::GatewayError::kForbidden);
  EXPECT_EQ(forbidden->param, "model");
  EXPECT_FALSE(authorize(*key, "m1", 0));
  auto limited = authorize(*key, "m1", 0);
  ASSERT_TRUE(limited);
  EXPECT_EQ(limited->error, openai::GatewayError::kRateLimited);
  EXPECT_EQ(limited->retry_after_s, 60u);
  for (const auto& r : {*forbidden, *limited}) EXPECT_EQ(r.message.find("sk-secret"), std::string::npos) << r.message;
}

// The admin token file: surrounding white space is not part of the token; an empty file is a problem.
TEST(AdminToken, TrimsAndRejectsEmpty) {
  std::vector<std::string> problems;
  EXPECT_EQ(parseAdminToken("  tok-1\n", "/run/t", problems), "tok-1");
  EXPECT_TRUE(problems.empty());
  parseAdminToken("\n\t ", "/run/t", problems);
  EXPECT_TRUE(hasProblem(problems, "/run/t: the admin token file is empty"));
}

// Credentials::load reports a missing file by name and publishes nothing from a bad one.
TEST(Credentials, LoadReportsMissingAndBadFiles) {
  config::AuthConfig cfg;
  cfg.api_keys_file = "/nonexistent/keys.yaml";
  cfg.admin_token_file = "/nonexistent/token";
  Credentials credentials(cfg, [] { return int64_t{0}; });
  std::vector<std::string> problems;
  EXPECT_FALSE(credentials.load(problems));
  EXPECT_TRUE(hasProblem(problems, "/nonexistent/keys.yaml: cannot read the API keys file (auth.api_keys_file)"));
  EXPECT_TRUE(hasProblem(problems, "/nonexistent/token: cannot read the admin token file"));
  EXPECT_FALSE(credentials.apiKeys());
  EXPECT_FALSE(credentials.adminToken());
  // Nothing configured: nothing to load, no keys needed.
  Credentials none(config::AuthConfig{}, [] { return int64_t{0}; });
  problems.clear();
  EXPECT_TRUE(none.load(problems));
  EXPECT_FALSE(none.apiKeys());
}

}  // namespace
}  // namespace prefixgate::auth
