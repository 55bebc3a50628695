#pragma once
// What gateway replicas exchange so that fair sharing holds across them (docs/flow-control.md, "Replicas"): each
// publishes the VTC service its own queues gave each flow, and charges the others' increases to its flows. The
// flow layer's side of it, so that state sync (src/sync) depends on this interface and not on the server's gate.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prefixgate::flow {

// One flow's service given by this replica (FairQueue::localService), with its class by name: replicas may list
// their classes differently.
struct FlowService {
  std::string class_name;
  std::string tenant;
  double total = 0;       // cumulative since the flow was created here
  uint64_t flow_seq = 0;  // the flow's creation number in its model's queue
};

struct ModelService {
  std::string model;
  uint64_t flows_created = 0;  // the model's queue's FairQueue::flowsCreated(): later flows have flow_seq >= it
  std::vector<FlowService> flows;
};

// Service another replica gave one flow since the last time it was read.
struct RemoteService {
  std::string model;
  std::string class_name;
  std::string tenant;
  double amount = 0;
};

class ServiceSharing {
 public:
  virtual ~ServiceSharing() = default;
  // Per model, what this replica served each flow: at most `max_flows` flows in all, each model's most recently
  // served first. Thread-safe.
  virtual std::vector<ModelService> localService(size_t max_flows) const = 0;
  // Adds other replicas' service to the flows tracked here (FairQueue::chargeRemote); unknown models, classes and
  // flows not tracked now are skipped. Thread-safe.
  virtual void chargeRemote(const std::vector<RemoteService>& charges) = 0;
};

}  // namespace prefixgate::flow
