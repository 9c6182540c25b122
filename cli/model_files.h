// Model files from the command line's side: checking a TorchScript file before it
// leaves the user's machine, uploading it to the coordinator, and exporting a job's
// trained model (its parameters and buffers pulled from the PS shards) as a
// TorchScript file.
#ifndef TRIBUTARY_CLI_MODEL_FILES_H_
#define TRIBUTARY_CLI_MODEL_FILES_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/channel.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/job.pb.h"
#include "worker/engine/dataset.h"

namespace tributary::cli {

// Loads the file with LibTorch (a loadable module with trainable parameters) and, when
// `train` is given, fits it to that data (input shape and dtype, classes or its own
// loss and metrics, a finite pass); what the fit warns of (a softmax head) goes to
// stderr as WARNING lines. Errors name the file and the problem.
absl::Status CheckModelFile(const v1::TorchScriptFile& file,
                            std::shared_ptr<const std::string> bytes, const engine::Dataset* train);

// Streams the file to UploadModel in 1 MiB chunks; `authorize` adds the token.
absl::StatusOr<v1::UploadModelResponse> UploadModelFile(
    v1::Coordinator::Stub& coordinator, const v1::TorchScriptFile& file, const std::string& bytes,
    const std::function<void(grpc::ClientContext&)>& authorize);

struct ExportResult {
  std::string job_id;
  std::string model;       // "torchscript:net.pt", "mlp", ...
  uint64_t step = 0;       // Lowest step over the partitions exported.
  int64_t parameters = 0;  // Floats written (parameters and buffers).
};

// Writes the job's (empty = the active or latest one) current or final model to
// `path` as TorchScript: gets the job from the coordinator, its model file (if
// torchscript), the partition plan it ran with, and every partition from the shards
// (which answer from their newest checkpoint of a job they no longer hold).
absl::StatusOr<ExportResult> ExportModel(std::shared_ptr<grpc::Channel> coordinator,
                                         const ChannelOptions& options, const std::string& job_id,
                                         const std::string& path);

}  // namespace tributary::cli

#endif  // TRIBUTARY_CLI_MODEL_FILES_H_
