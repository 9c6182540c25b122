// Who does what in a generation: groups the eligible workers into node groups,
// gives each worker its devices (never one GPU to two workers of a node) and its
// ranks and replica indices. A pure function of the job spec and the workers, so
// the rules can be tested without a clock, threads or gRPC.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_ASSIGNMENT_H_
#define TRIBUTARY_SERVICES_COORDINATOR_ASSIGNMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"

namespace tributary::coordinator {

// A registered worker that may join the next generation.
struct Candidate {
  std::string worker_id;
  uint64_t sequence = 0;  // Registration order: earlier workers get lower ranks.
  v1::RegisterWorkerRequest registration;
};

// Why a worker is not part of a plan.
struct LeftOut {
  enum class Kind {
    kNoGpu,            // A GPU job, and the worker reported no GPU.
    kTooFewGpus,       // Its node has fewer free GPUs than it needs.
    kNodeNotAdmitted,  // Its node group is beyond nodes_max.
    kTooLittleMemory,  // It reported less memory than the job needs (EstimateMemory).
  };
  Kind kind;
  std::string reason;  // Names the node, the worker and the GPUs involved.
};

struct GenerationPlan {
  // Node names by node rank.
  std::vector<std::string> node_names;
  // Worker id -> its ranks, devices, replicas and replica indices. The caller fills
  // in job_id, generation, rendezvous_id, shards, job and resume_step.
  std::map<std::string, v1::Assignment> assignments;
  // Worker id -> why it was left out (no free GPU, no GPU at all, too little memory,
  // node over nodes_max).
  std::map<std::string, LeftOut> left_out;
  // Node groups that had at least one assignable worker, including those over nodes_max.
  uint32_t assignable_nodes = 0;
};

// Plans a generation over `candidates` (any order) for `spec` (defaults applied):
// node groups ordered by their earliest registration, at most spec.nodes_max of them;
// inside a node, local ranks follow registration order and workers with explicit GPU
// requests choose first. Does not check nodes_min: the caller decides whether the plan
// is enough.
GenerationPlan PlanGeneration(const v1::JobSpec& spec, const std::vector<Candidate>& candidates);

// Checks a registration on its own: non-empty node name, no device listed twice,
// requested GPUs among the worker's GPUs and not repeated. INVALID_ARGUMENT naming
// the problem.
absl::Status ValidateRegistration(const v1::RegisterWorkerRequest& request);

// The identity of a GPU on its node: its UUID when known, else its index. Two workers
// of a node that see the same UUID (or, without UUIDs, the same index) share the GPU.
std::string GpuKey(const v1::Device& device);

// "GPU 1 (GPU-1234abcd)" / "GPU 1", for messages.
std::string DescribeGpu(const v1::Device& device);

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_ASSIGNMENT_H_
