// The model a job trains, whichever engine runs it: a registered native model built
// from the ModelSpec, or the job's TorchScript file (its bytes come from the caller:
// fetched from the coordinator by a worker, read from disk by train_local). Checked
// against the training data either way, before any replica exists.
#ifndef TRIBUTARY_WORKER_ENGINE_JOB_MODEL_H_
#define TRIBUTARY_WORKER_ENGINE_JOB_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "worker/engine/dataset.h"
#include "worker/engine/model.h"

namespace tributary::engine {

// spec: defaults applied. torchscript_bytes: the file for a torchscript model (null
// otherwise); its SHA-256 must equal spec.torchscript.sha256 (DATA_LOSS naming both
// digests when not). INVALID_ARGUMENT when the model does not fit the training data,
// naming both; UNAVAILABLE for torchscript in a build without LibTorch.
absl::StatusOr<ModelDef> BuildJobModel(const v1::ModelSpec& spec,
                                       std::shared_ptr<const std::string> torchscript_bytes,
                                       const Dataset& train);

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_JOB_MODEL_H_
