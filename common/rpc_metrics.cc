#include "common/rpc_metrics.h"

#include <chrono>
#include <string>

namespace tributary {
namespace {

using grpc::experimental::InterceptionHookPoints;

class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(std::string method, prometheus::Family<prometheus::Counter>& calls,
                        prometheus::Family<prometheus::Histogram>& durations)
      : method_(std::move(method)),
        calls_(calls),
        durations_(durations),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      calls_.Add({{"method", method_}, {"code", StatusCodeName(status.error_code())}})
          .Increment();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      durations_
          .Add({{"method", method_}},
               prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.005, 0.01, 0.05, 0.1,
                                                       0.5, 1, 5, 30, 300})
          .Observe(seconds);
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Family<prometheus::Histogram>& durations_;
  const std::chrono::steady_clock::time_point start_;
};

}  // namespace

RpcMetricsInterceptorFactory::RpcMetricsInterceptorFactory(
    prometheus::Registry& registry, std::shared_ptr<const KnownMethods> methods)
    : calls_(prometheus::BuildCounter()
                 .Name("tributary_rpc_total")
                 .Help("RPCs answered by this server, by method and status code.")
                 .Register(registry)),
      durations_(prometheus::BuildHistogram()
                     .Name("tributary_rpc_duration_seconds")
                     .Help("Time from the start of an RPC to its status, by method.")
                     .Register(registry)),
      methods_(std::move(methods)) {}

grpc::experimental::Interceptor* RpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const bool known = methods_ == nullptr || methods_->count(info->method()) > 0;
  return new RpcMetricsInterceptor(known ? info->method() : "unknown", calls_, durations_);
}

const char* StatusCodeName(int code) {
  static const char* const kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
      "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return "UNKNOWN";
  }
  return kNames[code];
}

}  // namespace tributary
