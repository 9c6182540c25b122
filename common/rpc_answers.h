// Gives the answers that gRPC's callback API leaves without a reason one, on every
// server (ServiceHost installs it first). A request that does not parse as its method's
// message is answered UNIMPLEMENTED with an empty message there (the callback
// handlers take a failed parse for a missing handler); here it becomes
// INVALID_ARGUMENT naming the method and the message type it expects. A call of a
// method no service of the server has stays UNIMPLEMENTED, and says so; a method a
// service has but does not implement keeps gRPC's answer.
#ifndef TRIBUTARY_COMMON_RPC_ANSWERS_H_
#define TRIBUTARY_COMMON_RPC_ANSWERS_H_

#include <grpcpp/support/server_interceptor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tributary {

// "/package.Service/Method" -> the full name of its request message.
using KnownMethods = std::map<std::string, std::string>;

// The methods of the named services (from the generated descriptors; the gRPC health
// and reflection services included).
std::shared_ptr<const KnownMethods> KnownMethodsOf(const std::vector<std::string>& services);

class RpcAnswersInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcAnswersInterceptorFactory(std::shared_ptr<const KnownMethods> methods)
      : methods_(std::move(methods)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  const std::shared_ptr<const KnownMethods> methods_;
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_RPC_ANSWERS_H_
