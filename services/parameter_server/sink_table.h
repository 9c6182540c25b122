// Where a shard's new values go: each node's latest PushPull stream (its NodeSink) in
// the current generation. The aggregators deliver through it; every byte delivered is
// counted as bytes out.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_SINK_TABLE_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_SINK_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/parameter_server.pb.h"
#include "services/parameter_server/shard_metrics.h"

namespace tributary::ps {

// Where one node's parameter updates go: its PushPull stream. The shard calls these
// with its locks held, so implementations must only queue work and return.
class NodeSink {
 public:
  virtual ~NodeSink() = default;
  // New values of a partition for this node.
  virtual void Deliver(std::shared_ptr<const v1::PartitionValues> values) = 0;
  // A push of this sink that Push() answered kHeld may be pushed again now.
  virtual void Retry(uint32_t partition_id) = 0;
  // The shard is done with this sink (a new generation began, the job ended): the
  // stream should end with `status`. No further calls follow for this generation.
  virtual void End(const absl::Status& status) = 0;
};

class SinkTable {
 public:
  explicit SinkTable(ShardMetrics& metrics) : metrics_(metrics) {}

  // A new generation (or job) of `num_nodes` nodes: no sinks yet.
  void Reset(uint32_t num_nodes);
  // `sink` (may be null: ignored) becomes node's sink; the latest stream of a node wins.
  void Register(uint32_t node, NodeSink* sink);
  // Forgets `sink` (its stream ended).
  void Detach(NodeSink* sink);
  // Values to one sink (null: nobody), or to every node's.
  void DeliverTo(NodeSink* sink, const std::shared_ptr<const v1::PartitionValues>& values);
  void DeliverToAll(const std::shared_ptr<const v1::PartitionValues>& values);
  // Ends every sink once with `status` and forgets them all.
  void EndAll(const absl::Status& status);

 private:
  ShardMetrics& metrics_;
  absl::Mutex mu_;
  std::vector<NodeSink*> sinks_ ABSL_GUARDED_BY(mu_);  // By node rank.
};

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_SINK_TABLE_H_
