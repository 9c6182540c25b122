// Counts every RPC a server answers, by method and status code, and times it.
// Installed by ServiceHost on every server, so each service exports
//   tributary_rpc_total{method="/tributary.v1.Coordinator/Heartbeat",code="OK"}
//   tributary_rpc_duration_seconds{method=...} (histogram)
// A method no service of the server has is counted as method="unknown" (its name is
// a stranger's to choose: one series each would grow without bound).
#ifndef TRIBUTARY_COMMON_RPC_METRICS_H_
#define TRIBUTARY_COMMON_RPC_METRICS_H_

#include <memory>

#include <grpcpp/support/server_interceptor.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/rpc_answers.h"

namespace tributary {

class RpcMetricsInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `methods`: the server's methods (null: every name is counted as it comes).
  RpcMetricsInterceptorFactory(prometheus::Registry& registry,
                               std::shared_ptr<const KnownMethods> methods = nullptr);

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Histogram>& durations_;
  const std::shared_ptr<const KnownMethods> methods_;
};

// Name of a gRPC status code as grpcurl prints it ("OK", "INVALID_ARGUMENT", ...).
const char* StatusCodeName(int code);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_RPC_METRICS_H_
