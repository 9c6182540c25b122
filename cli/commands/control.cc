// `tributary pause | resume | stop [--job_id] [--reason]`: job control.
#include <iostream>

#include "absl/flags/flag.h"
#include "cli/cli_flags.h"
#include "cli/commands/commands.h"

namespace tributary::cli {

int RunControl(CoordinatorClient::Control verb) {
  absl::StatusOr<CoordinatorClient> client = CoordinatorClient::FromFlags(/*control=*/true);
  if (!client.ok()) return UsageError(client.status());
  const char* name = verb == CoordinatorClient::Control::kPause    ? "pause"
                     : verb == CoordinatorClient::Control::kResume ? "resume"
                                                                   : "stop";
  const std::string reason = absl::GetFlag(FLAGS_reason).empty()
                                 ? std::string("tributary ") + name
                                 : absl::GetFlag(FLAGS_reason);
  absl::StatusOr<v1::Job> job = client->ControlJob(verb, absl::GetFlag(FLAGS_job_id), reason);
  if (!job.ok()) return Fail(job.status());
  std::cout << job->job_id() << ": " << v1::JobState_Name(job->state()) << "\n";
  return 0;
}

}  // namespace tributary::cli
