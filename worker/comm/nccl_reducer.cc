// "nccl": one communicator clique over every GPU replica of the node group (the
// replicas of this process and of the node's other worker processes), built from
// an ncclUniqueId passed through the coordinator's rendezvous KV (Chainer's
// pattern, with the coordinator in place of a pipe). Non-blocking NCCL: every wait
// polls the communicators' async errors and aborts them after the timeout, so a
// dead peer becomes an error instead of a hang.
#include "worker/comm/intra_node_reducer.h"

#if defined(TRIBUTARY_WITH_CUDA)

#include <cuda_runtime.h>
#include <nccl.h>

#include <thread>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/engine/gpu_replica.h"

namespace tributary::worker {
namespace {

constexpr char kUniqueIdKey[] = "nccl/unique_id";

absl::Status CudaCheck(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::Status NcclCheck(ncclResult_t result, const char* what) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(result)));
}

class NcclReducer : public IntraNodeReducer {
 public:
  NcclReducer(std::vector<engine::GpuReplica*> gpus, std::vector<ncclComm_t> comms,
              NcclGroupOptions options)
      : gpus_(std::move(gpus)), comms_(std::move(comms)), options_(options) {}

  ~NcclReducer() override {
    for (size_t i = 0; i < comms_.size(); ++i) {
      cudaSetDevice(gpus_[i]->device_ordinal());
      if (broken_) {
        ncclCommAbort(comms_[i]);
      } else {
        ncclCommDestroy(comms_[i]);
      }
    }
  }

  absl::Status ReduceGradients(int64_t offset, int64_t length, float* out) override {
    const std::string what = absl::StrCat("nccl reduce of [", offset, ", ", offset + length, ")");
    if (broken_) return absl::UnavailableError(what + ": communicator was aborted earlier");
    if (absl::Status s = NcclCheck(ncclGroupStart(), "ncclGroupStart"); !s.ok()) return s;
    for (size_t i = 0; i < gpus_.size(); ++i) {
      float* grads = gpus_[i]->device_gradients() + offset;
      // In place: rank 0 receives the sum in its own gradient buffer.
      absl::Status s = NcclCheck(ncclReduce(grads, grads, length, ncclFloat, ncclSum, 0,
                                            comms_[i], gpus_[i]->stream()),
                                 "ncclReduce");
      if (!s.ok()) return s;
    }
    if (absl::Status s = NcclCheck(ncclGroupEnd(), "ncclGroupEnd"); !s.ok()) return s;
    if (absl::Status s = WaitStreams(what); !s.ok()) return s;
    if (options_.first_rank != 0) return absl::OkStatus();
    return CudaCheck(cudaMemcpy(out, gpus_[0]->device_gradients() + offset,
                                length * sizeof(float), cudaMemcpyDeviceToHost),
                     "copying the node's gradient sum to the host");
  }

  absl::Status BroadcastParameters(float* params, int64_t offset, int64_t length) override {
    const std::string what =
        absl::StrCat("nccl broadcast of [", offset, ", ", offset + length, ")");
    if (broken_) return absl::UnavailableError(what + ": communicator was aborted earlier");
    const bool root_here = options_.first_rank == 0;
    if (root_here) {
      cudaSetDevice(gpus_[0]->device_ordinal());
      absl::Status s = CudaCheck(
          cudaMemcpyAsync(gpus_[0]->device_parameters() + offset, params + offset,
                          length * sizeof(float), cudaMemcpyHostToDevice, gpus_[0]->stream()),
          "uploading the leader's parameters");
      if (!s.ok()) return s;
    }
    if (absl::Status s = NcclCheck(ncclGroupStart(), "ncclGroupStart"); !s.ok()) return s;
    for (size_t i = 0; i < gpus_.size(); ++i) {
      float* values = gpus_[i]->device_parameters() + offset;
      absl::Status s = NcclCheck(ncclBroadcast(values, values, length, ncclFloat, 0, comms_[i],
                                               gpus_[i]->stream()),
                                 "ncclBroadcast");
      if (!s.ok()) return s;
    }
    if (absl::Status s = NcclCheck(ncclGroupEnd(), "ncclGroupEnd"); !s.ok()) return s;
    if (absl::Status s = WaitStreams(what); !s.ok()) return s;
    if (root_here) return absl::OkStatus();
    // Keep this process's host copy equal to the leader's (evaluation, status).
    return CudaCheck(cudaMemcpy(params + offset, gpus_[0]->device_parameters() + offset,
                                length * sizeof(float), cudaMemcpyDeviceToHost),
                     "copying broadcast parameters to the host");
  }

  std::string name() const override { return "nccl"; }

 private:
  // Polls the streams and the communicators' async errors; aborts after the timeout.
  absl::Status WaitStreams(const std::string& what) {
    const absl::Time give_up = absl::Now() + options_.timeout;
    while (true) {
      bool all_done = true;
      for (size_t i = 0; i < gpus_.size(); ++i) {
        cudaSetDevice(gpus_[i]->device_ordinal());
        const cudaError_t query = cudaStreamQuery(gpus_[i]->stream());
        if (query == cudaErrorNotReady) {
          all_done = false;
        } else if (query != cudaSuccess) {
          return CudaCheck(query, what.c_str());
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comms_[i], &async);
        if (async != ncclSuccess && async != ncclInProgress) {
          Abort();
          return absl::UnavailableError(absl::StrCat(what, ": ", ncclGetErrorString(async), " (",
                                                     ncclGetLastError(comms_[i]), ")"));
        }
      }
      if (all_done) return absl::OkStatus();
      if (absl::Now() > give_up) {
        Abort();
        return absl::UnavailableError(absl::StrCat(
            what, ": no progress for ", absl::FormatDuration(options_.timeout),
            " (a peer of the node group died or hangs); communicator aborted"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void Abort() {
    if (broken_) return;
    broken_ = true;
    for (size_t i = 0; i < comms_.size(); ++i) ncclCommAbort(comms_[i]);
    comms_.clear();
  }

  std::vector<engine::GpuReplica*> gpus_;
  std::vector<ncclComm_t> comms_;
  const NcclGroupOptions options_;
  bool broken_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IntraNodeReducer>> MakeNcclReducer(
    engine::ReplicaGroup& replicas, RendezvousClient& rendezvous,
    const NcclGroupOptions& options) {
  std::vector<engine::GpuReplica*> gpus;
  for (int i = 0; i < replicas.size(); ++i) {
    auto* gpu = dynamic_cast<engine::GpuReplica*>(&replicas.replica(i));
    if (gpu == nullptr) {
      return absl::UnavailableError(absl::StrCat("nccl: replica ", i, " runs on ",
                                                 replicas.replica(i).device(),
                                                 ", not on a GPU"));
    }
    gpus.push_back(gpu);
  }
  if (options.first_rank < 0 || options.first_rank + static_cast<int>(gpus.size()) >
                                    options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: ranks [", options.first_rank, ", ", options.first_rank + gpus.size(),
        ") do not fit a clique of ", options.world_size));
  }

  ncclUniqueId id;
  if (options.first_rank == 0) {
    if (absl::Status s = NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) return s;
    absl::Status published = rendezvous.Publish(
        kUniqueIdKey, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    if (!published.ok()) return published;
  } else {
    absl::StatusOr<std::vector<std::string>> values =
        rendezvous.Wait({kUniqueIdKey}, options.timeout);
    if (!values.ok()) return values.status();
    if (values->front().size() != sizeof(id)) {
      return absl::InvalidArgumentError(absl::StrCat("nccl: unique id under ", kUniqueIdKey,
                                                     " has ", values->front().size(),
                                                     " bytes, expected ", sizeof(id)));
    }
    std::memcpy(&id, values->front().data(), sizeof(id));
  }

  std::vector<ncclComm_t> comms(gpus.size());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (absl::Status s = NcclCheck(ncclGroupStart(), "ncclGroupStart"); !s.ok()) return s;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (absl::Status s = CudaCheck(cudaSetDevice(gpus[i]->device_ordinal()), "cudaSetDevice");
        !s.ok()) {
      return s;
    }
    absl::Status s = NcclCheck(ncclCommInitRankConfig(&comms[i], options.world_size, id,
                                                      options.first_rank + i, &config),
                               "ncclCommInitRankConfig");
    if (!s.ok()) return s;
  }
  if (absl::Status s = NcclCheck(ncclGroupEnd(), "ncclGroupEnd"); !s.ok()) return s;
  // Non-blocking init: wait for every communicator, or give up and abort them.
  const absl::Time give_up = absl::Now() + options.timeout;
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      ncclCommGetAsyncError(comms[i], &state);
      if (state == ncclInProgress && absl::Now() > give_up) {
        for (ncclComm_t comm : comms) ncclCommAbort(comm);
        return absl::UnavailableError(absl::StrCat(
            "nccl: the clique of ", options.world_size, " ranks did not form within ",
            absl::FormatDuration(options.timeout), " (", rendezvous.rendezvous_id(), ")"));
      }
      if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state != ncclSuccess) {
      for (ncclComm_t comm : comms) ncclCommAbort(comm);
      return absl::UnavailableError(
          absl::StrCat("nccl: communicator init failed: ", ncclGetErrorString(state)));
    }
  }
  LOG(INFO) << "nccl clique ready: ranks [" << options.first_rank << ", "
            << options.first_rank + gpus.size() << ") of " << options.world_size;
  return std::unique_ptr<IntraNodeReducer>(
      new NcclReducer(std::move(gpus), std::move(comms), options));
}

}  // namespace tributary::worker

#else  // !TRIBUTARY_WITH_CUDA

#include "absl/strings/str_cat.h"

namespace tributary::worker {

absl::StatusOr<std::unique_ptr<IntraNodeReducer>> MakeNcclReducer(
    engine::ReplicaGroup& replicas, RendezvousClient& rendezvous,
    const NcclGroupOptions& options) {
  return absl::UnavailableError(
      "NCCL reduction needs a GPU build: rebuild with bazel build --config=cuda");
}

}  // namespace tributary::worker

#endif  // TRIBUTARY_WITH_CUDA
