// What a finished request is charged against its key's tokens_per_minute (auth::chargedTokens): the engine's usage,
// else the gateway's own count of the prompt, so streams without usage cannot pass the limit for free (issue 24).
#include "auth/key_limiter.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace prefixgate::auth {
namespace {

// A response without usage (a stream without stream_options.include_usage) is charged the gateway's count of the
// prompt plus the chunks seen, once the engine took the request on; a reported usage is charged as reported.
TEST(ChargedTokens, WithoutUsageTheGatewaysPromptCountIsCharged) {
  EXPECT_EQ(chargedTokens(std::nullopt, 12, 25000, true), 25012u);
  EXPECT_EQ(chargedTokens(std::nullopt, 0, 25000, true), 25000u);  // the client left before the first chunk
  EXPECT_EQ(chargedTokens(120, 12, 25000, true), 132u);            // the engine's usage wins
  EXPECT_EQ(chargedTokens(0, 3, 25000, true), 3u);                 // even a reported 0
  EXPECT_EQ(chargedTokens(std::nullopt, 0, 25000, false), 0u);     // the engine refused it: nothing computed
  EXPECT_EQ(chargedTokens(std::nullopt, 5, -1, true), 5u);         // no count (no decision)
  EXPECT_EQ(chargedTokens(UINT64_MAX, 5, 0, true), UINT64_MAX);    // a bogus usage saturates, never wraps
}

// Ten streamed 25k-token prompts without usage, two chunks each, against a 100k tokens_per_minute key: the fifth
// is refused (they were charged 20 tokens in all before).
TEST(ChargedTokens, StreamsWithoutUsageExhaustTheAllowance) {
  KeyLimiter limiter(std::nullopt, 100000, 0);
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    if (!limiter.admit(0).admitted) break;
    ++admitted;
    limiter.charge(chargedTokens(std::nullopt, 2, 25000, true), 0);
  }
  EXPECT_EQ(admitted, 4);
}

}  // namespace
}  // namespace prefixgate::auth
