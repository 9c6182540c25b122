#include "services/coordinator/testing/fake_parameter_server.h"

#include "absl/strings/str_cat.h"

namespace tributary::coordinator::testing {

void FakeParameterServer::Install(const std::string& job_id, uint64_t generation,
                                  uint32_t num_nodes, uint64_t resume_step) {
  absl::MutexLock lock(&mu_);
  job_id_ = job_id;
  generation_ = generation;
  num_nodes_ = num_nodes;
  step_ = resume_step;
}

void FakeParameterServer::SetTraffic(uint64_t step, uint64_t bytes_in, uint64_t bytes_out,
                                     double aggregation_wait) {
  absl::MutexLock lock(&mu_);
  step_ = step;
  bytes_in_ = bytes_in;
  bytes_out_ = bytes_out;
  aggregation_wait_ = aggregation_wait;
}

std::vector<v1::BeginGenerationRequest> FakeParameterServer::begun() const {
  absl::MutexLock lock(&mu_);
  return begun_;
}

std::vector<std::string> FakeParameterServer::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

std::string FakeParameterServer::job_id() const {
  absl::MutexLock lock(&mu_);
  return job_id_;
}

uint64_t FakeParameterServer::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

grpc::ServerUnaryReactor* FakeParameterServer::GetShardStatus(
    grpc::CallbackServerContext* context, const v1::GetShardStatusRequest* request,
    v1::ShardStatus* response) {
  {
    absl::MutexLock lock(&mu_);
    response->set_shard_index(shard_index_);
    response->set_job_id(job_id_);
    response->set_generation(generation_);
    response->set_num_nodes(num_nodes_);
    response->set_step(step_);
    response->set_bytes_in(bytes_in_);
    response->set_bytes_out(bytes_out_);
    response->set_aggregation_wait_seconds(aggregation_wait_);
    response->set_checkpoint_age_seconds(-1);
    if (!job_id_.empty()) {
      v1::PartitionStatus* partition = response->add_partitions();
      partition->set_partition_id(shard_index_);
      partition->set_step(step_);
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* FakeParameterServer::BeginGeneration(
    grpc::CallbackServerContext* context, const v1::BeginGenerationRequest* request,
    v1::BeginGenerationResponse* response) {
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (job_id_.empty()) {
      begun_.push_back(*request);  // Told, and refused: the workers install the job.
      status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "shard holds no job");
    } else if (request->job_id() != job_id_) {
      status = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            absl::StrCat("shard holds job '", job_id_, "'"));
    } else if (request->generation() <= generation_ &&
               !(fenced_ && !request->fence() && request->generation() == generation_)) {
      status = grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("generation ", request->generation(), " is not newer than ", generation_));
    } else {
      generation_ = request->generation();
      fenced_ = request->fence();
      num_nodes_ = request->num_nodes();
      if (!request->fence()) step_ = request->resume_step();
      begun_.push_back(*request);
    }
    response->set_step(request->resume_step());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* FakeParameterServer::EndJob(grpc::CallbackServerContext* context,
                                                      const v1::EndJobRequest* request,
                                                      v1::EndJobResponse* response) {
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (request->job_id() != job_id_) {
      status = grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("shard holds no job '", request->job_id(), "'"));
    } else {
      ended_.push_back(request->job_id());
      job_id_.clear();
      generation_ = 0;
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace tributary::coordinator::testing
