#include "services/coordinator/coordinator_metrics.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace tributary::coordinator {
namespace {

prometheus::Family<prometheus::Gauge>& Gauge(prometheus::Registry& registry,
                                             const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& registry,
                                                 const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& registry)
    : workers_(Gauge(registry, "tributary_coordinator_workers",
                     "Registered workers by the phase they last reported.")),
      generation_(Gauge(registry, "tributary_coordinator_generation",
                        "Current generation (0 while none is formed).")),
      job_state_(Gauge(registry, "tributary_coordinator_job_state",
                       "1 for the state of the active (or latest) job, 0 for the others.")),
      job_step_(Gauge(registry, "tributary_coordinator_job_step",
                      "Steps completed by every node of the active (or latest) job.")),
      job_total_steps_(Gauge(registry, "tributary_coordinator_job_total_steps",
                             "Steps the active (or latest) job runs in all (0 = not known yet).")),
      heartbeat_age_(Gauge(registry, "tributary_coordinator_heartbeat_age_seconds",
                           "Seconds since each registered worker's last heartbeat.")),
      shard_reachable_(Gauge(registry, "tributary_coordinator_shard_reachable",
                             "1 when the PS shard answered the last status poll.")),
      rendezvous_waits_(Counter(registry, "tributary_coordinator_rendezvous_waits_total",
                                "WaitRendezvous calls by result.")),
      rendezvous_waiting_(Gauge(registry, "tributary_coordinator_rendezvous_waiting",
                                "WaitRendezvous calls waiting now.")),
      rendezvous_published_(Counter(registry, "tributary_coordinator_rendezvous_published_total",
                                    "Keys published to the rendezvous store.")),
      generations_formed_(Counter(registry, "tributary_coordinator_generations_formed_total",
                                  "Generations formed.")),
      generations_ended_(Counter(registry, "tributary_coordinator_generations_ended_total",
                                 "Generations ended early, by cause.")),
      formation_failures_(Counter(registry, "tributary_coordinator_formation_failures_total",
                                  "Attempts to form a generation that a shard made fail.")),
      state_saves_(Counter(registry, "tributary_coordinator_state_saves_total",
                           "Writes of the state file by result.")) {
  // Every phase and state exists from the start, so dashboards see zeros, not gaps.
  for (int phase = v1::WORKER_IDLE; phase <= v1::WORKER_DRAINING; ++phase) {
    workers_.Add({{"phase", v1::WorkerPhase_Name(static_cast<v1::WorkerPhase>(phase))}});
  }
  for (int state = v1::PENDING; state <= v1::STOPPED; ++state) {
    job_state_.Add({{"state", v1::JobState_Name(static_cast<v1::JobState>(state))}});
  }
  generation_.Add({});
  job_step_.Add({});
  job_total_steps_.Add({});
  rendezvous_waiting_.Add({});
  rendezvous_published_.Add({});
  generations_formed_.Add({});
  formation_failures_.Add({});
  for (const char* result : {"ok", "deadline_exceeded", "aborted", "cancelled", "rejected"}) {
    rendezvous_waits_.Add({{"result", result}});
  }
  for (const char* result : {"ok", "error"}) state_saves_.Add({{"result", result}});
}

void CoordinatorMetrics::Advance(prometheus::Counter& counter, double total) {
  const double delta = total - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

void CoordinatorMetrics::Update(const v1::ClusterStatus& status, const RendezvousStats& rendezvous,
                                const Coordinator::Counters& counters) {
  absl::MutexLock lock(&mu_);
  std::map<int, double> by_phase;
  std::set<std::string> seen;
  const auto account = [&](const v1::WorkerInfo& worker) {
    by_phase[worker.phase()] += 1;
    seen.insert(worker.worker_id());
    auto gauge = heartbeat_gauges_.find(worker.worker_id());
    if (gauge == heartbeat_gauges_.end()) {
      gauge = heartbeat_gauges_
                  .emplace(worker.worker_id(), &heartbeat_age_.Add({{"worker", worker.worker_id()},
                                                                    {"node", worker.node_name()}}))
                  .first;
    }
    gauge->second->Set(worker.heartbeat_age_seconds());
  };
  for (const v1::NodeInfo& node : status.nodes()) {
    for (const v1::WorkerInfo& worker : node.workers()) account(worker);
  }
  for (const v1::WorkerInfo& worker : status.idle_workers()) account(worker);
  for (auto it = heartbeat_gauges_.begin(); it != heartbeat_gauges_.end();) {
    if (seen.count(it->first) == 0) {
      heartbeat_age_.Remove(it->second);  // The worker is gone: so is its series.
      it = heartbeat_gauges_.erase(it);
    } else {
      ++it;
    }
  }
  for (int phase = v1::WORKER_IDLE; phase <= v1::WORKER_DRAINING; ++phase) {
    workers_.Add({{"phase", v1::WorkerPhase_Name(static_cast<v1::WorkerPhase>(phase))}})
        .Set(by_phase[phase]);
  }
  generation_.Add({}).Set(status.generation());
  for (int state = v1::PENDING; state <= v1::STOPPED; ++state) {
    job_state_.Add({{"state", v1::JobState_Name(static_cast<v1::JobState>(state))}})
        .Set(status.has_job() && status.job().state() == state ? 1 : 0);
  }
  job_step_.Add({}).Set(status.job().step());
  job_total_steps_.Add({}).Set(status.job().total_steps());
  for (const v1::ShardSummary& shard : status.shards()) {
    shard_reachable_.Add({{"shard", absl::StrCat(shard.shard().shard_index())}})
        .Set(shard.reachable() ? 1 : 0);
  }
  Advance(rendezvous_waits_.Add({{"result", "ok"}}), rendezvous.waits_ok);
  Advance(rendezvous_waits_.Add({{"result", "deadline_exceeded"}}), rendezvous.waits_timed_out);
  Advance(rendezvous_waits_.Add({{"result", "aborted"}}), rendezvous.waits_aborted);
  Advance(rendezvous_waits_.Add({{"result", "cancelled"}}), rendezvous.waits_cancelled);
  Advance(rendezvous_waits_.Add({{"result", "rejected"}}), rendezvous.waits_rejected);
  rendezvous_waiting_.Add({}).Set(rendezvous.waiting);
  Advance(rendezvous_published_.Add({}), rendezvous.published);
  Advance(generations_formed_.Add({}), counters.generations_formed);
  for (const auto& [cause, total] : counters.generations_ended) {
    Advance(generations_ended_.Add({{"cause", cause}}), total);
  }
  Advance(formation_failures_.Add({}), counters.formation_failures);
  Advance(state_saves_.Add({{"result", "ok"}}), counters.state_saves);
  Advance(state_saves_.Add({{"result", "error"}}), counters.state_save_errors);
}

}  // namespace tributary::coordinator
