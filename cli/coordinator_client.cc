#include "cli/coordinator_client.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/cli_flags.h"
#include "cli/model_files.h"
#include "common/channel.h"
#include "common/cluster_auth.h"
#include "common/grpc_status.h"
#include "common/tls.h"

namespace tributary::cli {
namespace {

// --token_file's token, without its line end; "" when not given.
absl::StatusOr<std::string> ControlTokenFromFlag() {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> token = ReadFileToString(path);
  if (!token.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--token_file: ", token.status().message()));
  }
  std::string value = *std::move(token);
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  return value;
}

}  // namespace

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                                     ChannelOptions options, std::string control_token)
    : channel_(std::move(channel)),
      channel_options_(std::move(options)),
      stub_(v1::Coordinator::NewStub(channel_)),
      control_token_(std::move(control_token)) {}

absl::StatusOr<CoordinatorClient> CoordinatorClient::FromFlags(bool control) {
  const ChannelOptions options = ChannelOptionsFromFlags(Role::kOperator);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(absl::GetFlag(FLAGS_coordinator), options);
  if (!channel.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--coordinator=", absl::GetFlag(FLAGS_coordinator), ": ",
                     channel.status().message()));
  }
  if (!control) return CoordinatorClient(*std::move(channel), options, "");
  return OverChannel(*std::move(channel), options);
}

absl::StatusOr<CoordinatorClient> CoordinatorClient::OverChannel(
    std::shared_ptr<grpc::Channel> channel, ChannelOptions options) {
  absl::StatusOr<std::string> token = ControlTokenFromFlag();
  if (!token.ok()) return token.status();
  return CoordinatorClient(std::move(channel), std::move(options), *std::move(token));
}

void CoordinatorClient::Prepare(grpc::ClientContext& context, absl::Duration deadline,
                                bool control) const {
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  if (control && !control_token_.empty()) {
    context.AddMetadata("authorization", "Bearer " + control_token_);
  }
}

absl::Status CoordinatorClient::WithTokenHint(absl::Status status) const {
  if (absl::IsUnauthenticated(status) && control_token_.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(status.message(),
                     "; pass the coordinator's control token with --token_file=FILE"));
  }
  return status;
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::ClientContext context;
  Prepare(context, kDeadline, false);
  absl::Status status = FromGrpcStatus(stub_->GetJob(&context, request, &job), "GetJob");
  if (!status.ok()) return status;
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::Submit(const v1::JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::Job job;
  grpc::ClientContext context;
  Prepare(context, kSubmitDeadline, true);
  absl::Status status = FromGrpcStatus(stub_->SubmitJob(&context, request, &job), "SubmitJob");
  if (!status.ok()) return WithTokenHint(status);
  return job;
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorClient::ListJobs() {
  v1::ListJobsResponse jobs;
  grpc::ClientContext context;
  Prepare(context, kDeadline, false);
  absl::Status status =
      FromGrpcStatus(stub_->ListJobs(&context, v1::ListJobsRequest(), &jobs), "ListJobs");
  if (!status.ok()) return status;
  return jobs;
}

absl::StatusOr<v1::ClusterStatus> CoordinatorClient::ClusterStatus() {
  v1::ClusterStatus status;
  grpc::ClientContext context;
  Prepare(context, kDeadline, false);
  absl::Status rpc = FromGrpcStatus(
      stub_->GetClusterStatus(&context, v1::GetClusterStatusRequest(), &status),
      "GetClusterStatus");
  if (!rpc.ok()) return rpc;
  return status;
}

absl::StatusOr<v1::Job> CoordinatorClient::ControlJob(Control verb, const std::string& job_id,
                                                      const std::string& reason,
                                                      absl::Duration deadline) {
  v1::JobControlRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  grpc::ClientContext context;
  Prepare(context, deadline, true);
  grpc::Status status;
  const char* name = "";
  switch (verb) {
    case Control::kPause:
      name = "pause";
      status = stub_->PauseJob(&context, request, &job);
      break;
    case Control::kResume:
      name = "resume";
      status = stub_->ResumeJob(&context, request, &job);
      break;
    case Control::kStop:
      name = "stop";
      status = stub_->StopJob(&context, request, &job);
      break;
  }
  if (!status.ok()) return WithTokenHint(FromGrpcStatus(status, name));
  return job;
}

absl::StatusOr<v1::UploadModelResponse> CoordinatorClient::UploadModel(
    const v1::TorchScriptFile& file, const std::string& bytes) {
  absl::StatusOr<v1::UploadModelResponse> uploaded =
      UploadModelFile(*stub_, file, bytes, [this](grpc::ClientContext& context) {
        if (!control_token_.empty()) {
          context.AddMetadata("authorization", "Bearer " + control_token_);
        }
      });
  if (!uploaded.ok()) return WithTokenHint(uploaded.status());
  return uploaded;
}

}  // namespace tributary::cli
