#pragma once
// The gateway's queue while its pods are saturated (issue 27; docs/flow-control.md): strict priority between
// classes, and within a class fair sharing between tenants by tokens served (Virtual Token Counter, "Fairness in
// Serving Large Language Models", Sheng et al., OSDI'24). Bounded in items, bytes, time and tenants tracked.
//
// Pure and single-threaded: no clock (times are passed in, in ms), no locks (the caller serialises every call),
// no exceptions (misuse is answered, not thrown).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "flow/flow_config.h"

namespace prefixgate::flow {

// Why a request left (or never entered) the queue without being dispatched.
enum class ShedReason {
  kTenantQueueFull,  // its tenant's own queue length or bytes bound: the tenant's quota (429)
  kQueueFull,        // the total queue length or bytes bound: the gateway's capacity (503)
  kTimeout,          // waited past its deadline (503)
  kInvalid,          // the caller's bug: unknown class, id already queued (500)
};
// Stable label for logs and metrics: tenant_queue_full, queue_full, timeout, invalid.
std::string_view reasonLabel(ShedReason reason);
int httpStatus(ShedReason reason);

struct QueuedItem {
  uint64_t id = 0;     // unique among queued items (cancel() names it)
  std::string tenant;  // from resolveFlow; on the way out, the flow it was queued in (kOverflowTenant past the cap)
  size_t class_index = 0;
  size_t bytes = 0;  // counted against the byte bounds
  uint64_t prompt_tokens = 0;
  int64_t enqueued_ms = 0;
  int64_t deadline_ms = 0;  // expire() removes it once now_ms >= deadline_ms (see queueDeadlineMs)
};

struct EnqueueResult {
  std::optional<ShedReason> shed;  // empty: queued
  std::string flow;                // the tenant it was counted under
  bool queued() const { return !shed; }
  std::string_view reasonLabel() const { return shed ? flow::reasonLabel(*shed) : std::string_view("queued"); }
};

struct TenantSnapshot {
  std::string tenant;
  size_t queued = 0;
  size_t bytes = 0;
  double counter = 0;
  uint32_t in_flight = 0;
};
struct ClassSnapshot {
  std::string name;
  size_t queued = 0;
  size_t bytes = 0;
  std::vector<TenantSnapshot> tenants;  // every flow tracked in the class, by tenant name
};
// The VTC service one flow was given by this queue itself (see FairQueue::localService).
struct LocalService {
  std::string tenant;
  size_t class_index = 0;
  double total = 0;       // prompt tokens x input weight at dispatch + output tokens x output weight charged
  uint64_t flow_seq = 0;  // the flow's creation number in this queue (flowsCreated() counts them)
};

// The most service one chargeRemote() call adds: far above what any replica serves a flow between two reads,
// and low enough that a hostile amount cannot lift a counter to where doubles stop counting single tokens.
inline constexpr double kMaxRemoteCharge = 1e12;

struct QueueSnapshot {
  size_t queued = 0;
  size_t bytes = 0;
  size_t tenants_tracked = 0;  // not counting kOverflowTenant
  std::vector<ClassSnapshot> classes;
};

class FairQueue {
 public:
  using Item = QueuedItem;

  // Takes what it needs from `config` (which validateFlowConfig should have accepted).
  explicit FairQueue(const FlowConfig& config);
  ~FairQueue();
  FairQueue(const FairQueue&) = delete;
  FairQueue& operator=(const FairQueue&) = delete;

  // Queues `item`, or sheds it (checked in this order): kInvalid for an unknown class or a queued id, kTimeout
  // when deadline_ms <= enqueued_ms, kTenantQueueFull when its tenant's count or bytes would pass the per-tenant
  // bound, kQueueFull when the totals would. A shed item changes nothing but the idle flows forgotten to make its
  // tenant a place. A tenant not tracked while max_tenants are takes the place of idle flows (nothing queued or in
  // flight), the one nearest its class's floor first; only when every tracked tenant is active is it queued as
  // kOverflowTenant.
  EnqueueResult enqueue(Item item);
  // Removes and returns the next item to dispatch: from the highest class with anything queued, the tenant with
  // the smallest counter (ties: the one whose oldest item was queued first), its oldest item. Charges the
  // prompt tokens x input weight to that tenant and counts the item in flight until finished().
  // `eligible` (optional): a flow whose tenant it refuses is passed over, keeping its place (flow control's tenant
  // share: docs/flow-control.md); nothing is returned when it refuses every backlogged flow.
  std::optional<Item> popNext(const std::function<bool(const std::string& tenant)>& eligible = nullptr);
  // A request of `tenant` in `class_index` that goes straight to a pod (nothing was queued for the model): its flow
  // is charged the prompt tokens x input weight, as popNext charges a dispatched item (after the lift of a flow
  // neither backlogged nor in flight: idle time is not banked), and counts it in flight until finished(). So what a
  // tenant is served while the fleet has room counts once it saturates: a burst that took every free slot is not
  // free. Returns the flow charged (kOverflowTenant once max_tenants are tracked and none is idle, as enqueue() makes
  // a place); an unknown class is ignored.
  std::string admitDirect(const std::string& tenant, size_t class_index, uint64_t prompt_tokens);
  // Removes a queued item (its client left). False when it is not queued (dispatched, expired, unknown).
  bool cancel(uint64_t id);
  // Removes and returns, oldest deadline first, every item whose deadline_ms <= now_ms.
  std::vector<Item> expire(int64_t now_ms);
  // Adds output tokens x output weight to a flow's counter; may be called as tokens stream or once at the end,
  // but before finished(). `tenant` is the flow popNext() returned in Item::tenant. Unknown flows are ignored.
  void charge(const std::string& tenant, size_t class_index, uint64_t output_tokens);
  // A dispatched item is done (completed, failed or abandoned): once a flow has nothing queued and nothing in
  // flight, its counter may be forgotten (see docs/flow-control.md).
  void finished(const std::string& tenant, size_t class_index);

  // Replicas (docs/flow-control.md, "Replicas"): what each flow was served here, for the other replicas to charge.
  // At most `max_flows` flows, the one most recently served first, then those not served yet (total 0). A flow's
  // total starts at 0 when it is created (flow_seq) and goes with it when it is forgotten.
  std::vector<LocalService> localService(size_t max_flows) const;
  // Flows created so far (the next flow's flow_seq): tells a reader which unknown flows are new since its last read.
  uint64_t flowsCreated() const { return flows_created_; }
  // Adds `amount` of service that another replica gave the flow to its counter (not to its local total, so it is
  // never echoed back). Only a flow tracked here now is charged: one that is not would be lifted to its class's
  // floor on its return anyway, so service given to it elsewhere meanwhile changes nothing and is dropped.
  // Amounts that are not finite or not above 0 are ignored; larger ones are clamped to kMaxRemoteCharge.
  void chargeRemote(const std::string& tenant, size_t class_index, double amount);

  size_t size() const { return queued_; }
  // Requests the queue counts in flight (dispatched or admitted straight through, not yet finished): all of them,
  // and one tenant's over its classes.
  size_t inFlight() const { return in_flight_; }
  uint32_t tenantInFlight(const std::string& tenant) const;
  // Whether any tenant other than `tenant` has a request queued or counted in flight.
  bool othersActive(const std::string& tenant) const;
  size_t bytes() const { return bytes_; }
  // Queued items certain to be dispatched before the next item of `tenant`'s flow in `class_index`: everything
  // queued in higher classes, and the flow's own (FIFO). Other tenants of the class may go first or not (their
  // counters decide), so they are not counted: a lower bound, for predictions that must not overestimate.
  size_t queuedAhead(const std::string& tenant, size_t class_index) const;
  // Tenants tracked, not counting kOverflowTenant: at most max_tenants.
  size_t tenantCount() const;
  // (tenant, class) flows tracked, the overflow flow included.
  size_t flowCount() const { return flows_; }
  // The counter of a tracked flow; nullopt when it is not tracked (never seen, or forgotten).
  std::optional<double> counter(const std::string& tenant, size_t class_index) const;
  QueueSnapshot snapshot() const;

 private:
  struct Tenant;
  struct Flow;
  struct Entry {
    Item item;
    uint64_t seq = 0;  // global enqueue order: breaks counter ties between tenants
  };
  // Orders a class's backlogged flows: smallest counter first; on a tie (a flow lifted to the floor on its return
  // ties with the flow that sets it) the one with fewer requests in flight, which is being served less right now;
  // then the earliest head.
  struct BacklogKey {
    double counter;
    uint32_t in_flight;
    uint64_t head_seq;
    Flow* flow;
    bool operator<(const BacklogKey& other) const {
      return std::tie(counter, in_flight, head_seq) < std::tie(other.counter, other.in_flight, other.head_seq);
    }
  };
  struct IdleKey {
    double counter;
    Flow* flow;
    bool operator<(const IdleKey& other) const { return std::tie(counter, flow) < std::tie(other.counter, other.flow); }
  };
  struct ClassState {
    std::set<BacklogKey> backlog;  // flows with something queued
    std::set<IdleKey> idle;        // flows with nothing queued or in flight, counter above the floor
    double last_left = 0;          // counter of the last flow to leave an empty backlog
    size_t queued = 0;
    size_t bytes = 0;
  };
  struct Location {
    Flow* flow;
    std::list<Entry>::iterator entry;
  };

  double floor(size_t class_index) const;
  void countInFlight(Flow& flow);
  Tenant* tenantFor(const std::string& name, bool create);
  Flow* flowFor(Tenant& tenant, size_t class_index);
  Flow* findFlow(const std::string& tenant, size_t class_index) const;
  Item removeEntry(Flow& flow, std::list<Entry>::iterator entry);
  void rekey(Flow& flow);
  void settle(Flow& flow);
  void forgetBelowFloor(size_t class_index);
  // Makes a place for a tenant not tracked yet while max_tenants are: forgets idle flows (nothing queued, nothing
  // in flight), the one whose counter is nearest its class's floor first, until a tenant is gone. False when none
  // could be freed (within kMaxForgottenForRoom flows): the newcomer is counted in kOverflowTenant.
  bool makeRoomForTenant();
  static constexpr size_t kMaxForgottenForRoom = 16;
  void destroy(Flow& flow);
  void servedLocally(Flow& flow, double amount);

  std::vector<ClassSpec> specs_;
  size_t max_queued_total_;
  size_t max_queued_per_tenant_;
  size_t max_queued_bytes_total_;
  size_t max_queued_bytes_per_tenant_;
  size_t max_tenants_;
  double input_weight_;
  double output_weight_;

  std::vector<ClassState> classes_;
  std::unordered_map<std::string, std::unique_ptr<Tenant>> tenants_;
  std::unordered_map<uint64_t, Location> by_id_;
  std::set<std::pair<int64_t, uint64_t>> by_deadline_;  // (deadline_ms, id)
  // Flows that were served here (local total above 0), most recently served first, then the rest in creation order.
  std::list<Flow*> recent_;
  uint64_t flows_created_ = 0;
  uint64_t next_seq_ = 0;
  size_t queued_ = 0;
  size_t bytes_ = 0;
  size_t in_flight_ = 0;
  size_t flows_ = 0;
};

}  // namespace prefixgate::flow
