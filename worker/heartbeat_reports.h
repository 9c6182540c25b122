// The steps run and evaluations made since the last answered heartbeat
// (HeartbeatRequest.steps / evaluations): added as they happen, moved into the next
// heartbeat, put back when it was not delivered, and bounded as the coordinator asks
// (past the bound, every other one of the older reports goes, so that a long
// interval keeps its shape at a coarser resolution). Not thread-safe.
#ifndef TRIBUTARY_WORKER_HEARTBEAT_REPORTS_H_
#define TRIBUTARY_WORKER_HEARTBEAT_REPORTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/coordinator.pb.h"
#include "worker/training_session.h"

namespace tributary::worker {

class HeartbeatReports {
 public:
  // What one heartbeat may carry (the coordinator refuses more: proto/coordinator.proto).
  static constexpr size_t kMaxSteps = 1024;
  static constexpr size_t kMaxEvaluations = 64;

  // Step `step` (0-based) ran with these measurements, in `epoch`.
  void AddStep(uint64_t step, uint32_t epoch, const StepStats& stats);
  // An evaluation after `steps_done` steps.
  void AddEvaluation(uint64_t steps_done, float accuracy, float loss,
                     const std::map<std::string, double>& metrics);
  // Moves every report into `request`.
  void MoveInto(v1::HeartbeatRequest& request);
  // The reports of a heartbeat that was not delivered, back in front of newer ones.
  void PutBack(const v1::HeartbeatRequest& request);
  void Clear();
  size_t steps() const { return steps_.size(); }
  size_t evaluations() const { return evaluations_.size(); }

 private:
  std::vector<v1::StepReport> steps_;
  std::vector<v1::EvaluationReport> evaluations_;
};

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_HEARTBEAT_REPORTS_H_
