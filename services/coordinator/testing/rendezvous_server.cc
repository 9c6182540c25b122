#include "services/coordinator/testing/rendezvous_server.h"

#include <vector>

#include "absl/time/clock.h"

namespace tributary::coordinator::testing {

// Rendezvous RPCs to the store; the rest are not this double's.
class RendezvousServer::Handler : public CoordinatorHandler {
 public:
  explicit Handler(RendezvousStore* store) : store_(store) {}

  void HandlePublishRendezvous(const v1::PublishRendezvousRequest& request,
                               v1::PublishRendezvousResponse* reply, ReplyCallback done) override {
    done(store_->Publish(request.rendezvous_id(), request.key(), request.value()));
  }
  uint64_t HandleWaitRendezvous(const v1::WaitRendezvousRequest& request,
                                v1::WaitRendezvousResponse* reply, ReplyCallback done) override {
    std::vector<std::string> keys(request.keys().begin(), request.keys().end());
    return store_->Wait(
        request.rendezvous_id(), keys, absl::Milliseconds(request.timeout_ms()),
        [reply, done = std::move(done)](absl::Status status, std::vector<std::string> values) {
          for (std::string& value : values) reply->add_values(std::move(value));
          done(status);
        });
  }
  bool CancelWaitRendezvous(uint64_t wait_id) override { return store_->Cancel(wait_id); }

  void HandleRegisterWorker(const v1::RegisterWorkerRequest&, v1::RegisterWorkerResponse*,
                            ReplyCallback done) override {
    done(NotServed());
  }
  void HandleHeartbeat(const v1::HeartbeatRequest&, v1::HeartbeatResponse*,
                       ReplyCallback done) override {
    done(NotServed());
  }
  void HandleDeregister(const v1::DeregisterRequest&, v1::DeregisterResponse*,
                        ReplyCallback done) override {
    done(NotServed());
  }
  void HandleRegisterParameterServer(const v1::RegisterParameterServerRequest&,
                                     v1::RegisterParameterServerResponse*,
                                     ReplyCallback done) override {
    done(NotServed());
  }
  void HandleSubmitJob(const v1::SubmitJobRequest&, v1::Job*, ReplyCallback done) override {
    done(NotServed());
  }
  void HandleGetJob(const v1::GetJobRequest&, v1::Job*, ReplyCallback done) override {
    done(NotServed());
  }
  void HandleGetJobHistory(const v1::GetJobHistoryRequest&, v1::JobHistory*,
                           ReplyCallback done) override {
    done(NotServed());
  }
  void HandleListJobs(const v1::ListJobsRequest&, v1::ListJobsResponse*,
                      ReplyCallback done) override {
    done(NotServed());
  }
  void HandlePauseJob(const v1::JobControlRequest&, v1::Job*, ReplyCallback done) override {
    done(NotServed());
  }
  void HandleResumeJob(const v1::JobControlRequest&, v1::Job*, ReplyCallback done) override {
    done(NotServed());
  }
  void HandleStopJob(const v1::JobControlRequest&, v1::Job*, ReplyCallback done) override {
    done(NotServed());
  }
  void HandleListWorkers(const v1::ListWorkersRequest&, v1::ListWorkersResponse*,
                         ReplyCallback done) override {
    done(NotServed());
  }
  void HandleGetClusterStatus(const v1::GetClusterStatusRequest&, v1::ClusterStatus*,
                              ReplyCallback done) override {
    done(NotServed());
  }

 private:
  static absl::Status NotServed() {
    return absl::UnimplementedError("this test server serves only the rendezvous KV");
  }

  RendezvousStore* store_;
};

RendezvousServer::RendezvousServer()
    : store_(&clock_, RendezvousLimits()), handler_(std::make_unique<Handler>(&store_)) {
  service_ = std::make_unique<CoordinatorGrpcService>(handler_.get(), std::nullopt);
  ServerOptions options;
  options.name = "rendezvous";
  options.listen_address = "127.0.0.1:0";
  options.http_host = "127.0.0.1";
  options.http_port = -1;
  options.drain_grace = absl::ZeroDuration();
  host_ = std::make_unique<ServiceHost>(options);
  host_->AddService(service_.get(), v1::Coordinator::service_full_name());
  started_ = host_->Start();
  if (started_.ok()) host_->SetServing(true);
  // Wait deadlines expire on this thread, as on the coordinator's timer thread.
  timer_ = std::thread([this] {
    while (!stopping_) {
      store_.ExpireDeadlines();
      store_.SleepUntilDeadlineOrChange(
          store_.NextDeadline().value_or(absl::Now() + absl::Seconds(1)));
    }
  });
}

RendezvousServer::~RendezvousServer() {
  host_->Shutdown(absl::Seconds(1));
  stopping_ = true;
  store_.Wake();
  timer_.join();
}

}  // namespace tributary::coordinator::testing
