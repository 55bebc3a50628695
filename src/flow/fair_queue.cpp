#include "flow/fair_queue.h"

#include <algorithm>
#include <cmath>

namespace prefixgate::flow {

std::string_view reasonLabel(ShedReason reason) {
  switch (reason) {
    case ShedReason::kTenantQueueFull: return "tenant_queue_full";
    case ShedReason::kQueueFull: return "queue_full";
    case ShedReason::kTimeout: return "timeout";
    case ShedReason::kInvalid: return "invalid";
  }
  return "invalid";
}

int httpStatus(ShedReason reason) {
  switch (reason) {
    case ShedReason::kTenantQueueFull: return 429;
    case ShedReason::kQueueFull: return 503;
    case ShedReason::kTimeout: return 503;
    case ShedReason::kInvalid: return 500;
  }
  return 500;
}

struct FairQueue::Tenant {
  std::string name;
  size_t queued = 0;
  size_t bytes = 0;
  size_t live_flows = 0;
  uint32_t in_flight = 0;  // over its flows
  std::vector<std::unique_ptr<Flow>> flows;  // by class; null where the tenant has no flow
};

// One tenant within one class: the unit VTC is fair between.
struct FairQueue::Flow {
  Tenant* tenant = nullptr;
  size_t class_index = 0;
  double counter = 0;
  double local_service = 0;  // what this queue charged it (not remote service): what the other replicas learn
  uint64_t seq = 0;          // creation number
  std::list<Flow*>::iterator recent;  // in recent_
  uint32_t in_flight = 0;
  std::list<Entry> entries;  // FIFO
  std::optional<std::set<BacklogKey>::iterator> backlog;
  std::optional<std::set<IdleKey>::iterator> idle;
};

FairQueue::FairQueue(const FlowConfig& config)
    : specs_(classesOf(config)),
      max_queued_total_(config.max_queued_total),
      max_queued_per_tenant_(config.max_queued_per_tenant),
      max_queued_bytes_total_(config.max_queued_bytes_total),
      max_queued_bytes_per_tenant_(config.max_queued_bytes_per_tenant),
      max_tenants_(config.max_tenants),
      input_weight_(config.input_token_weight),
      output_weight_(config.output_token_weight),
      classes_(specs_.size()) {}

FairQueue::~FairQueue() = default;

// The counter a flow joining the backlog is lifted to (VTC): the smallest counter among the backlogged flows,
// or, with none, the counter of the last flow to leave. Never decreases: joiners are lifted to at least it,
// counters only grow, and leaving can only raise a minimum.
double FairQueue::floor(size_t class_index) const {
  const ClassState& c = classes_[class_index];
  return c.backlog.empty() ? c.last_left : c.backlog.begin()->counter;
}

FairQueue::Tenant* FairQueue::tenantFor(const std::string& name, bool create) {
  auto it = tenants_.find(name);
  if (it != tenants_.end()) return it->second.get();
  if (!create) return nullptr;
  auto tenant = std::make_unique<Tenant>();
  tenant->name = name;
  tenant->flows.resize(specs_.size());
  return tenants_.emplace(name, std::move(tenant)).first->second.get();
}

FairQueue::Flow* FairQueue::flowFor(Tenant& tenant, size_t class_index) {
  std::unique_ptr<Flow>& flow = tenant.flows[class_index];
  if (!flow) {
    flow = std::make_unique<Flow>();
    flow->tenant = &tenant;
    flow->class_index = class_index;
    flow->seq = flows_created_++;
    // At the back: not served yet. servedLocally() moves it to the front.
    flow->recent = recent_.insert(recent_.end(), flow.get());
    ++tenant.live_flows;
    ++flows_;
  }
  return flow.get();
}

FairQueue::Flow* FairQueue::findFlow(const std::string& tenant, size_t class_index) const {
  if (class_index >= specs_.size()) return nullptr;
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? nullptr : it->second->flows[class_index].get();
}

size_t FairQueue::tenantCount() const {
  return tenants_.size() - (tenants_.count(std::string(kOverflowTenant)) ? 1 : 0);
}

size_t FairQueue::queuedAhead(const std::string& tenant, size_t class_index) const {
  size_t ahead = 0;
  for (size_t c = 0; c < class_index && c < classes_.size(); ++c) ahead += classes_[c].queued;
  if (const Flow* flow = findFlow(tenant, class_index)) ahead += flow->entries.size();
  return ahead;
}

std::optional<double> FairQueue::counter(const std::string& tenant, size_t class_index) const {
  const Flow* flow = findFlow(tenant, class_index);
  if (!flow) return std::nullopt;
  return flow->counter;
}

EnqueueResult FairQueue::enqueue(Item item) {
  EnqueueResult result;
  if (item.class_index >= specs_.size() || by_id_.count(item.id)) {
    result.shed = ShedReason::kInvalid;
    result.flow = item.tenant;
    return result;
  }
  Tenant* tenant = tenantFor(item.tenant, false);
  if (!tenant && !makeRoomForTenant()) {
    item.tenant = std::string(kOverflowTenant);
    tenant = tenantFor(item.tenant, false);
  }
  result.flow = item.tenant;
  if (item.deadline_ms <= item.enqueued_ms) {
    result.shed = ShedReason::kTimeout;
  } else if ((tenant ? tenant->queued : 0) + 1 > max_queued_per_tenant_ ||
             (tenant ? tenant->bytes : 0) + item.bytes > max_queued_bytes_per_tenant_) {
    result.shed = ShedReason::kTenantQueueFull;
  } else if (queued_ + 1 > max_queued_total_ || bytes_ + item.bytes > max_queued_bytes_total_) {
    result.shed = ShedReason::kQueueFull;
  }
  if (result.shed) return result;

  if (!tenant) tenant = tenantFor(item.tenant, true);
  Flow& flow = *flowFor(*tenant, item.class_index);
  ClassState& c = classes_[item.class_index];
  if (flow.idle) {
    c.idle.erase(*flow.idle);
    flow.idle.reset();
  }
  const bool joins = flow.entries.empty();
  if (joins) flow.counter = std::max(flow.counter, floor(item.class_index));  // idle time is not banked
  ++tenant->queued;
  tenant->bytes += item.bytes;
  ++c.queued;
  c.bytes += item.bytes;
  ++queued_;
  bytes_ += item.bytes;
  by_deadline_.emplace(item.deadline_ms, item.id);
  const uint64_t id = item.id;
  flow.entries.push_back(Entry{std::move(item), next_seq_++});
  by_id_.emplace(id, Location{&flow, std::prev(flow.entries.end())});
  if (joins)
    flow.backlog = c.backlog.insert(BacklogKey{flow.counter, flow.in_flight, flow.entries.front().seq, &flow}).first;
  // A joiner whose own counter is above the floor raises it when it is the only one backlogged.
  forgetBelowFloor(flow.class_index);
  return result;
}

// Unlinks one queued entry from every index and the totals; the flow's backlog key is the caller's to fix.
FairQueue::Item FairQueue::removeEntry(Flow& flow, std::list<Entry>::iterator entry) {
  Item item = std::move(entry->item);
  flow.entries.erase(entry);
  by_id_.erase(item.id);
  by_deadline_.erase({item.deadline_ms, item.id});
  ClassState& c = classes_[flow.class_index];
  --flow.tenant->queued;
  flow.tenant->bytes -= item.bytes;
  --c.queued;
  c.bytes -= item.bytes;
  --queued_;
  bytes_ -= item.bytes;
  return item;
}

// Re-keys a flow in its class's backlog after its counter or head changed, or takes it out when empty.
void FairQueue::rekey(Flow& flow) {
  ClassState& c = classes_[flow.class_index];
  if (flow.backlog) {
    c.backlog.erase(*flow.backlog);
    flow.backlog.reset();
  }
  if (!flow.entries.empty()) {
    flow.backlog = c.backlog.insert(BacklogKey{flow.counter, flow.in_flight, flow.entries.front().seq, &flow}).first;
  } else if (c.backlog.empty()) {
    c.last_left = std::max(c.last_left, flow.counter);  // makeRoomForTenant may have raised it already
  }
}

// A flow with nothing queued and nothing in flight is idle: forgotten at once when its counter is at or below
// the floor (a lift on its return would take it there anyway; the floor never decreases), else kept aside until
// the floor catches up.
void FairQueue::settle(Flow& flow) {
  if (!flow.entries.empty() || flow.in_flight > 0) return;
  ClassState& c = classes_[flow.class_index];
  if (flow.idle) {
    c.idle.erase(*flow.idle);
    flow.idle.reset();
  }
  if (flow.counter <= floor(flow.class_index)) {
    destroy(flow);
    return;
  }
  flow.idle = c.idle.insert(IdleKey{flow.counter, &flow}).first;
}

void FairQueue::forgetBelowFloor(size_t class_index) {
  ClassState& c = classes_[class_index];
  const double f = floor(class_index);
  while (!c.idle.empty() && c.idle.begin()->counter <= f) {
    Flow& flow = *c.idle.begin()->flow;
    c.idle.erase(c.idle.begin());
    flow.idle.reset();
    destroy(flow);
  }
}

bool FairQueue::makeRoomForTenant() {
  for (size_t forgotten = 0; tenantCount() >= max_tenants_; ++forgotten) {
    if (forgotten == kMaxForgottenForRoom) return false;
    // The idle flow whose counter is nearest its class's floor: forgetting it loses the least.
    Flow* victim = nullptr;
    double least = 0;
    for (size_t i = 0; i < classes_.size(); ++i) {
      if (classes_[i].idle.empty()) continue;
      const double above = classes_[i].idle.begin()->counter - floor(i);
      if (!victim || above < least) {
        victim = classes_[i].idle.begin()->flow;
        least = above;
      }
    }
    if (!victim) return false;  // every tracked flow has something queued or in flight
    const size_t class_index = victim->class_index;
    ClassState& c = classes_[class_index];
    c.idle.erase(*victim->idle);
    victim->idle.reset();
    // With nothing backlogged, newcomers start where it was (its service stays counted against whoever joins
    // next); with a backlog, the floor already decides where a joiner starts.
    if (c.backlog.empty()) c.last_left = std::max(c.last_left, victim->counter);
    destroy(*victim);
    forgetBelowFloor(class_index);
  }
  return true;
}

void FairQueue::destroy(Flow& flow) {
  Tenant& tenant = *flow.tenant;
  const size_t class_index = flow.class_index;
  recent_.erase(flow.recent);
  tenant.flows[class_index].reset();  // `flow` is gone from here on
  --flows_;
  // Erased by iterator: erasing by `tenant.name` would compare against a key being destroyed.
  if (--tenant.live_flows == 0) tenants_.erase(tenants_.find(tenant.name));
}

std::optional<FairQueue::Item> FairQueue::popNext(const std::function<bool(const std::string&)>& eligible) {
  for (size_t i = 0; i < classes_.size(); ++i) {
    ClassState& c = classes_[i];
    auto next = c.backlog.begin();
    if (eligible)
      while (next != c.backlog.end() && !eligible(next->flow->tenant->name)) ++next;
    if (next == c.backlog.end()) continue;
    Flow& flow = *next->flow;
    Item item = removeEntry(flow, flow.entries.begin());
    const double service = static_cast<double>(item.prompt_tokens) * input_weight_;
    flow.counter += service;
    servedLocally(flow, service);
    countInFlight(flow);
    rekey(flow);
    forgetBelowFloor(i);
    return item;
  }
  return std::nullopt;
}

std::string FairQueue::admitDirect(const std::string& name, size_t class_index, uint64_t prompt_tokens) {
  if (class_index >= specs_.size()) return name;
  Tenant* tenant = tenantFor(name, false);
  std::string flow_name = name;
  if (!tenant && !makeRoomForTenant()) {
    flow_name = std::string(kOverflowTenant);
    tenant = tenantFor(flow_name, false);
  }
  if (!tenant) tenant = tenantFor(flow_name, true);
  Flow& flow = *flowFor(*tenant, class_index);
  ClassState& c = classes_[class_index];
  if (flow.idle) {
    c.idle.erase(*flow.idle);
    flow.idle.reset();
  }
  if (flow.entries.empty() && flow.in_flight == 0) flow.counter = std::max(flow.counter, floor(class_index));
  const double service = static_cast<double>(prompt_tokens) * input_weight_;
  flow.counter += service;
  servedLocally(flow, service);
  countInFlight(flow);
  if (flow.backlog) rekey(flow);
  forgetBelowFloor(class_index);
  return flow_name;
}

bool FairQueue::cancel(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  Flow& flow = *it->second.flow;
  const size_t class_index = flow.class_index;
  removeEntry(flow, it->second.entry);
  rekey(flow);
  settle(flow);
  forgetBelowFloor(class_index);
  return true;
}

std::vector<FairQueue::Item> FairQueue::expire(int64_t now_ms) {
  std::vector<Item> expired;
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now_ms) {
    const Location location = by_id_.find(by_deadline_.begin()->second)->second;  // both indexes hold every item
    Flow& flow = *location.flow;
    const size_t class_index = flow.class_index;
    expired.push_back(removeEntry(flow, location.entry));
    rekey(flow);
    settle(flow);
    forgetBelowFloor(class_index);
  }
  return expired;
}

void FairQueue::charge(const std::string& tenant, size_t class_index, uint64_t output_tokens) {
  Flow* flow = findFlow(tenant, class_index);
  if (!flow) return;
  const double service = static_cast<double>(output_tokens) * output_weight_;
  flow->counter += service;
  servedLocally(*flow, service);
  if (flow->backlog) rekey(*flow);
  if (flow->idle) settle(*flow);
  forgetBelowFloor(class_index);
}

void FairQueue::finished(const std::string& tenant, size_t class_index) {
  Flow* flow = findFlow(tenant, class_index);
  if (!flow || flow->in_flight == 0) return;
  --flow->in_flight;
  --flow->tenant->in_flight;
  --in_flight_;
  if (flow->backlog) rekey(*flow);  // its place among equal counters
  settle(*flow);
}

void FairQueue::countInFlight(Flow& flow) {
  ++flow.in_flight;
  ++flow.tenant->in_flight;
  ++in_flight_;
}

uint32_t FairQueue::tenantInFlight(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second->in_flight;
}

bool FairQueue::othersActive(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  const size_t own = it == tenants_.end() ? 0 : it->second->queued + it->second->in_flight;
  return queued_ + in_flight_ > own;
}

void FairQueue::servedLocally(Flow& flow, double amount) {
  if (amount <= 0) return;
  flow.local_service += amount;
  recent_.splice(recent_.begin(), recent_, flow.recent);
}

std::vector<LocalService> FairQueue::localService(size_t max_flows) const {
  std::vector<LocalService> out;
  // Served flows are all in front of the unserved ones, which are listed too (total 0) while the bound allows: a
  // reader that saw a flow listed at 0 charges its first service in full, where a flow it never saw listed, but
  // older than its previous text, only sets a baseline (it was left out by the bound).
  for (auto it = recent_.begin(); it != recent_.end() && out.size() < max_flows; ++it) {
    const Flow& flow = **it;
    out.push_back(LocalService{flow.tenant->name, flow.class_index, flow.local_service, flow.seq});
  }
  return out;
}

void FairQueue::chargeRemote(const std::string& tenant, size_t class_index, double amount) {
  if (!std::isfinite(amount) || amount <= 0) return;
  Flow* flow = findFlow(tenant, class_index);
  if (!flow) return;  // not tracked: its return lifts it to the floor whatever it was served elsewhere
  // Counters only grow, as charge() does, so the floor still never decreases; the flow is re-keyed where it waits.
  flow->counter += std::min(amount, kMaxRemoteCharge);
  if (flow->backlog) rekey(*flow);
  if (flow->idle) settle(*flow);
  forgetBelowFloor(class_index);
}

QueueSnapshot FairQueue::snapshot() const {
  QueueSnapshot out;
  out.queued = queued_;
  out.bytes = bytes_;
  out.tenants_tracked = tenantCount();
  out.classes.resize(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    out.classes[i].name = specs_[i].name;
    out.classes[i].queued = classes_[i].queued;
    out.classes[i].bytes = classes_[i].bytes;
  }
  for (const auto& [name, tenant] : tenants_) {
    for (const std::unique_ptr<Flow>& flow : tenant->flows) {
      if (!flow) continue;
      size_t bytes = 0;
      for (const Entry& e : flow->entries) bytes += e.item.bytes;
      out.classes[flow->class_index].tenants.push_back(
          TenantSnapshot{name, flow->entries.size(), bytes, flow->counter, flow->in_flight});
    }
  }
  for (ClassSnapshot& c : out.classes) {
    std::sort(c.tenants.begin(), c.tenants.end(),
              [](const TenantSnapshot& a, const TenantSnapshot& b) { return a.tenant < b.tenant; });
  }
  return out;
}

}  // namespace prefixgate::flow
