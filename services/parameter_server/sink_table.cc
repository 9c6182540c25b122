#include "services/parameter_server/sink_table.h"

#include <set>

namespace tributary::ps {

void SinkTable::Reset(uint32_t num_nodes) {
  absl::MutexLock lock(&mu_);
  sinks_.assign(num_nodes, nullptr);
}

void SinkTable::Register(uint32_t node, NodeSink* sink) {
  if (sink == nullptr) return;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (node < sinks_.size() && sinks_[node] == sink) return;
  }
  absl::MutexLock lock(&mu_);
  if (node < sinks_.size()) sinks_[node] = sink;
}

void SinkTable::Detach(NodeSink* sink) {
  absl::MutexLock lock(&mu_);
  for (NodeSink*& registered : sinks_) {
    if (registered == sink) registered = nullptr;
  }
}

void SinkTable::DeliverTo(NodeSink* sink,
                          const std::shared_ptr<const v1::PartitionValues>& values) {
  if (sink == nullptr) return;
  metrics_.bytes_out.Increment(static_cast<double>(values->data().size()));
  sink->Deliver(values);
}

void SinkTable::DeliverToAll(const std::shared_ptr<const v1::PartitionValues>& values) {
  absl::ReaderMutexLock lock(&mu_);
  for (NodeSink* sink : sinks_) DeliverTo(sink, values);
}

void SinkTable::EndAll(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  std::set<NodeSink*> ended;
  for (NodeSink*& sink : sinks_) {
    if (sink != nullptr && ended.insert(sink).second) sink->End(status);
    sink = nullptr;
  }
}

}  // namespace tributary::ps
