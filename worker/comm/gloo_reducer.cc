// "gloo": the replicas of this process are summed by the thread reducer, then Gloo
// reduces the processes' sums onto local rank 0 and broadcasts its parameters back.
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "worker/comm/gloo_store.h"
#include "worker/comm/intra_node_reducer.h"

namespace tributary::worker {
namespace {

void SumFloats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// Gloo reports errors by throwing; every call goes through here.
template <typename Fn>
absl::Status GlooCall(const std::string& what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo ", what, ": ", e.what()));
  }
}

class GlooReducer : public IntraNodeReducer {
 public:
  GlooReducer(std::unique_ptr<IntraNodeReducer> local,
              std::shared_ptr<gloo::rendezvous::Context> context, GroupOptions options)
      : local_(std::move(local)), context_(std::move(context)), options_(options) {}

  absl::Status ReduceGradients(int64_t offset, int64_t length, float* out) override {
    local_sum_.resize(length);
    if (absl::Status s = local_->ReduceGradients(offset, length, local_sum_.data()); !s.ok()) {
      return s;
    }
    return GlooCall(absl::StrCat("reduce of [", offset, ", ", offset + length, ")"), [&] {
      gloo::ReduceOptions opts(context_);
      opts.setInput(local_sum_.data(), length);
      opts.setOutput(out, length);
      opts.setRoot(0);
      opts.setReduceFunction(SumFloats);
      opts.setTag(next_tag_++);
      opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
      gloo::reduce(opts);
    });
  }

  absl::Status BroadcastParameters(float* params, int64_t offset, int64_t length) override {
    absl::Status status =
        GlooCall(absl::StrCat("broadcast of [", offset, ", ", offset + length, ")"), [&] {
          gloo::BroadcastOptions opts(context_);
          opts.setOutput(params + offset, length);
          opts.setRoot(0);
          opts.setTag(next_tag_++);
          opts.setTimeout(absl::ToChronoMilliseconds(options_.timeout));
          gloo::broadcast(opts);
        });
    if (!status.ok()) return status;
    return local_->BroadcastParameters(params, offset, length);
  }

  std::string name() const override { return "gloo"; }

 private:
  std::unique_ptr<IntraNodeReducer> local_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  const GroupOptions options_;
  std::vector<float> local_sum_;
  uint32_t next_tag_ = 1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IntraNodeReducer>> MakeGlooReducer(
    engine::ReplicaGroup& replicas, RendezvousClient& rendezvous, const GroupOptions& options) {
  if (options.local_world_size < 2 || options.local_rank < 0 ||
      options.local_rank >= options.local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo group: rank ", options.local_rank,
                                                   " of ", options.local_world_size,
                                                   " (needs 2 or more processes)"));
  }
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = GlooCall(
      absl::StrCat("rendezvous of ", options.local_world_size, " processes under ",
                   rendezvous.rendezvous_id()),
      [&] {
        gloo::transport::tcp::attr attr;
        attr.hostname = options.bind_host;
        std::shared_ptr<gloo::transport::Device> device =
            gloo::transport::tcp::CreateDevice(attr);
        context = std::make_shared<gloo::rendezvous::Context>(options.local_rank,
                                                              options.local_world_size);
        context->setTimeout(absl::ToChronoMilliseconds(options.timeout));
        KvGlooStore store(rendezvous, "gloo", absl::ToChronoMilliseconds(options.timeout));
        context->connectFullMesh(store, device);
      });
  if (!status.ok()) return status;
  LOG(INFO) << "gloo group ready: rank " << options.local_rank << " of "
            << options.local_world_size << " (" << rendezvous.rendezvous_id() << ")";
  return std::unique_ptr<IntraNodeReducer>(
      new GlooReducer(MakeThreadReducer(replicas), std::move(context), options));
}

}  // namespace tributary::worker
