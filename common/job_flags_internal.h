// Shared by the sections of the job flags (job_flags*.cc): which flags apply, and
// how a bad value is named.
#ifndef TRIBUTARY_COMMON_JOB_FLAGS_INTERNAL_H_
#define TRIBUTARY_COMMON_JOB_FLAGS_INTERNAL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/job_flags.h"
#include "proto/job.pb.h"

namespace tributary::job_flags {

// Whether a flag sets its field: without --job_json every flag does (its default
// included); with it, only the flags given on the command line.
struct FlagUse {
  bool from_json = false;
  bool operator()(const char* name) const { return !from_json || FlagGiven(name); }
};

absl::Status BadFlag(const std::string& name, const std::string& value,
                     const std::string& expected);

// Positive integers separated by commas.
absl::StatusOr<std::vector<uint32_t>> ParseSizes(const std::string& name,
                                                 const std::string& value);

template <typename Enum>
absl::StatusOr<Enum> ParseChoice(const std::string& name, const std::string& value,
                                 const std::vector<std::pair<std::string, Enum>>& choices) {
  const std::string lower = absl::AsciiStrToLower(value);
  std::string expected;
  for (const auto& [text, result] : choices) {
    if (lower == text) return result;
    absl::StrAppend(&expected, expected.empty() ? "" : ", ", text);
  }
  return BadFlag(name, value, "one of " + expected);
}

// The sections: each sets its fields of `spec` from its flags, or says which flag is
// wrong.
absl::Status ApplyModelFlags(const FlagUse& use, v1::JobSpec& spec,
                             std::shared_ptr<const std::string>* model_file);
absl::Status ApplyDataFlags(const FlagUse& use, v1::JobSpec& spec);
absl::Status ApplyOptimizerFlags(const FlagUse& use, v1::JobSpec& spec);
absl::Status ApplyModeFlags(const FlagUse& use, v1::JobSpec& spec);

}  // namespace tributary::job_flags

#endif  // TRIBUTARY_COMMON_JOB_FLAGS_INTERNAL_H_
