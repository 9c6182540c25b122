// The CLI's one way to the coordinator: the channel (TLS and the operator's cluster
// credential, from the flags), the control token (--token_file) on the calls that
// need it, a deadline on every call, and errors that say how to pass a missing token.
// Every verb (cli/commands/) goes through it.
#ifndef TRIBUTARY_CLI_COORDINATOR_CLIENT_H_
#define TRIBUTARY_CLI_COORDINATOR_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/channel.h"
#include "proto/coordinator.grpc.pb.h"

namespace tributary::cli {

class CoordinatorClient {
 public:
  // --coordinator, over the operator's channel (--tls_*, --cluster_token_file); with
  // `control` (the verbs that submit or control jobs), --token_file's control token.
  // INVALID_ARGUMENT naming the flag for a bad one.
  static absl::StatusOr<CoordinatorClient> FromFlags(bool control);
  // Over `channel` (tributary local's own), with --token_file's control token when
  // given.
  static absl::StatusOr<CoordinatorClient> OverChannel(std::shared_ptr<grpc::Channel> channel,
                                                       ChannelOptions options);

  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::ListJobsResponse> ListJobs();
  absl::StatusOr<v1::ClusterStatus> ClusterStatus();
  enum class Control { kPause, kResume, kStop };
  // PauseJob, ResumeJob or StopJob of `job_id` (empty: the active job).
  absl::StatusOr<v1::Job> ControlJob(Control verb, const std::string& job_id,
                                     const std::string& reason,
                                     absl::Duration deadline = kDeadline);
  // Streams a TorchScript file to UploadModel.
  absl::StatusOr<v1::UploadModelResponse> UploadModel(const v1::TorchScriptFile& file,
                                                      const std::string& bytes);

  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  // How channels to the cluster's other services (the PS shards, for pull and export)
  // are made: the same TLS and cluster credential.
  const ChannelOptions& channel_options() const { return channel_options_; }

  // Every call but SubmitJob's (which may wait for a model check) gets this long.
  static constexpr absl::Duration kDeadline = absl::Seconds(10);
  static constexpr absl::Duration kSubmitDeadline = absl::Seconds(30);

 private:
  CoordinatorClient(std::shared_ptr<grpc::Channel> channel, ChannelOptions options,
                    std::string control_token);
  // A deadline, and the control token for the calls that change something.
  void Prepare(grpc::ClientContext& context, absl::Duration deadline, bool control) const;
  // A refused control call says how to send the token when none was given.
  absl::Status WithTokenHint(absl::Status status) const;

  std::shared_ptr<grpc::Channel> channel_;
  ChannelOptions channel_options_;
  std::shared_ptr<v1::Coordinator::Stub> stub_;
  std::string control_token_;  // Empty: none.
};

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_COORDINATOR_CLIENT_H_
