// The JobSpec as command-line flags, for `tributary local`, `submit` and `spec`,
// train_local and the benchmarks: one flag per knob, optionally on top of a spec read
// from --job_json (flags given on the command line win). Defaults not set by a flag
// come from common/job_spec.h. The flags live in sections: job_flags.cc (the job as a
// whole: name, schedule, checkpoints, where it starts), job_flags_model.cc,
// job_flags_data.cc, job_flags_optimizer.cc and job_flags_mode.cc (distribution).
#ifndef TRIBUTARY_COMMON_JOB_FLAGS_H_
#define TRIBUTARY_COMMON_JOB_FLAGS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace tributary {

// Remembers which flags the command line names (call with main's argc/argv before
// parsing; a later call replaces what an earlier one remembered); only those override
// --job_json. This Abseil release does not say whether
// a flag was given, so the command line is read directly.
void RememberGivenFlags(int argc, char** argv);

// True when the command line named --<name> (or --no<name>).
bool FlagGiven(const std::string& name);

// The spec the flags describe, validated, with defaults filled in. INVALID_ARGUMENT
// naming the flag for a bad value (an unknown --optimizer, a malformed --layers, an
// unreadable --job_json, a spec ValidateJobSpec refuses). With --model_file the model
// is torchscript, named by the file's SHA-256 and base name; *model_file (when given)
// receives the file's bytes for the upload.
absl::StatusOr<v1::JobSpec> JobSpecFromFlags(
    std::shared_ptr<const std::string>* model_file = nullptr);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_JOB_FLAGS_H_
