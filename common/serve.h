// The tail every service main() shares: start serving, report ready, wait for
// SIGTERM/SIGINT (or an in-process request), drain, stop.
#ifndef TRIBUTARY_COMMON_SERVE_H_
#define TRIBUTARY_COMMON_SERVE_H_

#include "common/service_host.h"
#include "common/shutdown.h"

namespace tributary {

// Starts `host`, marks it SERVING, blocks until `shutdown` fires, then drains.
// Returns the process exit code (1 when the server could not start).
int ServeUntilShutdown(ServiceHost& host, ShutdownSignal& shutdown);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_SERVE_H_
