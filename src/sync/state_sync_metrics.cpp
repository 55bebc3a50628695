#include "sync/state_sync_metrics.h"

namespace prefixgate::sync {

StateSyncMetrics::StateSyncMetrics(prometheus::Registry& registry)
    : records(prometheus::BuildCounter()
                  .Name("prefixgate_state_sync_records_total")
                  .Help("Prefix records shared with the other replicas through Redis (sent) and applied from them "
                        "(received, stream and snapshot)")
                  .Register(registry)),
      dropped(prometheus::BuildCounter()
                  .Name("prefixgate_state_sync_records_dropped_total")
                  .Help("Prefix records and withdrawals not shared or not applied: over_rate "
                        "(state_sync.max_send_bytes_per_second), pending_full (state_sync.max_pending_bytes while "
                        "Redis is away), unknown_pod (a pod this replica does not route to), malformed (a batch it "
                        "cannot read)")
                  .Register(registry)),
      withdrawals(prometheus::BuildCounter()
                      .Name("prefixgate_state_sync_withdrawals_total")
                      .Help("Prefix records taken back because their request failed on the pod before it computed "
                            "the prompt: shared with the other replicas (sent) and applied from them (received)")
                      .Register(registry)),
      sessions(prometheus::BuildCounter()
                   .Name("prefixgate_state_sync_sessions_total")
                   .Help("Session pins (session-affinity) shared with the other replicas through Redis (sent: new "
                         "pins, moves and refreshes) and applied from them (received, stream and snapshot)")
                   .Register(registry)),
      sessions_dropped(prometheus::BuildCounter()
                           .Name("prefixgate_state_sync_sessions_dropped_total")
                           .Help("Session pins not shared or not applied: over_rate, pending_full, unknown_pod (a "
                                 "pod this replica does not route to), malformed (a batch or member it cannot read)")
                           .Register(registry)),
      bytes(prometheus::BuildCounter()
                .Name("prefixgate_state_sync_bytes_total")
                .Help("Bytes of Redis commands sent and replies received by state sync")
                .Register(registry)),
      lag(prometheus::BuildHistogram()
              .Name("prefixgate_state_sync_lag_seconds")
              .Help("From a replica's routing decision to another replica applying its record (wall clocks)")
              .Register(registry)),
      snapshot_loads(prometheus::BuildCounter()
                         .Name("prefixgate_state_sync_snapshot_loads_total")
                         .Help("Snapshots of the shared records loaded (at start, and after missing part of the "
                               "stream)")
                         .Register(registry)),
      errors(prometheus::BuildCounter()
                 .Name("prefixgate_state_sync_redis_errors_total")
                 .Help("Redis commands that failed (connection lost, timeout, error reply)")
                 .Register(registry)),
      reconnects(prometheus::BuildCounter()
                     .Name("prefixgate_state_sync_reconnects_total")
                     .Help("Connections to Redis opened again after one was lost")
                     .Register(registry)),
      connected(prometheus::BuildGauge()
                    .Name("prefixgate_state_sync_connected")
                    .Help("1 while the last exchange with Redis succeeded")
                    .Register(registry)),
      replicas(prometheus::BuildGauge()
                   .Name("prefixgate_state_sync_replicas")
                   .Help("Live replicas seen in Redis, this one included")
                   .Register(registry)),
      flow_service(prometheus::BuildCounter()
                       .Name("prefixgate_state_sync_flow_service_charges_total")
                       .Help("Increases of another replica's VTC service to one flow handed to flow control (each "
                             "charged to the flow when it is tracked here)")
                       .Register(registry)),
      flow_service_dropped(prometheus::BuildCounter()
                               .Name("prefixgate_state_sync_flow_service_dropped_total")
                               .Help("Other replicas' flow service texts not applied: too_large (over 256 KiB), "
                                     "malformed (anything a replica would not write)")
                               .Register(registry)),
      responses(prometheus::BuildCounter()
                    .Name("prefixgate_state_sync_responses_total")
                    .Help("Responses API chain affinity: response ids remembered or forgotten, shared with the other "
                          "replicas through Redis (sent) and applied from them (received, stream and snapshot)")
                    .Register(registry)),
      responses_dropped(prometheus::BuildCounter()
                            .Name("prefixgate_state_sync_responses_dropped_total")
                            .Help("Response ids not shared or not applied: over_rate, pending_full, unknown_pod (a "
                                  "pod this replica does not route to), malformed (a batch or member it cannot read)")
                            .Register(registry)),
      sent(records.Add({{"direction", "sent"}})),
      received(records.Add({{"direction", "received"}})),
      over_rate(dropped.Add({{"reason", "over_rate"}})),
      pending_full(dropped.Add({{"reason", "pending_full"}})),
      unknown_pod(dropped.Add({{"reason", "unknown_pod"}})),
      malformed(dropped.Add({{"reason", "malformed"}})),
      withdrawals_sent(withdrawals.Add({{"direction", "sent"}})),
      withdrawals_received(withdrawals.Add({{"direction", "received"}})),
      sessions_sent(sessions.Add({{"direction", "sent"}})),
      sessions_received(sessions.Add({{"direction", "received"}})),
      sessions_over_rate(sessions_dropped.Add({{"reason", "over_rate"}})),
      sessions_pending_full(sessions_dropped.Add({{"reason", "pending_full"}})),
      sessions_unknown_pod(sessions_dropped.Add({{"reason", "unknown_pod"}})),
      sessions_malformed(sessions_dropped.Add({{"reason", "malformed"}})),
      bytes_sent(bytes.Add({{"direction", "sent"}})),
      bytes_received(bytes.Add({{"direction", "received"}})),
      lag_seconds(lag.Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
                                                                       0.2, 0.5, 1, 2, 5, 10})),
      snapshot_loads_total(snapshot_loads.Add({})),
      errors_total(errors.Add({})),
      reconnects_total(reconnects.Add({})),
      connected_gauge(connected.Add({})),
      replicas_gauge(replicas.Add({})),
      flow_service_charges(flow_service.Add({})),
      flow_service_too_large(flow_service_dropped.Add({{"reason", "too_large"}})),
      flow_service_malformed(flow_service_dropped.Add({{"reason", "malformed"}})),
      responses_sent(responses.Add({{"direction", "sent"}})),
      responses_received(responses.Add({{"direction", "received"}})),
      responses_over_rate(responses_dropped.Add({{"reason", "over_rate"}})),
      responses_pending_full(responses_dropped.Add({{"reason", "pending_full"}})),
      responses_unknown_pod(responses_dropped.Add({{"reason", "unknown_pod"}})),
      responses_malformed(responses_dropped.Add({{"reason", "malformed"}})) {}

}  // namespace prefixgate::sync
