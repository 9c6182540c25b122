#include "common/serve.h"

#include <glog/logging.h>

namespace tributary {

int ServeUntilShutdown(ServiceHost& host, ShutdownSignal& shutdown) {
  if (absl::Status started = host.Start(); !started.ok()) {
    LOG(ERROR) << "cannot start: " << started;
    return 1;
  }
  host.SetServing(true);
  const std::string reason = shutdown.Wait();
  LOG(INFO) << "shutting down (" << reason << ")";
  host.Shutdown();
  return 0;
}

}  // namespace tributary
