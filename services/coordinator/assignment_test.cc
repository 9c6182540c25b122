// Assignment rules: distinct GPUs per node, consistent ranks and replica indices,
// explicit requests honoured, clear reasons when a node has too few GPUs, CPU-only
// workers, nodes_max, and registration checks.
#include "services/coordinator/assignment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

v1::Device Gpu(int index, std::string uuid = "") {
  v1::Device device;
  device.set_kind(v1::GPU);
  device.set_index(index);
  device.set_uuid(uuid.empty() ? absl::StrCat("GPU-uuid-", index) : uuid);
  device.set_name("NVIDIA H100");
  device.set_memory_bytes(80ull << 30);
  return device;
}

v1::Device Cpu(uint32_t cores) {
  v1::Device device;
  device.set_kind(v1::CPU);
  device.set_index(-1);
  device.set_name("cpu");
  device.set_cpu_cores(cores);
  return device;
}

Candidate Worker(std::string id, uint64_t sequence, std::string node,
                 std::vector<v1::Device> devices, std::vector<int> requested = {}) {
  Candidate candidate;
  candidate.worker_id = std::move(id);
  candidate.sequence = sequence;
  candidate.registration.set_node_name(std::move(node));
  for (v1::Device& device : devices) *candidate.registration.add_devices() = device;
  for (int index : requested) candidate.registration.add_requested_gpus(index);
  return candidate;
}

v1::JobSpec Spec(uint32_t nodes_min, uint32_t nodes_max, uint32_t replicas,
                 v1::DeviceKind devices = v1::AUTO) {
  v1::JobSpec spec;
  spec.set_nodes_min(nodes_min);
  spec.set_nodes_max(nodes_max);
  spec.set_replicas_per_worker(replicas);
  spec.set_devices(devices);
  return spec;
}

// Checks the invariants every plan must hold.
void ExpectConsistent(const GenerationPlan& plan) {
  std::set<uint32_t> global_ranks;
  std::set<uint32_t> replicas_seen;
  std::map<uint32_t, std::set<std::string>> gpus_by_node;
  for (const auto& [id, a] : plan.assignments) {
    EXPECT_TRUE(global_ranks.insert(a.global_rank()).second) << "rank twice: " << id;
    EXPECT_EQ(a.world_size(), plan.assignments.size());
    EXPECT_EQ(a.num_nodes(), plan.node_names.size());
    EXPECT_EQ(a.node_leader(), a.local_rank() == 0);
    EXPECT_EQ(a.replicas(), static_cast<uint32_t>(a.devices_size()));
    for (uint32_t r = 0; r < a.replicas(); ++r) {
      EXPECT_TRUE(replicas_seen.insert(a.first_replica() + r).second);
      EXPECT_GE(a.first_replica() + r, a.node_first_replica());
      EXPECT_LT(a.first_replica() + r, a.node_first_replica() + a.node_replicas());
    }
    for (const v1::Device& device : a.devices()) {
      if (device.kind() == v1::GPU) {
        EXPECT_TRUE(gpus_by_node[a.node_rank()].insert(GpuKey(device)).second)
            << "GPU given twice on node " << a.node_rank() << ": " << DescribeGpu(device);
      }
    }
  }
  if (!plan.assignments.empty()) {
    const uint32_t total = plan.assignments.begin()->second.total_replicas();
    EXPECT_EQ(replicas_seen.size(), total);
    EXPECT_EQ(*replicas_seen.rbegin() + 1, total) << "replica indices must be 0..total-1";
  }
}

TEST(PlanGenerationTest, TwoNodesTwoGpusEachFourWorkers) {
  // Every worker sees both GPUs of its node; registration order interleaves nodes.
  std::vector<Candidate> workers = {
      Worker("w1", 1, "node-a", {Gpu(0), Gpu(1)}),
      Worker("w2", 2, "node-b", {Gpu(0, "b0"), Gpu(1, "b1")}),
      Worker("w3", 3, "node-a", {Gpu(0), Gpu(1)}),
      Worker("w4", 4, "node-b", {Gpu(0, "b0"), Gpu(1, "b1")}),
  };
  const GenerationPlan plan = PlanGeneration(Spec(2, 2, 1, v1::GPU), workers);
  ASSERT_EQ(plan.assignments.size(), 4u)
      << (plan.left_out.empty() ? "" : plan.left_out.begin()->second.reason);
  ExpectConsistent(plan);
  EXPECT_EQ(plan.node_names, (std::vector<std::string>{"node-a", "node-b"}));
  const auto& w1 = plan.assignments.at("w1");
  const auto& w2 = plan.assignments.at("w2");
  const auto& w3 = plan.assignments.at("w3");
  const auto& w4 = plan.assignments.at("w4");
  EXPECT_EQ(w1.global_rank(), 0u);
  EXPECT_EQ(w3.global_rank(), 1u);
  EXPECT_EQ(w2.global_rank(), 2u);
  EXPECT_EQ(w4.global_rank(), 3u);
  EXPECT_EQ(w1.node_rank(), 0u);
  EXPECT_EQ(w2.node_rank(), 1u);
  EXPECT_EQ(w1.local_rank(), 0u);
  EXPECT_EQ(w3.local_rank(), 1u);
  EXPECT_TRUE(w1.node_leader());
  EXPECT_FALSE(w3.node_leader());
  EXPECT_EQ(w1.local_world_size(), 2u);
  EXPECT_EQ(w1.devices(0).index(), 0);
  EXPECT_EQ(w3.devices(0).index(), 1);
  EXPECT_EQ(w2.devices(0).uuid(), "b0");
  EXPECT_EQ(w4.devices(0).uuid(), "b1");
  EXPECT_EQ(w4.first_replica(), 3u);
  EXPECT_EQ(w4.node_first_replica(), 2u);
  EXPECT_EQ(w4.node_replicas(), 2u);
  EXPECT_EQ(w4.total_replicas(), 4u);
}

TEST(PlanGenerationTest, TwoReplicasPerWorkerTakeTwoGpusEach) {
  std::vector<Candidate> workers = {
      Worker("w1", 1, "a", {Gpu(0), Gpu(1), Gpu(2), Gpu(3)}),
      Worker("w2", 2, "a", {Gpu(0), Gpu(1), Gpu(2), Gpu(3)}),
  };
  const GenerationPlan plan = PlanGeneration(Spec(1, 1, 2), workers);
  ASSERT_EQ(plan.assignments.size(), 2u);
  ExpectConsistent(plan);
  EXPECT_EQ(plan.assignments.at("w1").devices_size(), 2);
  EXPECT_EQ(plan.assignments.at("w2").devices(0).index(), 2);
  EXPECT_EQ(plan.assignments.at("w2").first_replica(), 2u);
}

TEST(PlanGenerationTest, VisibleDevicesRenumberedByUuid) {
  // CUDA_VISIBLE_DEVICES: both workers see "GPU 0", but they are different GPUs.
  std::vector<Candidate> workers = {
      Worker("w1", 1, "a", {Gpu(0, "GPU-aaa")}),
      Worker("w2", 2, "a", {Gpu(0, "GPU-bbb")}),
  };
  const GenerationPlan plan = PlanGeneration(Spec(1, 1, 1, v1::GPU), workers);
  EXPECT_EQ(plan.assignments.size(), 2u);
  ExpectConsistent(plan);
}

TEST(PlanGenerationTest, TooFewGpusIsAClearReason) {
  std::vector<Candidate> workers = {
      Worker("w1", 1, "a", {Gpu(0), Gpu(1)}),
      Worker("w2", 2, "a", {Gpu(0), Gpu(1)}),
      Worker("w3", 3, "a", {Gpu(0), Gpu(1)}),
  };
  const GenerationPlan plan = PlanGeneration(Spec(1, 1, 1, v1::GPU), workers);
  EXPECT_EQ(plan.assignments.size(), 2u);
  ASSERT_EQ(plan.left_out.count("w3"), 1u);
  const LeftOut& why = plan.left_out.at("w3");
  EXPECT_EQ(why.kind, LeftOut::Kind::kTooFewGpus);
  EXPECT_THAT(why.reason, HasSubstr("node a has too few free GPUs for worker w3"));
  EXPECT_THAT(why.reason, HasSubstr("GPU 0 (GPU-uuid-0) is used by worker w1"));
  EXPECT_THAT(why.reason, HasSubstr("GPU 1 (GPU-uuid-1) is used by worker w2"));
}

TEST(PlanGenerationTest, ExplicitRequestsHonouredAndChooseFirst) {
  // w1 picks freely, w2 registered later but asked for GPU 0 explicitly.
  std::vector<Candidate> workers = {
      Worker("w1", 1, "a", {Gpu(0), Gpu(1)}),
      Worker("w2", 2, "a", {Gpu(0), Gpu(1)}, {0}),
  };
  const GenerationPlan plan = PlanGeneration(Spec(1, 1, 1), workers);
  ASSERT_EQ(plan.assignments.size(), 2u);
  EXPECT_EQ(plan.assignments.at("w2").devices(0).index(), 0);
  EXPECT_EQ(plan.assignments.at("w1").devices(0).index(), 1);
  EXPECT_EQ(plan.assignments.at("w1").local_rank(), 0u) << "ranks follow registration order";
}

TEST(PlanGenerationTest, CpuOnlyWorkers) {
  std::vector<Candidate> workers = {
      Worker("w1", 1, "a", {Cpu(8)}),
      Worker("w2", 2, "b", {Cpu(4)}),
      Worker("w3", 3, "b", {}),
  };
  const GenerationPlan plan = PlanGeneration(Spec(2, 2, 2), workers);
  ASSERT_EQ(plan.assignments.size(), 3u);
  ExpectConsistent(plan);
  const auto& w1 = plan.assignments.at("w1");
  EXPECT_EQ(w1.replicas(), 2u);
  EXPECT_EQ(w1.devices(0).kind(), v1::CPU);
  EXPECT_EQ(w1.devices(0).index(), -1);
  EXPECT_EQ(w1.devices(0).cpu_cores(), 4u);
  EXPECT_EQ(plan.assignments.at("w3").devices(0).cpu_cores(), 0u);
  EXPECT_EQ(plan.assignments.at("w3").total_replicas(), 6u);
}

TEST(PlanGenerationTest, CpuJobIgnoresGpus) {
  std::vector<Candidate> workers = {Worker("w1", 1, "a", {Gpu(0), Cpu(2)})};
  const GenerationPlan plan = PlanGeneration(Spec(1, 1, 3, v1::CPU), workers);
  ASSERT_EQ(plan.assignments.size(), 1u);
  EXPECT_EQ(plan.assignments.at("w1").devices(0).kind(), v1::CPU);
  EXPECT_EQ(plan.assignments.at("w1").replicas(), 3u);
}

TEST(PlanGenerationTest, GpuJobLeavesOutCpuOnlyWorker) {
  std::vector<Candidate> workers = {Worker("w1", 1, "a", {Cpu(2)})};
  const GenerationPlan plan = PlanGeneration(Spec(1, 1, 1, v1::GPU), workers);
  EXPECT_TRUE(plan.assignments.empty());
  ASSERT_EQ(plan.left_out.count("w1"), 1u);
  EXPECT_EQ(plan.left_out.at("w1").kind, LeftOut::Kind::kNoGpu);
  EXPECT_THAT(plan.left_out.at("w1").reason, HasSubstr("reported none"));
}

TEST(PlanGenerationTest, NodesMaxAdmitsEarliestNodes) {
  std::vector<Candidate> workers = {
      Worker("w3", 3, "c", {Cpu(1)}),
      Worker("w1", 1, "a", {Cpu(1)}),
      Worker("w2", 2, "b", {Cpu(1)}),
  };
  const GenerationPlan plan = PlanGeneration(Spec(1, 2, 1), workers);
  EXPECT_EQ(plan.node_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(plan.assignable_nodes, 3u);
  ASSERT_EQ(plan.left_out.count("w3"), 1u);
  EXPECT_EQ(plan.left_out.at("w3").kind, LeftOut::Kind::kNodeNotAdmitted);
}

TEST(ValidateRegistrationTest, Rules) {
  v1::RegisterWorkerRequest request;
  EXPECT_THAT(ValidateRegistration(request).message(), HasSubstr("node_name"));
  request.set_node_name("a");
  EXPECT_TRUE(ValidateRegistration(request).ok());
  *request.add_devices() = Gpu(0);
  *request.add_devices() = Gpu(0, "other");
  EXPECT_THAT(ValidateRegistration(request).message(), HasSubstr("GPU 0 is listed twice"));
  request.mutable_devices(1)->set_index(1);
  request.mutable_devices(1)->set_uuid("GPU-uuid-0");
  EXPECT_THAT(ValidateRegistration(request).message(), HasSubstr("UUID GPU-uuid-0"));
  request.mutable_devices(1)->set_uuid("GPU-uuid-1");
  EXPECT_TRUE(ValidateRegistration(request).ok());
  request.add_requested_gpus(3);
  EXPECT_THAT(ValidateRegistration(request).message(),
              HasSubstr("GPU 3 is not among the worker's GPUs [0,1]"));
  request.set_requested_gpus(0, 1);
  request.add_requested_gpus(1);
  EXPECT_THAT(ValidateRegistration(request).message(), HasSubstr("requested twice"));
  request.clear_requested_gpus();
  *request.add_devices() = Cpu(1);
  *request.add_devices() = Cpu(1);
  EXPECT_THAT(ValidateRegistration(request).message(), HasSubstr("CPU is listed twice"));
}

// Workers that reported less memory than the job needs are left out with the numbers;
// unknown memory (0) places as before.
TEST(AssignmentTest, WorkersWithTooLittleMemoryAreLeftOutWithTheNumbers) {
  v1::JobSpec spec = WithDefaults(Spec(1, 4, 2));
  spec.mutable_model()->clear_layer_sizes();
  for (uint32_t size : {4096, 4096, 10}) spec.mutable_model()->add_layer_sizes(size);
  spec.set_global_batch_size(64);
  // 4096*4096 + 4096 + 4096*10 + 10 parameters, four copies per replica: ~257 MiB each.
  const MemoryEstimate estimate = EstimateMemory(spec, 2);
  EXPECT_EQ(estimate.parameters, 4096u * 4096 + 4096 + 4096 * 10 + 10);
  EXPECT_GT(estimate.replica_bytes, 16 * estimate.parameters);
  v1::Device small = Cpu(8), big = Cpu(8), unknown = Cpu(8);
  small.set_memory_bytes(256ull << 20);
  big.set_memory_bytes(64ull << 30);
  const GenerationPlan plan = PlanGeneration(
      spec, {Worker("w-small", 1, "a", {small}), Worker("w-big", 2, "b", {big}),
             Worker("w-unknown", 3, "c", {unknown})});
  ExpectConsistent(plan);
  EXPECT_EQ(plan.assignments.count("w-small"), 0u);
  EXPECT_EQ(plan.assignments.count("w-big"), 1u);
  EXPECT_EQ(plan.assignments.count("w-unknown"), 1u);
  ASSERT_EQ(plan.left_out.count("w-small"), 1u);
  const LeftOut& left = plan.left_out.at("w-small");
  EXPECT_EQ(left.kind, LeftOut::Kind::kTooLittleMemory);
  EXPECT_THAT(left.reason, HasSubstr("worker w-small on node a reports 0.25 GiB of memory"));
  EXPECT_THAT(left.reason, HasSubstr("2 replica(s) need about"));
  EXPECT_THAT(left.reason, HasSubstr("16822282 parameters, a batch share of 32 per replica"));

  // A GPU smaller than one replica.
  v1::Device tiny = Gpu(0);
  tiny.set_memory_bytes(100ull << 20);
  spec.set_replicas_per_worker(1);
  spec.set_devices(v1::GPU);
  const GenerationPlan gpu = PlanGeneration(spec, {Worker("w-gpu", 1, "g", {tiny, Cpu(8)})});
  ASSERT_EQ(gpu.left_out.count("w-gpu"), 1u);
  EXPECT_EQ(gpu.left_out.at("w-gpu").kind, LeftOut::Kind::kTooLittleMemory);
  EXPECT_THAT(gpu.left_out.at("w-gpu").reason, HasSubstr("GPU 0 (GPU-uuid-0) has 0.10 GiB"));
}

}  // namespace
}  // namespace tributary::coordinator
