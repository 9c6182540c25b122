#include "worker/comm/shard_calls.h"

#include <glog/logging.h>
#include <grpcpp/client_context.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cluster_auth.h"
#include "common/grpc_status.h"

namespace tributary::worker {

absl::StatusOr<uint64_t> InstallJob(const ShardRef& shard, const PsIdentity& identity,
                                    const v1::PartitionPlan& plan,
                                    const std::vector<uint32_t>& partitions,
                                    const v1::JobSpec& spec, uint64_t total_steps,
                                    const float* params) {
  grpc::ClientContext context;
  if (!identity.node_credential.empty()) {
    context.AddMetadata(kNodeCredentialMetadata, identity.node_credential);
  }
  v1::InitPartitionsResponse response;
  auto writer = shard.stub->InitPartitions(&context, &response);
  v1::InitPartitionsRequest request;
  v1::InitHeader& header = *request.mutable_header();
  header.set_job_id(identity.job_id);
  *header.mutable_job() = spec;
  *header.mutable_plan() = plan;
  header.set_shard_index(shard.index);
  header.set_total_steps(total_steps);
  header.set_generation(identity.generation);
  header.set_num_nodes(identity.num_nodes);
  header.set_resume_step(identity.resume_step);
  header.set_node_rank(identity.node_rank);
  bool written = writer->Write(request);
  for (uint32_t id : partitions) {
    if (!written) break;
    const v1::Partition& partition = plan.partitions(id);
    v1::InitPartitionsRequest values;
    v1::PartitionValues& initial = *values.mutable_initial();
    initial.set_partition_id(id);
    initial.set_dtype(v1::FLOAT32);
    initial.set_data(reinterpret_cast<const char*>(params + partition.offset()),
                     partition.length() * sizeof(float));
    written = writer->Write(values);
  }
  writer->WritesDone();
  absl::Status status =
      FromGrpcStatus(writer->Finish(), absl::StrCat("InitPartitions on ", shard.name));
  if (!status.ok()) return status;
  LOG(INFO) << shard.name << ": job " << identity.job_id
            << (response.created() ? " installed" : " already installed") << ", step "
            << response.step()
            << (response.restored_from().empty()
                    ? std::string()
                    : absl::StrCat(" (restored from ", response.restored_from(), ")"));
  return response.step();
}

absl::Status CheckPartitionValues(const v1::PartitionPlan& plan,
                                  const PartitionValuesView& values) {
  if (values.partition_id >= static_cast<uint32_t>(plan.partitions_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the PS sent unknown partition ", values.partition_id));
  }
  const v1::Partition& partition = plan.partitions(values.partition_id);
  if (values.dtype != v1::FLOAT32 ||
      values.data.size != static_cast<size_t>(partition.length()) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the PS sent partition ", partition.id(), " as ", v1::DType_Name(values.dtype), " with ",
        values.data.size, " bytes; expected FLOAT32 with ", partition.length() * sizeof(float)));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PullFromShard(const ShardRef& shard, const std::string& job_id,
                                       const v1::PartitionPlan& plan, float* params,
                                       std::vector<bool>& seen, uint64_t* bytes) {
  grpc::ClientContext context;
  v1::PullRequest request;
  request.set_job_id(job_id);
  auto reader = shard.stub->Pull(&context, request);
  v1::PartitionValues values;
  uint64_t lowest_step = ~uint64_t{0};
  while (reader->Read(&values)) {
    PartitionValuesView view;
    view.partition_id = values.partition_id();
    view.dtype = values.dtype();
    view.data = ByteSpans::Of(values.data());
    if (absl::Status checked = CheckPartitionValues(plan, view); !checked.ok()) {
      context.TryCancel();
      reader->Finish();
      return checked;
    }
    const v1::Partition& partition = plan.partitions(values.partition_id());
    std::memcpy(params + partition.offset(), values.data().data(), values.data().size());
    *bytes += values.data().size();
    seen[values.partition_id()] = true;
    lowest_step = std::min(lowest_step, values.step());
  }
  absl::Status status = FromGrpcStatus(reader->Finish(), absl::StrCat("Pull from ", shard.name));
  if (!status.ok()) return status;
  return lowest_step;
}

}  // namespace tributary::worker
