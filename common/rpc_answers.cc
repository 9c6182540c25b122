#include "common/rpc_answers.h"

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"

namespace tributary {
namespace {

using grpc::experimental::InterceptionHookPoints;

class RpcAnswersInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcAnswersInterceptor(std::string method, const KnownMethods* methods)
      : method_(std::move(method)), methods_(methods) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsed_ = true;  // gRPC could not parse the request into its message.
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      auto known = methods_->find(method_);
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          status.error_message().empty() && (unparsed_ || known == methods_->end())) {
        // Bounded: a stranger chooses the method's name.
        const std::string shown = method_.substr(0, 200);
        methods->ModifySendStatus(
            known != methods_->end()
                ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               absl::StrCat(shown, ": the request is not a valid ", known->second,
                                            " message (it does not parse)"))
                : grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                               absl::StrCat("no method ", shown,
                                            " here (grpcurl ... list shows the services)")));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const KnownMethods* const methods_;
  bool unparsed_ = false;
};

}  // namespace

std::shared_ptr<const KnownMethods> KnownMethodsOf(const std::vector<std::string>& services) {
  auto methods = std::make_shared<KnownMethods>();
  std::vector<std::string> all = services;
  all.push_back("grpc.health.v1.Health");
  all.push_back("grpc.reflection.v1alpha.ServerReflection");
  for (const std::string& name : all) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* method = service->method(i);
      (*methods)[absl::StrCat("/", service->full_name(), "/", method->name())] =
          method->input_type()->full_name();
    }
  }
  return methods;
}

grpc::experimental::Interceptor* RpcAnswersInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RpcAnswersInterceptor(info->method(), methods_.get());
}

}  // namespace tributary
