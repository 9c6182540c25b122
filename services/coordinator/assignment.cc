#include "services/coordinator/assignment.h"

#include <algorithm>
#include <variant>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

bool HasGpu(const v1::RegisterWorkerRequest& registration) {
  for (const v1::Device& device : registration.devices()) {
    if (device.kind() == v1::GPU) return true;
  }
  return false;
}

std::vector<v1::Device> CpuDevices(const v1::RegisterWorkerRequest& registration,
                                   uint32_t replicas) {
  uint32_t cores = 0;
  uint64_t memory = 0;
  for (const v1::Device& device : registration.devices()) {
    if (device.kind() != v1::CPU) continue;
    cores += device.cpu_cores();
    memory = std::max<uint64_t>(memory, device.memory_bytes());
  }
  std::vector<v1::Device> devices(replicas);
  for (v1::Device& device : devices) {
    device.set_kind(v1::CPU);
    device.set_index(-1);
    device.set_name("cpu");
    device.set_memory_bytes(memory);
    // Replica threads share the host's cores; 0 when the worker did not say.
    device.set_cpu_cores(cores == 0 ? 0 : std::max<uint32_t>(1, cores / replicas));
  }
  return devices;
}

std::string Gib(uint64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30));
}

// Why `devices` cannot hold the job's replicas of `worker`; "" when they can, or when
// the memory or the job's size is unknown (0).
std::string MemoryShortfall(const v1::JobSpec& spec, const Candidate& worker,
                            const std::string& node, const std::vector<v1::Device>& devices,
                            bool gpu) {
  const uint32_t replicas = static_cast<uint32_t>(devices.size());
  // At least nodes_min nodes of this many replicas share the global batch.
  const uint64_t sharing = uint64_t{std::max<uint32_t>(1, spec.nodes_min())} * replicas;
  const MemoryEstimate estimate = EstimateMemory(spec, static_cast<uint32_t>(sharing));
  if (estimate.replica_bytes == 0 || devices.empty()) return "";
  const std::string what =
      absl::StrCat(estimate.parameters, " parameters, a batch share of ",
                   (spec.global_batch_size() + sharing - 1) / sharing, " per replica");
  if (gpu) {
    for (const v1::Device& device : devices) {
      if (device.memory_bytes() == 0 || device.memory_bytes() >= estimate.replica_bytes) continue;
      return absl::StrCat("worker ", worker.worker_id, " on node ", node, ": ",
                          DescribeGpu(device), " has ", Gib(device.memory_bytes()),
                          " but one replica needs about ", Gib(estimate.replica_bytes), " (",
                          what, ")");
    }
    return "";
  }
  const uint64_t memory = devices.front().memory_bytes();
  const uint64_t needed = replicas * estimate.replica_bytes + estimate.data_bytes;
  if (memory == 0 || memory >= needed) return "";
  return absl::StrCat("worker ", worker.worker_id, " on node ", node, " reports ", Gib(memory),
                      " of memory but its ", replicas, " replica(s) need about ", Gib(needed),
                      " (", what,
                      estimate.data_bytes > 0
                          ? absl::StrCat(", ", Gib(estimate.data_bytes), " of synthetic data")
                          : std::string(),
                      "): use fewer replicas_per_worker, a smaller batch or model, or more "
                      "nodes");
}

struct NodeGroup {
  std::string name;
  std::vector<const Candidate*> workers;  // Registration order.
};

}  // namespace

std::string GpuKey(const v1::Device& device) {
  return device.uuid().empty() ? absl::StrCat("index:", device.index())
                               : absl::StrCat("uuid:", device.uuid());
}

std::string DescribeGpu(const v1::Device& device) {
  return device.uuid().empty() ? absl::StrCat("GPU ", device.index())
                               : absl::StrCat("GPU ", device.index(), " (", device.uuid(), ")");
}

absl::Status ValidateRegistration(const v1::RegisterWorkerRequest& request) {
  if (request.node_name().empty()) {
    return absl::InvalidArgumentError(
        "node_name: must not be empty (workers with the same node name form one node group)");
  }
  std::set<int32_t> indices;
  std::set<std::string> uuids;
  int cpu_devices = 0;
  for (int i = 0; i < request.devices_size(); ++i) {
    const v1::Device& device = request.devices(i);
    if (device.kind() == v1::CPU) {
      if (++cpu_devices > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices[", i, "]: the CPU is listed twice (one CPU entry per worker)"));
      }
      continue;
    }
    if (device.kind() != v1::GPU) {
      return absl::InvalidArgumentError(absl::StrCat(
          "devices[", i, "].kind: must be CPU or GPU, got ", v1::DeviceKind_Name(device.kind())));
    }
    if (device.index() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices[", i, "].index: a GPU index must be >= 0, got ", device.index()));
    }
    if (!indices.insert(device.index()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices[", i, "]: GPU ", device.index(), " is listed twice"));
    }
    if (!device.uuid().empty() && !uuids.insert(device.uuid()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("devices[", i, "]: GPU UUID ", device.uuid(), " is listed twice"));
    }
  }
  std::set<int32_t> requested;
  for (int32_t index : request.requested_gpus()) {
    if (indices.count(index) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("requested_gpus: GPU ", index,
                                                     " is not among the worker's GPUs [",
                                                     absl::StrJoin(indices, ","), "]"));
    }
    if (!requested.insert(index).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("requested_gpus: GPU ", index, " is requested twice"));
    }
  }
  return absl::OkStatus();
}

namespace {

struct Placed {
  const Candidate* worker;
  std::vector<v1::Device> devices;
};

// One worker's devices in node group `node`: the CPU, or `replicas` GPUs not `taken` by
// another worker of the node (its requested ones, else any, lowest index first; taken
// here once placed); or why it is left out.
std::variant<std::vector<v1::Device>, LeftOut> PlaceWorker(
    const v1::JobSpec& spec, const Candidate& worker, const std::string& node, uint32_t replicas,
    std::map<std::string, std::string>& taken) {
  const v1::RegisterWorkerRequest& registration = worker.registration;
  // TorchScript models run on LibTorch's CPU engine only.
  const bool gpu = spec.devices() == v1::GPU ||
                   (spec.devices() == v1::AUTO && HasGpu(registration) &&
                    !IsTorchScript(spec.model()));
  if (!gpu) {
    std::vector<v1::Device> cpu = CpuDevices(registration, replicas);
    if (std::string shortfall = MemoryShortfall(spec, worker, node, cpu, false);
        !shortfall.empty()) {
      return LeftOut{LeftOut::Kind::kTooLittleMemory, std::move(shortfall)};
    }
    return cpu;
  }
  std::vector<v1::Device> options;
  if (registration.requested_gpus().empty()) {
    for (const v1::Device& device : registration.devices()) {
      if (device.kind() == v1::GPU) options.push_back(device);
    }
    std::sort(options.begin(), options.end(),
              [](const v1::Device& a, const v1::Device& b) { return a.index() < b.index(); });
  } else {
    for (int32_t index : registration.requested_gpus()) {
      for (const v1::Device& device : registration.devices()) {
        if (device.kind() == v1::GPU && device.index() == index) options.push_back(device);
      }
    }
  }
  if (options.empty()) {
    return LeftOut{LeftOut::Kind::kNoGpu,
                   absl::StrCat("the job runs on GPUs (devices=GPU) but worker ",
                                worker.worker_id, " on node ", node, " reported none")};
  }
  std::vector<v1::Device> picked;
  std::vector<std::string> busy;
  for (const v1::Device& device : options) {
    if (picked.size() == replicas) break;
    auto owner = taken.find(GpuKey(device));
    if (owner != taken.end()) {
      busy.push_back(absl::StrCat(DescribeGpu(device), " is used by worker ", owner->second));
      continue;
    }
    picked.push_back(device);
  }
  if (picked.size() < replicas) {
    return LeftOut{
        LeftOut::Kind::kTooFewGpus,
        absl::StrCat("node ", node, " has too few free GPUs for worker ", worker.worker_id,
                     ": it needs ", replicas, " (replicas_per_worker=", replicas, ") of its ",
                     registration.requested_gpus().empty() ? "" : "requested ", options.size(),
                     " GPU(s), ", picked.size(), " free",
                     busy.empty() ? "" : absl::StrCat(" (", absl::StrJoin(busy, "; "), ")"))};
  }
  if (std::string shortfall = MemoryShortfall(spec, worker, node, picked, true);
      !shortfall.empty()) {
    return LeftOut{LeftOut::Kind::kTooLittleMemory, std::move(shortfall)};
  }
  for (const v1::Device& device : picked) taken[GpuKey(device)] = worker.worker_id;
  return picked;
}

// The node groups, in the order their first worker registered.
std::vector<NodeGroup> GroupByNode(const std::vector<Candidate>& candidates) {
  std::vector<const Candidate*> ordered;
  for (const Candidate& candidate : candidates) ordered.push_back(&candidate);
  std::sort(ordered.begin(), ordered.end(),
            [](const Candidate* a, const Candidate* b) { return a->sequence < b->sequence; });
  std::vector<NodeGroup> groups;
  std::map<std::string, size_t> group_of;
  for (const Candidate* candidate : ordered) {
    const std::string& node = candidate->registration.node_name();
    auto [it, inserted] = group_of.emplace(node, groups.size());
    if (inserted) groups.push_back(NodeGroup{node, {}});
    groups[it->second].workers.push_back(candidate);
  }
  return groups;
}

// The ranks and replica numbers of the admitted nodes' workers, by node rank.
void AssignRanks(const std::vector<std::vector<Placed>>& nodes, GenerationPlan& plan) {
  uint32_t world_size = 0;
  uint32_t total_replicas = 0;
  for (const auto& node : nodes) {
    world_size += node.size();
    for (const Placed& worker : node) total_replicas += worker.devices.size();
  }
  uint32_t global_rank = 0;
  uint32_t replica = 0;
  for (uint32_t node_rank = 0; node_rank < nodes.size(); ++node_rank) {
    const auto& node = nodes[node_rank];
    uint32_t node_replicas = 0;
    for (const Placed& worker : node) node_replicas += worker.devices.size();
    const uint32_t node_first_replica = replica;
    for (uint32_t local_rank = 0; local_rank < node.size(); ++local_rank) {
      const Placed& worker = node[local_rank];
      v1::Assignment& assignment = plan.assignments[worker.worker->worker_id];
      assignment.set_global_rank(global_rank++);
      assignment.set_world_size(world_size);
      assignment.set_node_rank(node_rank);
      assignment.set_num_nodes(nodes.size());
      assignment.set_local_rank(local_rank);
      assignment.set_local_world_size(node.size());
      assignment.set_node_leader(local_rank == 0);
      for (const v1::Device& device : worker.devices) *assignment.add_devices() = device;
      assignment.set_replicas(worker.devices.size());
      assignment.set_total_replicas(total_replicas);
      assignment.set_first_replica(replica);
      assignment.set_node_first_replica(node_first_replica);
      assignment.set_node_replicas(node_replicas);
      replica += worker.devices.size();
    }
  }
}

}  // namespace

GenerationPlan PlanGeneration(const v1::JobSpec& spec, const std::vector<Candidate>& candidates) {
  GenerationPlan plan;
  const uint32_t replicas = std::max<uint32_t>(1, spec.replicas_per_worker());
  std::vector<std::vector<Placed>> nodes;  // Admitted node groups, by node rank.
  for (const NodeGroup& group : GroupByNode(candidates)) {
    // Explicit requests choose first so that a worker picking freely cannot take the
    // GPU another one asked for.
    std::vector<const Candidate*> choosing = group.workers;
    std::stable_sort(choosing.begin(), choosing.end(), [](const Candidate* a, const Candidate* b) {
      return !a->registration.requested_gpus().empty() && b->registration.requested_gpus().empty();
    });
    std::map<std::string, std::string> taken;  // GPU key -> worker id.
    std::map<const Candidate*, std::vector<v1::Device>> chosen;
    for (const Candidate* worker : choosing) {
      auto placed = PlaceWorker(spec, *worker, group.name, replicas, taken);
      if (auto* left_out = std::get_if<LeftOut>(&placed)) {
        plan.left_out[worker->worker_id] = std::move(*left_out);
      } else {
        chosen[worker] = std::get<std::vector<v1::Device>>(std::move(placed));
      }
    }
    std::vector<Placed> placed;
    for (const Candidate* worker : group.workers) {
      auto devices = chosen.find(worker);
      if (devices != chosen.end()) placed.push_back(Placed{worker, std::move(devices->second)});
    }
    if (placed.empty()) continue;
    ++plan.assignable_nodes;
    if (nodes.size() >= spec.nodes_max()) {
      for (const Placed& worker : placed) {
        plan.left_out[worker.worker->worker_id] = LeftOut{
            LeftOut::Kind::kNodeNotAdmitted,
            absl::StrCat("node ", group.name, " not admitted: the job admits at most nodes_max=",
                         spec.nodes_max(), " node(s)")};
      }
      continue;
    }
    plan.node_names.push_back(group.name);
    nodes.push_back(std::move(placed));
  }
  AssignRanks(nodes, plan);
  return plan;
}

}  // namespace tributary::coordinator
