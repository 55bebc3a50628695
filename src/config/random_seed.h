#pragma once
// Seeds for every random generator of the gateway, derived from the top-level `random_seed` key. 0 keeps each one
// random (std::random_device); any other value gives each purpose and each thread its own reproducible stream.
// Pure (no state) apart from the random_device read when the seed is 0.
#include <cstdint>
#include <random>

namespace prefixgate::config {

// What a generator is for. The values are part of the derivation: renumbering one changes the streams that a
// given random_seed produces, so add new purposes at the end.
enum class SeedPurpose : uint64_t {
  kRouting = 1,       // an event-loop thread's generator (ties, the random strategy); index = the thread
  kRequestId = 2,     // an event-loop thread's request ids; index = the thread
  kControlPlane = 3,  // the control thread's generator (/debug/route decisions)
  kHashSeed = 4,      // the prefix hash seed when routing.prefix_cache.hash_seed is null and state sync is off
};

// splitmix64's output function: a bijection on 64 bits whose every output bit depends on every input bit, so
// seeds that differ in one bit (7 and 8, thread 0 and 1) give unrelated streams.
constexpr uint64_t mixSeed(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The seed of one generator: a function of (random_seed, purpose, index) when random_seed != 0. Chained rather
// than XORed together, so (seed, purpose, index) triples cannot cancel each other out.
constexpr uint64_t derivedSeed(uint64_t random_seed, SeedPurpose purpose, uint64_t index = 0) {
  return mixSeed(mixSeed(mixSeed(random_seed) ^ static_cast<uint64_t>(purpose)) ^ index);
}

// derivedSeed when random_seed != 0; else 64 bits from std::random_device (a fresh value on every call).
inline uint64_t streamSeed(uint64_t random_seed, SeedPurpose purpose, uint64_t index = 0) {
  if (random_seed != 0) return derivedSeed(random_seed, purpose, index);
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace prefixgate::config
