// The coordinator's Prometheus metrics, refreshed from a ClusterStatus snapshot about
// once a second (RPC counts by code come from ServiceHost's tributary_rpc_total):
//   tributary_coordinator_workers{phase}                 gauge
//   tributary_coordinator_generation                     gauge
//   tributary_coordinator_job_state{state}               gauge, 1 for the current state
//   tributary_coordinator_job_step / _job_total_steps    gauges
//   tributary_coordinator_heartbeat_age_seconds{worker,node}  gauge per worker
//   tributary_coordinator_shard_reachable{shard}         gauge
//   tributary_coordinator_rendezvous_waits_total{result} counter
//   tributary_coordinator_rendezvous_waiting             gauge
//   tributary_coordinator_rendezvous_published_total     counter
//   tributary_coordinator_generations_formed_total       counter
//   tributary_coordinator_generations_ended_total{cause} counter
//   tributary_coordinator_formation_failures_total       counter
//   tributary_coordinator_state_saves_total{result}      counter
#ifndef TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_METRICS_H_
#define TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/rendezvous_store.h"

namespace tributary::coordinator {

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  void Update(const v1::ClusterStatus& status, const RendezvousStats& rendezvous,
              const Coordinator::Counters& counters);

 private:
  // Moves a counter up to `total` (the sources keep totals; Prometheus wants deltas).
  static void Advance(prometheus::Counter& counter, double total);

  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Gauge>& generation_;
  prometheus::Family<prometheus::Gauge>& job_state_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_total_steps_;
  prometheus::Family<prometheus::Gauge>& heartbeat_age_;
  prometheus::Family<prometheus::Gauge>& shard_reachable_;
  prometheus::Family<prometheus::Counter>& rendezvous_waits_;
  prometheus::Family<prometheus::Gauge>& rendezvous_waiting_;
  prometheus::Family<prometheus::Counter>& rendezvous_published_;
  prometheus::Family<prometheus::Counter>& generations_formed_;
  prometheus::Family<prometheus::Counter>& generations_ended_;
  prometheus::Family<prometheus::Counter>& formation_failures_;
  prometheus::Family<prometheus::Counter>& state_saves_;

  absl::Mutex mu_;
  std::map<std::string, prometheus::Gauge*> heartbeat_gauges_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_COORDINATOR_METRICS_H_
