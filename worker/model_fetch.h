// A job's TorchScript file, fetched from the coordinator (FetchModel) and checked
// against the digest the job names before anyone loads it. Used by workers and by
// `tributary export`.
#ifndef TRIBUTARY_WORKER_MODEL_FETCH_H_
#define TRIBUTARY_WORKER_MODEL_FETCH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/job.pb.h"

namespace tributary::worker {

// Streams the file whole. The coordinator's answer must be exactly file.size_bytes
// (when set) and hash to file.sha256: DATA_LOSS naming the file otherwise; the
// coordinator's own errors (NOT_FOUND, UNAVAILABLE, ...) come back as they are.
absl::StatusOr<std::shared_ptr<const std::string>> FetchModelFile(
    v1::Coordinator::Stub& coordinator, const v1::TorchScriptFile& file, absl::Duration timeout);

}  // namespace tributary::worker

#endif  // TRIBUTARY_WORKER_MODEL_FETCH_H_
