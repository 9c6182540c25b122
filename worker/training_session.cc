#include "worker/training_session.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/batch_split.h"
#include "common/job_spec.h"
#include "common/partition_plan.h"
#include "common/thread_slice.h"
#include "common/wire_dtype.h"
#include "worker/engine/job_model.h"
#include "worker/engine/replica_factory.h"
#include "worker/engine/trainer.h"

namespace tributary::worker {
namespace {

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

std::vector<int64_t> PartitionEnds(const v1::PartitionPlan& plan) {
  std::vector<int64_t> ends;
  for (const v1::Partition& partition : plan.partitions()) {
    ends.push_back(partition.offset() + partition.length());
  }
  return ends;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::Create(
    const v1::Assignment& assignment, const engine::Datasets& data, const SessionOptions& options) {
  const v1::JobSpec& spec = assignment.job();
  absl::StatusOr<engine::ModelDef> model =
      engine::BuildJobModel(spec.model(), options.torchscript_bytes, data.train);
  if (!model.ok()) return model.status();
  for (const std::string& warning : model->fit_warnings) {
    LOG_FIRST_N(WARNING, 4) << "job " << assignment.job_id() << ": " << warning;
  }
  if (assignment.shards_size() == 0) {
    return absl::FailedPreconditionError("the assignment has no PS shards");
  }
  if (assignment.devices_size() != static_cast<int>(assignment.replicas()) ||
      assignment.replicas() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the assignment gives ",
                                                   assignment.devices_size(), " devices for ",
                                                   assignment.replicas(), " replicas"));
  }
  absl::StatusOr<v1::PartitionPlan> plan =
      MakePartitionPlan(model->Layout(), spec.partition_bytes(),
                        static_cast<uint32_t>(assignment.shards_size()), spec.partition_cut());
  if (!plan.ok()) return plan.status();
  const uint64_t total_steps = TotalSteps(spec, data.train.size());
  if (options.initial_parameters != nullptr &&
      options.initial_parameters->size() != model->num_parameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "init_from ", spec.init_from(), " holds ", options.initial_parameters->size(),
        " float32 values (", options.initial_parameters->size() * sizeof(float),
        " bytes) but the model has ", model->num_parameters, " parameters"));
  }

  std::unique_ptr<TrainingSession> session(new TrainingSession(
      assignment, data, options, *std::move(model), *std::move(plan), total_steps));

  session->PlaceInNodeRegion();
  if (absl::Status made = session->MakeReplicas(); !made.ok()) return made;
  if (absl::Status made = session->MakeReducer(); !made.ok()) return made;
  const bool share_region = session->GradientsIntoNodeRegion();

  if (assignment.node_leader()) {
    PsIdentity identity{assignment.job_id(),     assignment.generation(),
                        assignment.node_rank(),  assignment.num_nodes(),
                        assignment.resume_step(), assignment.node_credential()};
    if (options.ps_connection) {
      session->ps_ = options.ps_connection(identity, session->plan_);
    } else {
      session->ps_ = std::make_unique<PsClient>(
          identity, session->plan_,
          std::vector<v1::ShardInfo>(assignment.shards().begin(), assignment.shards().end()),
          options.ps_channel, spec.mode(), spec.wire_dtype(), kDefaultPsRetryBudget,
          options.ps_streams_per_shard, options.ps_transport, options.ps_shared_memory,
          share_region ? session->node_region_ : nullptr);
    }
  }
  if (session->ps_ != nullptr && spec.mode() == v1::SYNC && session->updates_into_parameters_ &&
      assignment.local_world_size() == 1) {
    bool on_host = true;
    for (int i = 0; i < session->replicas_->size(); ++i) {
      on_host &= session->replicas_->replica(i).ReadsHostParameters();
    }
    if (on_host) {
      session->gate_on_landing_ = true;
      {
        absl::MutexLock lock(&session->mu_);
        session->landed_after_.assign(session->plan_.partitions_size(), 0);
      }
      session->ps_->SetLandedListener([s = session.get()](uint32_t partition, uint64_t step) {
        s->UpdateLanded(partition, step);
      });
    }
  }
  // The job's optimizer: its schedule for the learning-rate metric, and in LOCAL_SGD
  // the node leader's inner optimizer on the node's own copy (the PS runs the outer one).
  absl::StatusOr<Optimizer> optimizer = Optimizer::Create(spec.optimizer(), total_steps);
  if (!optimizer.ok()) return optimizer.status();
  session->optimizer_ = *std::move(optimizer);
  if (session->local_sgd_ && assignment.node_leader()) {
    const size_t n = session->model_.num_parameters;
    session->inner_on_replica_ = assignment.local_world_size() == 1 &&
                                 session->replicas_->size() == 1 &&
                                 session->replicas_->replica(0).AppliesInnerUpdate();
    if (!session->inner_on_replica_) {
      session->inner_state_.assign(n * session->optimizer_->state_slots(), 0.0f);
    }
    session->anchor_.resize(n);
    session->local_.resize(n);
  }
  session->comm_thread_ = std::thread([s = session.get()] {
    NameHandoffThread("push");
    s->CommLoop();
  });
  LOG(INFO) << "generation " << assignment.generation() << ": " << assignment.replicas()
            << " replica(s) on " << assignment.devices(0).name() << ", node "
            << assignment.node_rank() << " of " << assignment.num_nodes() << ", local rank "
            << assignment.local_rank() << " of " << assignment.local_world_size() << ", reduction "
            << session->reducer_->name() << ", " << session->plan_.partitions_size()
            << " partition(s) over " << assignment.shards_size() << " shard(s), " << total_steps
            << " steps"
            << (share_region ? "; parameters and gradients in memory shared with local shards"
                             : "");
  return session;
}

void TrainingSession::PlaceInNodeRegion() {
  const v1::JobSpec& spec = assignment_.job();
  const bool local_allowed = options_.ps_transport == PsTransport::kAuto ||
                             options_.ps_transport == PsTransport::kLocal;
  if (!options_.ps_shared_memory || !local_allowed || options_.ps_connection ||
      !assignment_.node_leader() || assignment_.local_world_size() != 1 ||
      assignment_.devices_size() != 1 ||
      (assignment_.devices(0).kind() != v1::CPU && assignment_.devices(0).kind() != v1::GPU) ||
      spec.mode() != v1::SYNC || PartitionDtype(false, spec.wire_dtype()) != v1::FLOAT32 ||
      model_.num_parameters == 0) {
    return;
  }
  // [parameters | gradients], each on pages of its own: a GPU replica page-locks each
  // part by itself (cudaHostRegister works on whole pages, and refuses a page twice).
  const long page = ::sysconf(_SC_PAGESIZE);
  const size_t kPage = page > 0 ? static_cast<size_t>(page) : 4096;
  const size_t bytes = static_cast<size_t>(model_.num_parameters) * sizeof(float);
  const size_t gradients_at = (bytes + kPage - 1) / kPage * kPage;
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(gradients_at + bytes);
  if (!region.ok()) {
    LOG(WARNING) << "parameters stay in this process's memory (no region to share with local "
                    "PS shards): "
                 << region.status().message();
    return;
  }
  node_region_ = std::make_shared<SharedRegion>(*std::move(region));
  float* params = reinterpret_cast<float*>(node_region_->data());
  std::copy(params_.begin(), params_.end(), params);
  params_ = absl::MakeSpan(params, params_.size());
  std::vector<float>().swap(own_params_);
  node_gradients_ = reinterpret_cast<float*>(node_region_->data() + gradients_at);
}

bool TrainingSession::GradientsIntoNodeRegion() {
  if (node_region_ == nullptr || replicas_->size() != 1) return false;
  if (!replicas_->replica(0).UseGradientBuffer(node_gradients_)) {
    LOG(INFO) << "replica on " << replicas_->replica(0).device()
              << " keeps its gradients itself: each lane to a local shard gets slots of its "
                 "own to copy pushes and updates through";
    return false;
  }
  node_region_shared_ = true;
  return true;
}

absl::Status TrainingSession::MakeReplicas() {
  // Replicas: one per assigned device; CPU replicas share the host parameters.
  std::vector<std::unique_ptr<engine::Replica>> replicas;
  bool on_gpu = false;
  for (const v1::Device& device : assignment_.devices()) {
    engine::DeviceSpec spec_of_device;
    on_gpu |= device.kind() == v1::GPU;
    if (device.kind() == v1::GPU) {
      spec_of_device.kind = engine::DeviceSpec::Kind::kGpu;
      spec_of_device.gpu = device.index();
    }
    absl::StatusOr<std::unique_ptr<engine::Replica>> replica =
        options_.make_replica ? options_.make_replica(model_, device, params_.data())
                              : engine::CreateReplica(model_, spec_of_device, params_.data());
    if (!replica.ok()) return replica.status();
    replicas.push_back(*std::move(replica));
  }
  // Buffers (TorchScript models): replica 0 of the node's leading process hands its
  // buffers on through the node's sum; the PS keeps node 0's (DDP's rank 0).
  if (assignment_.local_rank() == 0) replicas[0]->set_buffer_source(true);
  replicas_ = std::make_unique<engine::ReplicaGroup>(std::move(replicas));
  updates_into_parameters_ = true;
  for (int i = 0; i < replicas_->size(); ++i) {
    updates_into_parameters_ &= replicas_->replica(i).DoneWithParametersWhenReady();
  }
  // GPU replicas upload updates straight from page-locked host parameters.
  if (on_gpu && pinned_params_ == nullptr) {
    absl::StatusOr<std::unique_ptr<engine::PinnedHostMemory>> pinned =
        engine::PinHostMemory(params_.data(), params_.size() * sizeof(float));
    if (pinned.ok()) {
      pinned_params_ = *std::move(pinned);
    } else {
      LOG(WARNING) << "host parameters not page-locked, GPU uploads are staged: "
                   << pinned.status().message();
    }
  }
  scratch_.resize(assignment_.replicas());
  {
    absl::MutexLock lock(&mu_);
    final_from_.assign(assignment_.replicas(), model_.num_parameters);
    parameters_wait_seconds_.assign(assignment_.replicas(), 0);
    waiting_threads_.assign(assignment_.replicas(), 0);
    waiting_since_.assign(assignment_.replicas(), absl::InfinitePast());
  }
  // The next step's forward waits, layer by layer, only for the partitions it reads.
  for (int i = 0; i < replicas_->size(); ++i) {
    replicas_->replica(i).set_parameters_needed(
        [this, i](int64_t offset, int64_t length) { WaitForParameters(i, offset, length); });
  }
  return absl::OkStatus();
}

absl::Status TrainingSession::MakeReducer() {
  // The node group's reducer.
  const bool gpus = assignment_.devices(0).kind() == v1::GPU;
  if (assignment_.local_world_size() > 1 || (gpus && assignment_.node_replicas() > 1)) {
    if (options_.coordinator == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node group of ", assignment_.local_world_size(),
          " processes: no coordinator to rendezvous through"));
    }
    rendezvous_ = options_.coordinator->Rendezvous(assignment_.rendezvous_id());
  }
  if (gpus && engine::BuiltWithCuda() &&
      (assignment_.local_world_size() > 1 || assignment_.replicas() > 1)) {
    NcclGroupOptions nccl;
    nccl.first_rank = assignment_.first_replica() - assignment_.node_first_replica();
    nccl.world_size = assignment_.node_replicas();
    nccl.timeout = options_.collective_timeout;
    absl::StatusOr<std::unique_ptr<IntraNodeReducer>> reducer =
        MakeNcclReducer(*replicas_, *rendezvous_, nccl);
    if (!reducer.ok()) return reducer.status();
    reducer_ = *std::move(reducer);
  } else if (assignment_.local_world_size() > 1) {
    GroupOptions gloo;
    gloo.local_rank = assignment_.local_rank();
    gloo.local_world_size = assignment_.local_world_size();
    gloo.bind_host = options_.bind_host;
    gloo.timeout = options_.collective_timeout;
    absl::StatusOr<std::unique_ptr<IntraNodeReducer>> reducer =
        MakeGlooReducer(*replicas_, *rendezvous_, gloo);
    if (!reducer.ok()) return reducer.status();
    reducer_ = *std::move(reducer);
  } else {
    reducer_ = MakeThreadReducer(*replicas_);
  }
  return absl::OkStatus();
}

TrainingSession::TrainingSession(v1::Assignment assignment, const engine::Datasets& data,
                                 SessionOptions options, engine::ModelDef model,
                                 v1::PartitionPlan plan, uint64_t total_steps)
    : assignment_(std::move(assignment)),
      data_(data),
      options_(std::move(options)),
      model_(std::move(model)),
      plan_(std::move(plan)),
      total_steps_(total_steps),
      sampler_(assignment_.job(), data.train.size()),
      own_params_(model_.num_parameters),
      params_(absl::MakeSpan(own_params_)),
      node_grad_(model_.num_parameters),
      local_sgd_(assignment_.job().mode() == v1::LOCAL_SGD),
      gate_(PartitionEnds(plan_)) {
  // Every party generates the same initial parameters from the job's seed (or takes
  // the job's init_from file); the PS keeps whatever it already holds, and Prepare()
  // pulls that.
  if (options_.initial_parameters != nullptr) {
    std::copy(options_.initial_parameters->begin(), options_.initial_parameters->end(),
              params_.begin());
  } else {
    engine::InitParameters(model_, assignment_.job().seed(), params_.data());
  }
}

TrainingSession::~TrainingSession() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  gate_.Close();
  if (ps_ != nullptr) ps_->Interrupt("session closing");
  if (comm_thread_.joinable()) comm_thread_.join();
  if (ps_ != nullptr) ps_->Close();
}

std::vector<std::string> TrainingSession::replica_devices() const {
  std::vector<std::string> devices;
  for (int i = 0; i < replicas_->size(); ++i) devices.push_back(replicas_->replica(i).device());
  return devices;
}

std::vector<uint64_t> TrainingSession::replica_batch_sizes(uint64_t step) {
  std::vector<uint64_t> sizes;
  const uint64_t batch = sampler_.BatchSize(step);
  for (uint32_t i = 0; i < assignment_.replicas(); ++i) {
    sizes.push_back(
        PartsRange(batch, assignment_.total_replicas(), assignment_.first_replica() + i, 1).count);
  }
  return sizes;
}

absl::StatusOr<uint64_t> TrainingSession::Prepare() {
  uint64_t step = assignment_.resume_step();
  if (leader()) {
    absl::StatusOr<uint64_t> installed =
        ps_->InitPartitions(assignment_.job(), total_steps_, params_.data());
    if (!installed.ok()) return installed.status();
    absl::StatusOr<uint64_t> pulled = ps_->PullAll(params_.data());
    if (!pulled.ok()) return pulled.status();
    // SYNC and LOCAL_SGD: every partition stands exactly at the step the generation
    // resumes from. ASYNC / BOUNDED_STALENESS: nodes run on their own clocks
    // (restarted at the resume step), and the values may already hold pushes of nodes
    // that ran ahead.
    const v1::TrainingMode mode = assignment_.job().mode();
    if ((mode == v1::SYNC || mode == v1::LOCAL_SGD) && *pulled != step) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the PS shards stand at step ", *pulled, " but the assignment of generation ",
          assignment_.generation(), " resumes at step ", step));
    }
    if (absl::Status opened = ps_->Open(); !opened.ok()) return opened;
    // LOCAL_SGD: the first round starts from the shards' values (its inner optimizer
    // state starts afresh with every generation).
    if (local_sgd_) anchor_.assign(params_.begin(), params_.end());
  }
  round_start_ = step;
  round_samples_ = 0;
  // The leader's pulled parameters become every replica's of the node group.
  for (const v1::Partition& partition : plan_.partitions()) {
    absl::Status s =
        reducer_->BroadcastParameters(params_.data(), partition.offset(), partition.length());
    if (!s.ok()) return s;
  }
  return step;
}

engine::Batch TrainingSession::GatherReplica(int i, const std::vector<uint64_t>& global) {
  const SampleRange mine =
      PartsRange(global.size(), assignment_.total_replicas(), assignment_.first_replica() + i, 1);
  data_.train.Gather(global.data() + mine.offset, static_cast<int64_t>(mine.count), scratch_[i]);
  return scratch_[i].View();
}

void TrainingSession::CommLoop() {
  while (true) {
    uint64_t step;
    bool apply;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || update_queued_ || comm_pending_;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      // A queued update is always older than pending gradients: step s's update goes
      // out before step s + 1's reduction, in every process of the node group.
      apply = update_queued_;
      if (apply) {
        update_queued_ = false;
        step = update_step_;
      } else {
        comm_pending_ = false;
        step = comm_step_;
        if (absl::Status updated = gate_.status(); !updated.ok()) {
          // The replicas computed on parameters that never arrived: push nothing.
          comm_status_ = updated;
          comm_done_ = true;
          continue;
        }
      }
    }
    if (apply) {
      gate_.Finish(ApplyUpdate());
    } else {
      absl::Status status = ReduceAndPush(step);
      absl::MutexLock lock(&mu_);
      comm_status_ = status;
      comm_done_ = true;
    }
  }
}

void TrainingSession::BeginStepUpdate(uint64_t step) {
  update_.step = step;
  // What the gradient sum is over: the node's samples times the loss's elements per
  // sample (tokens of a [N, T] loss), the count the PS divides the nodes' sum by.
  update_.node_samples =
      PartsRange(sampler_.BatchSize(step), assignment_.total_replicas(),
                 assignment_.node_first_replica(), assignment_.node_replicas())
          .count *
      static_cast<uint64_t>(model_.loss_elements_per_sample);
  update_.sync = EndsSyncRound(assignment_.job(), step, total_steps_);
  update_.push_step = local_sgd_ ? round_start_ : step;
  round_samples_ += update_.node_samples;
}

bool TrainingSession::InnerStepHere(uint64_t step) const {
  return local_sgd_ && leader() && assignment_.local_world_size() == 1 &&
         replicas_->size() == 1 && !EndsSyncRound(assignment_.job(), step, total_steps_);
}

absl::Status TrainingSession::InnerStep(uint64_t step, double* reduce_seconds) {
  BeginStepUpdate(step);
  int first = 0;  // The first partition the loop below steps.
  if (inner_on_replica_ && optimizer_->state_slots() <= 1) {
    // One call (a GPU: one kernel) over the leading run of contiguous parameter
    // partitions: with at most one state slot per element, a range's state lies at its
    // offset whatever the partitions, as in the per-partition calls (a round's end).
    int64_t end = plan_.partitions_size() > 0 ? plan_.partitions(0).offset() : 0;
    const int64_t start = end;
    while (first < plan_.partitions_size() && !plan_.partitions(first).buffers() &&
           plan_.partitions(first).offset() == end) {
      end += plan_.partitions(first).length();
      ++first;
    }
    if (first > 0) {
      if (absl::Status s = ReplicaInnerUpdate(start, end - start); !s.ok()) return s;
    }
  }
  for (int id = first; id < plan_.partitions_size(); ++id) {
    const v1::Partition& partition = plan_.partitions(id);
    if (inner_on_replica_ && !partition.buffers()) {
      if (absl::Status s = ReplicaInnerUpdate(partition.offset(), partition.length()); !s.ok()) {
        return s;
      }
      continue;
    }
    // The replica's own gradient buffer where it has one on the host (a CPU replica,
    // native or TorchScript), else a copy; it stays put until the next backward.
    const absl::Time start = absl::Now();
    absl::StatusOr<const float*> grad = NodeGradient(partition, /*in_place=*/true);
    if (!grad.ok()) return grad.status();
    *reduce_seconds += SecondsSince(start);
    float* params = params_.data() + partition.offset();
    InnerUpdate(partition, *grad, params);
    if (absl::Status s =
            reducer_->BroadcastParameters(params_.data(), partition.offset(), partition.length());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const float*> TrainingSession::NodeGradient(const v1::Partition& partition,
                                                          bool in_place) {
  if (in_place) {
    absl::StatusOr<const float*> where =
        reducer_->ReduceInPlace(partition.offset(), partition.length());
    if (!where.ok() || *where != nullptr) return where;
  }
  float* sum = node_grad_.data() + partition.offset();
  if (absl::Status s = reducer_->ReduceGradients(partition.offset(), partition.length(), sum);
      !s.ok()) {
    return s;
  }
  return sum;
}

absl::Status TrainingSession::ReduceAndPush(uint64_t step) {
  BeginStepUpdate(step);
  const uint32_t round_steps = static_cast<uint32_t>(step + 1 - round_start_);
  // One replica in a node of one process, not LOCAL_SGD (which writes what it pushes
  // into node_grad_): the node's sum is pushed from where it lies (NodeGradient).
  const bool in_place = !local_sgd_ && updates_into_parameters_;
  // The next partition whose gradients to start bringing to where they are pushed from
  // (IntraNodeReducer::PrefetchInPlace: a GPU replica's downloads, started for every
  // partition final so far before the first of them is waited for, so that they run
  // back to back while the earlier ones are pushed).
  int prefetch_next = in_place ? plan_.partitions_size() - 1 : -1;
  // Last partition first: the order backward finishes them, the same in every process
  // of the node group (collectives must match).
  for (int id = plan_.partitions_size() - 1; id >= 0; --id) {
    const v1::Partition& partition = plan_.partitions(id);
    int64_t final_from;  // Gradients [final_from, end) are final on every replica.
    {
      absl::MutexLock lock(&mu_);
      auto final_here = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || comm_abort_ || FinalFromLocked() <= partition.offset();
      };
      mu_.Await(absl::Condition(&final_here));
      if (stopping_) return absl::CancelledError("session closing");
      if (comm_abort_) return absl::AbortedError("the replicas failed: nothing pushed");
      final_from = FinalFromLocked();
    }
    for (; prefetch_next >= 0 && plan_.partitions(prefetch_next).offset() >= final_from;
         --prefetch_next) {
      const v1::Partition& ahead = plan_.partitions(prefetch_next);
      if (absl::Status s = reducer_->PrefetchInPlace(ahead.offset(), ahead.length()); !s.ok()) {
        return s;
      }
    }
    float* grad = node_grad_.data() + partition.offset();
    const float* sum = grad;  // What a push sends: the node's sum, wherever it lies.
    // LOCAL_SGD with the inner step on the replica: the gradient stays there, and only
    // a round's end brings the node's values to the host (below).
    const bool on_replica = inner_on_replica_ && !partition.buffers();
    if (!on_replica) {
      const absl::Time start = absl::Now();
      // One replica in a node of one process, not LOCAL_SGD (which writes what it
      // pushes into node_grad_): the node's sum is pushed from where it lies, a native
      // CPU replica's own gradient buffer or a GPU replica's pinned staging. It stays
      // unchanged until the update is in (the PsConnection::Push contract): the
      // replica writes it again only for the next backward (a GPU replica: the next
      // step's download, after this step's update), which starts after the next forward
      // read every parameter, so after every partition's update passed the gate.
      absl::StatusOr<const float*> reduced = NodeGradient(partition, in_place);
      {
        absl::MutexLock lock(&mu_);
        reduce_seconds_ += SecondsSince(start);
      }
      if (!reduced.ok()) return reduced.status();
      sum = *reduced;
    }
    if (!leader() || !update_.sync) continue;
    if (!local_sgd_) {
      // The update comes back into the parameters (ApplyPartition waits for it there):
      // nothing reads or writes this partition's values before, since every replica
      // is done with them (Replica::DoneWithParametersWhenReady) and the next forward
      // waits at the gate.
      if (updates_into_parameters_) {
        ps_->ExpectUpdateInto(partition.id(), step, params_.data() + partition.offset());
      }
      const absl::Time push_start = absl::Now();
      absl::Status pushed = ps_->Push(step, partition.id(), sum,
                                      update_.node_samples, /*steps=*/1);
      CountPush(push_start);
      if (!pushed.ok()) return pushed;
      continue;
    }
    // The round's end: the node's values after this step, and what it pushes, its
    // change since the round began times the round's samples (the PS divides the
    // nodes' sum by their samples: a mean weighted by samples). Buffers travel as
    // values, as in SYNC.
    uint64_t samples = round_samples_;
    if (!partition.buffers()) {
      float* local = local_.data() + partition.offset();
      if (absl::Status s = RoundEndValues(partition, grad, local); !s.ok()) return s;
      const float* anchor = anchor_.data() + partition.offset();
      const float scale = static_cast<float>(round_samples_);
      for (int64_t i = 0; i < partition.length(); ++i) grad[i] = (anchor[i] - local[i]) * scale;
    } else {
      samples = update_.node_samples;
    }
    const absl::Time push_start = absl::Now();
    absl::Status pushed = ps_->Push(round_start_, partition.id(), grad, samples, round_steps);
    CountPush(push_start);
    if (!pushed.ok()) return pushed;
  }
  if (update_.sync) {
    round_start_ = step + 1;
    round_samples_ = 0;
  }
  return absl::OkStatus();
}

int64_t TrainingSession::FinalFromLocked() const {
  int64_t slowest = 0;
  for (int64_t from : final_from_) slowest = std::max(slowest, from);
  return slowest;
}

void TrainingSession::CountPush(absl::Time start) {
  const double seconds = SecondsSince(start);
  absl::MutexLock lock(&mu_);
  push_seconds_ += seconds;
}

absl::Status TrainingSession::RoundEndValues(const v1::Partition& partition, const float* grad,
                                             float* local) {
  if (!inner_on_replica_) {
    InnerUpdate(partition, grad, local);
    return absl::OkStatus();
  }
  if (absl::Status s = ReplicaInnerUpdate(partition.offset(), partition.length()); !s.ok()) {
    return s;
  }
  return replicas_->replica(0).CopyParameters(partition.offset(), partition.length(), local);
}

absl::Status TrainingSession::ReplicaInnerUpdate(int64_t offset, int64_t length) {
  if (update_.node_samples == 0) return absl::OkStatus();  // No samples: nothing to apply.
  return replicas_->replica(0).InnerUpdate(optimizer_->Coefficients(update_.step),
                                           optimizer_->state_slots(), offset, length,
                                           static_cast<float>(update_.node_samples));
}

void TrainingSession::InnerUpdate(const v1::Partition& partition, const float* grad, float* out) {
  const int64_t offset = partition.offset();
  const float* in = params_.data() + offset;
  const size_t n = static_cast<size_t>(partition.length());
  if (partition.buffers()) {
    std::memcpy(out, grad, n * sizeof(float));  // The buffers' new values, not gradients.
    return;
  }
  if (update_.node_samples == 0) {  // No samples here this step: nothing to apply.
    if (out != in) std::memcpy(out, in, n * sizeof(float));
    return;
  }
  // Each partition's state is one block (slots x length floats at slots x offset), laid
  // out slot by slot as the PS keeps it per partition.
  float* state = inner_state_.data() + offset * optimizer_->state_slots();
  optimizer_->ApplyMean(update_.step, in, out, grad, static_cast<float>(update_.node_samples), state,
                    n);
}

absl::Status TrainingSession::ApplyPartition(const v1::Partition& partition, double* waited) {
  float* params = params_.data() + partition.offset();
  if (leader() && update_.sync) {
    const absl::Time start = absl::Now();
    // Woken by the update, a refusal, or Interrupt (a new generation, a stop). The
    // values are written into the parameters here, after the step's backward.
    absl::Status status = ps_->WaitUpdated(partition.id(), update_.push_step,
                                           options_.update_timeout, params);
    if (absl::IsDeadlineExceeded(status)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "step ", update_.step, ": partition ", partition.id(), " got no update from shard ",
          partition.shard(), " within ", absl::FormatDuration(options_.update_timeout)));
    }
    if (absl::IsAborted(status)) {
      return absl::AbortedError(
          absl::StrCat("update of step ", update_.step, " interrupted: ", status.message()));
    }
    if (!status.ok()) return status;
    *waited += SecondsSince(start);
    if (local_sgd_) {
      // The round's new values; a replica that keeps its own parameters gets them
      // through BroadcastParameters below (SetParameters).
      std::memcpy(anchor_.data() + partition.offset(), params,
                  partition.length() * sizeof(float));
    }
  } else if (inner_on_replica_ && !partition.buffers()) {
    // LOCAL_SGD inside a round, on the replica: nothing to copy or broadcast.
    return ReplicaInnerUpdate(partition.offset(), partition.length());
  } else if (leader()) {
    // LOCAL_SGD inside a round: the node's own step.
    InnerUpdate(partition, node_grad_.data() + partition.offset(), params);
  }
  return reducer_->BroadcastParameters(params_.data(), partition.offset(), partition.length());
}

absl::Status TrainingSession::ApplyUpdate() {
  // Last partition first: the order the gradients were pushed, so the order the shards
  // answer in, and the order the next forward reads the first layer's row pieces in
  // (CpuExecutor). The later layers' updates are in long before the forward gets there.
  for (int id = plan_.partitions_size() - 1; id >= 0; --id) {
    const v1::Partition& partition = plan_.partitions(id);
    double waited = 0;
    absl::Status applied = ApplyPartition(partition, &waited);
    {
      absl::MutexLock lock(&mu_);
      update_wait_seconds_ += waited;
    }
    if (!applied.ok()) return applied;
    gate_.Applied(id);
  }
  return absl::OkStatus();
}

void TrainingSession::WaitForParameters(int replica, int64_t offset, int64_t length) {
  const int64_t end = offset + length;
  if (gate_.Ready(offset, end)) return;
  uint64_t step;
  {
    // The replica's wall time with at least one of its threads waiting: the native
    // engine's product threads may wait for two row pieces at once.
    absl::MutexLock lock(&mu_);
    step = running_step_;
    if (waiting_threads_[replica]++ == 0) waiting_since_[replica] = absl::Now();
  }
  if (options_.on_parameters_wait) options_.on_parameters_wait(step, offset, length);
  // A failed update releases the forward too: it computes on stale values, and the
  // step reports the update's error instead of pushing anything.
  gate_.WaitFor(offset, end);
  absl::MutexLock lock(&mu_);
  if (--waiting_threads_[replica] == 0) {
    parameters_wait_seconds_[replica] += SecondsSince(waiting_since_[replica]);
  }
}

void TrainingSession::UpdateLanded(uint32_t partition, uint64_t step) {
  absl::MutexLock lock(&mu_);
  if (partition >= landed_after_.size()) return;
  landed_after_[partition] = step + 1;
  // The replicas read params_ themselves: the forward may read the partition now, once
  // the gate waits for this step's update (RunStep sets update_step_ as it begins it;
  // before the first step it is 0 and the gate open, which Begin resets). The
  // communication thread still takes the update (ApplyUpdate), and opens nothing new.
  if (update_step_ == step) gate_.Applied(static_cast<int>(partition));
}

absl::StatusOr<StepStats> TrainingSession::RunStep(uint64_t step) {
  StepStats stats;
  stats.step = step;
  const absl::Time start = absl::Now();
  const std::vector<uint64_t> global = sampler_.GlobalBatch(step);
  std::vector<engine::Batch> batches(replicas_->size());
  for (int i = 0; i < replicas_->size(); ++i) batches[i] = GatherReplica(i, global);
  // LOCAL_SGD inside a round on a node of one process and one replica: nothing to reduce
  // or push, so this thread takes the inner step itself (InnerStepHere).
  const bool inner_here = InnerStepHere(step);
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status updated = gate_.status(); !updated.ok()) return updated;
    final_from_.assign(replicas_->size(), model_.num_parameters);
    parameters_wait_seconds_.assign(replicas_->size(), 0);
    first_gradient_.assign(replicas_->size(), absl::InfiniteFuture());
    running_step_ = step;
    comm_step_ = step;
    comm_pending_ = !inner_here;
    comm_done_ = false;
    comm_abort_ = false;
    reduce_seconds_ = 0;
    push_seconds_ = 0;
  }
  std::vector<engine::LossStats> losses(replicas_->size());
  stats.replica_seconds.assign(replicas_->size(), 0);
  const engine::DropoutKey key{assignment_.job().seed(), step};
  std::vector<absl::Time> start_of_replica(replicas_->size(), start);
  absl::Status computed = replicas_->RunOnAll([&](int i) -> absl::Status {
    const absl::Time replica_start = absl::Now();
    start_of_replica[i] = replica_start;
    absl::StatusOr<engine::LossStats> loss = replicas_->replica(i).ForwardBackward(
        batches[i], key, [this, i](int, int64_t offset, int64_t) {
          const absl::Time now = absl::Now();
          absl::MutexLock lock(&mu_);
          final_from_[i] = std::min(final_from_[i], offset);
          first_gradient_[i] = std::min(first_gradient_[i], now);
        });
    if (!loss.ok()) return loss.status();
    losses[i] = *loss;
    stats.replica_seconds[i] = SecondsSince(replica_start);
    return absl::OkStatus();
  });
  {
    // Everything is final once every replica returned (an empty slice reports nothing);
    // after a failure nothing may be pushed.
    absl::MutexLock lock(&mu_);
    std::fill(final_from_.begin(), final_from_.end(), 0);
    if (!computed.ok()) comm_abort_ = true;
  }
  stats.compute_seconds = SecondsSince(start);
  for (const engine::LossStats& loss : losses) stats.loss += loss;
  if (inner_here) return FinishInnerStep(step, computed, start, start_of_replica, stats);
  absl::Status communicated;
  absl::Status updated;
  {
    // The comm thread finished the previous update before it took these gradients.
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&comm_done_));
    communicated = comm_status_;
    updated = gate_.status();
    TakeStepTimesLocked(start_of_replica, stats);
  }
  TakeCopySeconds(stats);
  // The previous step's update is the root cause when it failed: this step ran on
  // parameters that never arrived, and pushed nothing.
  if (!updated.ok()) return updated;
  if (!computed.ok()) return computed;
  if (!communicated.ok()) return communicated;

  {
    absl::MutexLock lock(&mu_);
    update_step_ = step;
    update_queued_ = true;
    update_wait_seconds_ = 0;
    gate_.Begin();
    if (gate_on_landing_) {
      // What landed while the pushes went out is in already (SYNC: the push named
      // this step).
      for (size_t id = 0; id < landed_after_.size(); ++id) {
        if (landed_after_[id] == step + 1) gate_.Applied(static_cast<int>(id));
      }
    }
  }
  if (!options_.overlap_updates) {
    if (absl::Status updated = FinishUpdate(); !updated.ok()) return updated;
  }
  stats.step_seconds = SecondsSince(start);
  return stats;
}

absl::StatusOr<StepStats> TrainingSession::FinishInnerStep(
    uint64_t step, const absl::Status& computed, absl::Time start,
    const std::vector<absl::Time>& start_of_replica, StepStats& stats) {
  // The previous step's update (a round's end: the communication thread's) is over:
  // every partition passed the gate for this step's forward, and the thread is done
  // with update_ once the gate says so.
  absl::Status updated = gate_.WaitDone();
  {
    absl::MutexLock lock(&mu_);
    TakeStepTimesLocked(start_of_replica, stats);
    update_wait_seconds_ = 0;  // Counted: no update of this step will add to it.
  }
  TakeCopySeconds(stats);
  if (!updated.ok()) return updated;
  if (!computed.ok()) return computed;
  if (absl::Status inner = InnerStep(step, &stats.reduce_seconds); !inner.ok()) {
    // The parameters may be half stepped: the session cannot train on (the gate keeps
    // the error for every later step and FinishUpdate).
    gate_.Begin();
    gate_.Finish(inner);
    return inner;
  }
  stats.step_seconds = SecondsSince(start);
  return stats;
}

void TrainingSession::TakeStepTimesLocked(const std::vector<absl::Time>& started,
                                          StepStats& stats) {
  stats.reduce_seconds += reduce_seconds_;
  stats.push_seconds = push_seconds_;
  stats.push_wait_seconds = update_wait_seconds_;
  for (double waited : parameters_wait_seconds_) {
    stats.parameters_wait_seconds = std::max(stats.parameters_wait_seconds, waited);
  }
  SplitComputeLocked(started, stats);
}

void TrainingSession::TakeCopySeconds(StepStats& stats) {
  // Summed: the communication thread copies replica after replica.
  for (int i = 0; i < replicas_->size(); ++i) {
    stats.copy_seconds += replicas_->replica(i).TakeCopySeconds();
  }
}

void TrainingSession::SplitComputeLocked(const std::vector<absl::Time>& started,
                                         StepStats& stats) {
  // The slowest replica's split (the one the step waited for).
  int slowest = -1;
  for (int i = 0; i < static_cast<int>(stats.replica_seconds.size()); ++i) {
    if (slowest < 0 || stats.replica_seconds[i] > stats.replica_seconds[slowest]) slowest = i;
  }
  if (slowest < 0 || first_gradient_[slowest] == absl::InfiniteFuture()) return;  // No samples.
  const double until_first = absl::ToDoubleSeconds(first_gradient_[slowest] - started[slowest]);
  stats.forward_seconds = std::max(0.0, until_first - parameters_wait_seconds_[slowest]);
  stats.backward_seconds = std::max(0.0, stats.replica_seconds[slowest] - until_first);
}

absl::Status TrainingSession::FinishUpdate() { return gate_.WaitDone(); }

float TrainingSession::LearningRate(uint64_t step) const { return optimizer_->LearningRate(step); }

void TrainingSession::Interrupt(const std::string& reason) {
  if (ps_ != nullptr) ps_->Interrupt(reason);
}

absl::StatusOr<engine::LossStats> TrainingSession::Evaluate(uint64_t max_samples) {
  if (absl::Status updated = FinishUpdate(); !updated.ok()) return updated;
  if (data_.test.size() == 0) {
    return absl::FailedPreconditionError("the dataset has no test split");
  }
  return replicas_->Evaluate(data_.test, options_.eval_batch_size, max_samples);
}

}  // namespace tributary::worker
