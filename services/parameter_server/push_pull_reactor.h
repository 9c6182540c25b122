// The gRPC PushPull stream of one node on a shard: pushes go up, parameter values come
// down, both as raw messages (common/partition_codec.h). The service's side of the
// gRPC lane (the TCP data plane is data_plane.h).
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_PUSH_PULL_REACTOR_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_PUSH_PULL_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include "services/parameter_server/node_credential_book.h"
#include "services/parameter_server/parameter_shard.h"
#include "services/parameter_server/partition_executor.h"

namespace tributary::ps {

// The reactor of one PushPull call; it deletes itself once gRPC is done with it.
// With `credentials` (a shard serving with cluster credentials), every push must claim
// the node whose credential the stream presented (x-tributary-node).
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewPushPullReactor(
    ParameterShard* shard, PartitionExecutor* executor, grpc::CallbackServerContext* context,
    const NodeCredentialBook* credentials);

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_PUSH_PULL_REACTOR_H_
