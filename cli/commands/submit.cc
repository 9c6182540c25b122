// `tributary submit [job flags]`: the job to a running coordinator.
#include <iostream>

#include "cli/commands/commands.h"
#include "common/job_flags.h"

namespace tributary::cli {

int RunSubmit() {
  std::shared_ptr<const std::string> model_file;
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags(&model_file);
  if (!spec.ok()) return Fail(spec.status());
  absl::StatusOr<CoordinatorClient> client = CoordinatorClient::FromFlags(/*control=*/true);
  if (!client.ok()) return UsageError(client.status());
  if (model_file != nullptr) {
    // The data may live only on the workers' machines: the file alone is checked here.
    if (absl::Status checked = CheckModelFlag(*spec, model_file, nullptr); !checked.ok()) {
      return Fail(checked);
    }
    if (absl::Status uploaded = UploadModel(*client, *spec, *model_file); !uploaded.ok()) {
      return Fail(uploaded);
    }
  }
  absl::StatusOr<v1::Job> job = client->Submit(*spec);
  if (!job.ok()) return Fail(job.status());
  std::cout << "submitted " << job->job_id() << " (" << v1::JobState_Name(job->state())
            << ")\n";
  return 0;
}

}  // namespace tributary::cli
