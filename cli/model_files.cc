#include "cli/model_files.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/parameters.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "common/partition_plan.h"
#include "common/tls.h"
#include "worker/engine/model_registry.h"
#include "worker/engine/torchscript.h"
#include "worker/model_fetch.h"

namespace tributary::cli {
namespace {

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

}  // namespace

absl::Status CheckModelFile(const v1::TorchScriptFile& file,
                            std::shared_ptr<const std::string> bytes,
                            const engine::Dataset* train) {
  absl::StatusOr<engine::ModelDef> model =
      engine::LoadTorchScriptModel(std::move(bytes), file.file_name(), train);
  if (!model.ok()) return model.status();
  // Loud, but not a refusal: the user may mean it.
  for (const std::string& warning : model->fit_warnings) {
    std::fprintf(stderr, "WARNING: %s\n", warning.c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::UploadModelResponse> UploadModelFile(
    v1::Coordinator::Stub& coordinator, const v1::TorchScriptFile& file, const std::string& bytes,
    const std::function<void(grpc::ClientContext&)>& authorize) {
  grpc::ClientContext context;
  // Generous: a large file over a slow link; the server bounds the size.
  context.set_deadline(In(600));
  if (authorize) authorize(context);
  v1::UploadModelResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadModelRequest>> writer =
      coordinator.UploadModel(&context, &response);
  v1::UploadModelRequest request;
  v1::ModelFileHeader& header = *request.mutable_header();
  header.set_file_name(file.file_name());
  header.set_sha256(file.sha256());
  header.set_size_bytes(bytes.size());
  bool open = writer->Write(request);
  constexpr size_t kChunk = 1 << 20;
  for (size_t at = 0; open && at < bytes.size(); at += kChunk) {
    request.set_chunk(bytes.data() + at, std::min(kChunk, bytes.size() - at));
    open = writer->Write(request);
  }
  writer->WritesDone();
  absl::Status status = FromGrpcStatus(writer->Finish(), "UploadModel");
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<ExportResult> ExportModel(std::shared_ptr<grpc::Channel> coordinator,
                                         const ChannelOptions& options, const std::string& job_id,
                                         const std::string& path) {
  auto stub = v1::Coordinator::NewStub(coordinator);
  v1::Job job;
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    absl::Status status = FromGrpcStatus(stub->GetJob(&context, request, &job), "GetJob");
    if (!status.ok()) return status;
  }
  const v1::JobSpec spec = WithDefaults(job.spec());
  absl::StatusOr<engine::ModelDef> model;
  if (IsTorchScript(spec.model())) {
    absl::StatusOr<std::shared_ptr<const std::string>> bytes =
        worker::FetchModelFile(*stub, spec.model().torchscript(), absl::Minutes(10));
    if (!bytes.ok()) return bytes.status();
    model = engine::LoadTorchScriptModel(*bytes, spec.model().torchscript().file_name());
  } else {
    model = engine::BuildModel(spec.model());
  }
  if (!model.ok()) return model.status();

  v1::ClusterStatus cluster;
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    absl::Status status =
        FromGrpcStatus(stub->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &cluster),
                       "GetClusterStatus");
    if (!status.ok()) return status;
  }
  const uint32_t num_shards = cluster.expected_shards() > 0
                                  ? cluster.expected_shards()
                                  : static_cast<uint32_t>(cluster.shards_size());
  absl::StatusOr<v1::PartitionPlan> plan =
      MakePartitionPlan(model->Layout(), spec.partition_bytes(), num_shards, spec.partition_cut());
  if (!plan.ok()) return plan.status();

  absl::StatusOr<PulledParameters> pulled =
      PullPlannedParameters(cluster, options, job.job_id(), *plan);
  if (!pulled.ok()) return pulled.status();
  ExportResult result;
  result.job_id = job.job_id();
  result.model = model->name;
  result.step = pulled->step;
  const std::vector<float>& values = pulled->values;
  if (absl::Status written = engine::ExportTorchScript(*model, values.data(), path);
      !written.ok()) {
    return written;
  }
  result.parameters = model->num_parameters;
  return result;
}

}  // namespace tributary::cli
