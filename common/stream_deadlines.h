// Deadlines for client streams that a server reads until the client half-closes
// (InitPartitions on a PS shard, UploadModel on the coordinator). Such a stream holds
// memory and a slot for as long as its client keeps the call open; StreamDeadlines
// cancels the ones that run past a total deadline, or go longer than an idle deadline
// without a message, when its owner calls Expire (periodically). Thread-safe.
#ifndef TRIBUTARY_COMMON_STREAM_DEADLINES_H_
#define TRIBUTARY_COMMON_STREAM_DEADLINES_H_

#include <grpcpp/server_context.h>

#include <cstddef>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tributary {

class StreamDeadlines {
 public:
  // `what` names the streams in the log ("InitPartitions"); `total` and `idle` are
  // the deadlines (absl::InfiniteDuration(): none). `clock` is not owned.
  StreamDeadlines(std::string what, const Clock* clock, absl::Duration total, absl::Duration idle);

  // `expire`, when given, ends the stream instead of cancelling its context (it is
  // called with the reason, under this object's lock, so it must not call back into
  // it; gRPC runs a reactor's OnDone after Finish on a thread of its own).
  void Add(const void* stream, grpc::CallbackServerContext* context,
           std::function<void(const std::string& why)> expire = nullptr);
  void Touch(const void* stream);  // A message arrived on it.
  void Remove(const void* stream);
  // Cancels the streams past a deadline (each once); how many.
  int Expire();
  size_t size() const;

 private:
  struct Open {
    absl::Time since;
    absl::Time last_message;
    grpc::CallbackServerContext* context;
    std::function<void(const std::string& why)> expire;
    bool cancelled;
  };
  const std::string what_;
  const Clock* const clock_;
  const absl::Duration total_;
  const absl::Duration idle_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const void*, Open> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_STREAM_DEADLINES_H_
