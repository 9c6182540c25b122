// The cut of a model's flat parameter buffer into partitions and their placement
// on PS shards. A pure function of (layout, partition_bytes, num_shards): workers
// and PS shards compute or check the same plan and compare it by fingerprint.
#ifndef TRIBUTARY_COMMON_PARTITION_PLAN_H_
#define TRIBUTARY_COMMON_PARTITION_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tensor.pb.h"

namespace tributary {

// OK, or INVALID_ARGUMENT naming the first tensor that breaks the layout rules:
// non-empty unique names, lengths > 0 equal to the product of the shape, offsets
// contiguous from 0 in buffer order, total_elements equal to the sum, buffers (if
// any) after every trained tensor and never first.
absl::Status ValidateParameterLayout(const v1::ParameterLayout& layout);

// CUT_LAYERS groups small tensors into partitions of up to this many elements
// (128 KiB), or partition_bytes / 4 when that is less.
inline constexpr int64_t kGroupElements = 32768;

// Cuts the flat buffer into contiguous partitions:
//  - CUT_EVEN (the default): N partitions of nearly equal length (lengths differ by at
//    most one element; a partition may cut a tensor), N the fewest of at most
//    partition_bytes each;
//  - CUT_LAYERS: partitions that follow the layers, so that a step's first gradients
//    can be pushed while backward goes on and the next forward can start on the first
//    updates that come back. Every trained tensor is a unit, a large one (row_pieces.h:
//    a [rows, ...] tensor of at least two pieces of kMinPieceElements) one unit per row
//    piece, the engine's own pieces; a unit longer than partition_bytes / 4 elements is
//    cut into the fewest nearly equal parts that fit; units are grouped in buffer
//    order: a partition takes the next unit while it stays within kGroupElements (or
//    partition_bytes / 4), else the unit starts the next one.
// Either way, if that gives fewer partitions than num_shards (and the model has that
// many elements), the parameters are cut into num_shards nearly equal partitions, so
// that every shard holds something. Partitions are placed in buffer order on the shard
// with the fewest bytes so far (ties: lowest index). The buffer region of a layout (its
// TensorView.buffer tensors, at the end) is cut into the fewest nearly equal buffer
// partitions that fit, after the parameter partitions. The fingerprint covers the plan
// and the layout's names, shapes, offsets and buffer flags (not the cut's name: two
// cuts that give the same partitions give the same plan). INVALID_ARGUMENT for a bad
// layout, partition_bytes not a positive multiple of 4, num_shards == 0, an unknown
// cut, or CUT_AUTO (the coordinator resolves it before anyone plans).
absl::StatusOr<v1::PartitionPlan> MakePartitionPlan(const v1::ParameterLayout& layout,
                                                    int64_t partition_bytes, uint32_t num_shards,
                                                    v1::PartitionCut cut = v1::CUT_EVEN);

// Structural check of a plan received from elsewhere (the fingerprint cannot be
// recomputed without the layout): ids 0..N-1 in order, contiguous ranges covering
// total_elements, lengths within partition_bytes, shards < num_shards, a non-empty
// fingerprint. INVALID_ARGUMENT naming the first bad partition or field.
absl::Status ValidatePartitionPlan(const v1::PartitionPlan& plan);

// The most parameter partitions MakePartitionPlan cuts `trained` elements into, with
// either cut: a bound for plans received from elsewhere (a PS shard checks it before
// it allocates).
// 0 for partition_bytes < 4.
uint64_t MostParameterPartitions(uint64_t trained, int64_t partition_bytes, uint32_t num_shards);

// Ids of the partitions owned by `shard`, ascending.
std::vector<uint32_t> PartitionsOfShard(const v1::PartitionPlan& plan, uint32_t shard);

// Bytes (FLOAT32) owned by `shard`.
int64_t BytesOfShard(const v1::PartitionPlan& plan, uint32_t shard);

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_PARTITION_PLAN_H_
