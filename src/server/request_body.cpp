#include "server/request_body.h"

#include <algorithm>

namespace prefixgate::server {

bool BodyBudget::tryCharge(uint64_t bytes) {
  uint64_t held = held_.load(std::memory_order_relaxed);
  // A compare-exchange, not an add then a check: a refused charge never shows, even briefly, as held.
  do {
    if (bytes > limit_ || held > limit_ - bytes) {
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  return true;
}

void BodyBudget::release(uint64_t bytes) { held_.fetch_sub(bytes, std::memory_order_relaxed); }

size_t nextBodyCapacity(size_t capacity, size_t needed, size_t limit) {
  const size_t doubled = capacity > limit / 2 ? limit : std::max(2 * capacity, kFirstBodyStepBytes);
  return std::max(needed, std::min(limit, doubled));
}

bool BodyCharge::reserve(std::string& body, size_t needed, size_t limit) {
  needed = std::min(needed, limit);
  if (needed <= charged_) return true;
  const size_t target = nextBodyCapacity(charged_, needed, limit);
  if (!budget_.tryCharge(target - charged_)) return false;
  charged_ = target;
  body.reserve(target + padding_);
  return true;
}

}  // namespace prefixgate::server
