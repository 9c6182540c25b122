#include "common/partition_plan.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/row_pieces.h"

namespace tributary {
namespace {

// FNV-1a over a canonical encoding of the plan (fixed-width little-endian integers,
// length-prefixed strings), so the digest does not depend on protobuf's
// serialization or on the platform. Two 64-bit lanes with different offset bases
// give a 128-bit digest; collisions are not a concern between honest parties.
class PlanHasher {
 public:
  void Bytes(const void* data, size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
      low_ = (low_ ^ bytes[i]) * kPrime;
      high_ = (high_ ^ bytes[i]) * kPrime;
    }
  }
  void Integer(uint64_t value) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
    Bytes(bytes, sizeof(bytes));
  }
  void String(const std::string& value) {
    Integer(value.size());
    Bytes(value.data(), value.size());
  }
  std::string Hex() const { return absl::StrFormat("%016x%016x", high_, low_); }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t low_ = 0xcbf29ce484222325ULL;
  uint64_t high_ = 0x84222325cbf29ce4ULL;
};

std::string Fingerprint(const v1::ParameterLayout& layout, const v1::PartitionPlan& plan) {
  PlanHasher hasher;
  hasher.String("tributary.partition_plan.v1");
  hasher.Integer(plan.num_shards());
  hasher.Integer(static_cast<uint64_t>(plan.partition_bytes()));
  hasher.Integer(static_cast<uint64_t>(plan.total_elements()));
  hasher.Integer(static_cast<uint64_t>(plan.partitions_size()));
  for (const v1::Partition& partition : plan.partitions()) {
    hasher.Integer(partition.id());
    hasher.Integer(static_cast<uint64_t>(partition.offset()));
    hasher.Integer(static_cast<uint64_t>(partition.length()));
    hasher.Integer(partition.shard());
    // Only layouts with buffers mark them, so plans without buffers keep the
    // fingerprints they always had (and their checkpoints stay valid).
    if (partition.buffers()) hasher.String("buffers");
  }
  hasher.Integer(static_cast<uint64_t>(layout.tensors_size()));
  for (const v1::TensorView& tensor : layout.tensors()) {
    hasher.String(tensor.name());
    hasher.Integer(static_cast<uint64_t>(tensor.shape_size()));
    for (int64_t dim : tensor.shape()) hasher.Integer(static_cast<uint64_t>(dim));
    hasher.Integer(static_cast<uint64_t>(tensor.offset()));
    hasher.Integer(static_cast<uint64_t>(tensor.length()));
    if (tensor.buffer()) hasher.String("buffer");
  }
  return hasher.Hex();
}

std::string ShapeText(const v1::TensorView& tensor) {
  std::string text = "[";
  for (int i = 0; i < tensor.shape_size(); ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ",", tensor.shape(i));
  }
  return text + "]";
}


// `elements` cut into `parts` nearly equal lengths (the first elements % parts one longer).
std::vector<int64_t> EvenCut(int64_t elements, int64_t parts) {
  std::vector<int64_t> lengths;
  lengths.reserve(static_cast<size_t>(parts));
  const int64_t base = elements / parts;
  const int64_t longer = elements % parts;
  for (int64_t i = 0; i < parts; ++i) lengths.push_back(base + (i < longer ? 1 : 0));
  return lengths;
}

// The layer-following cut of the trained region [0, trained) (MakePartitionPlan).
std::vector<int64_t> LayerFollowingCut(const v1::ParameterLayout& layout, int64_t trained,
                                       int64_t max_elements) {
  const int64_t group = std::min(max_elements, kGroupElements);
  std::vector<int64_t> lengths;
  int64_t current = 0;  // Elements of the partition being grouped.
  auto add_unit = [&](int64_t unit) {
    if (current > 0 && current + unit > group) {
      lengths.push_back(current);
      current = 0;
    }
    current += unit;
  };
  for (const v1::TensorView& tensor : layout.tensors()) {
    if (tensor.offset() >= trained) break;
    const int64_t rows = tensor.shape_size() > 0 ? tensor.shape(0) : 1;
    const int64_t pieces = RowPieceCount(rows, tensor.length() / rows);
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t piece = RowPiece(rows, pieces, p).count * (tensor.length() / rows);
      const int64_t parts = (piece + max_elements - 1) / max_elements;
      for (const int64_t unit : EvenCut(piece, parts)) add_unit(unit);
    }
  }
  if (current > 0) lengths.push_back(current);
  return lengths;
}
}  // namespace

absl::Status ValidateParameterLayout(const v1::ParameterLayout& layout) {
  if (layout.tensors_size() == 0) {
    return absl::InvalidArgumentError("parameter layout: no tensors");
  }
  std::set<std::string> names;
  int64_t next_offset = 0;
  bool in_buffers = false;
  for (int i = 0; i < layout.tensors_size(); ++i) {
    const v1::TensorView& tensor = layout.tensors(i);
    const std::string what =
        absl::StrCat("parameter layout: tensor ", i, " '", tensor.name(), "'");
    if (tensor.name().empty()) return absl::InvalidArgumentError(what + ": empty name");
    if (i == 0 && tensor.buffer()) {
      return absl::InvalidArgumentError(what + ": a layout must start with a trained tensor");
    }
    if (in_buffers && !tensor.buffer()) {
      return absl::InvalidArgumentError(what + ": trained tensors must come before buffers");
    }
    in_buffers = tensor.buffer();
    if (!names.insert(tensor.name()).second) {
      return absl::InvalidArgumentError(what + ": name used twice");
    }
    if (tensor.length() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": length must be > 0, got ", tensor.length()));
    }
    int64_t product = 1;
    for (int64_t dim : tensor.shape()) {
      if (dim <= 0 || dim > tensor.length() / product) {  // Also guards the multiply.
        product = -1;
        break;
      }
      product *= dim;
    }
    if (product != tensor.length()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeText(tensor),
                                                     " does not hold length ", tensor.length()));
    }
    if (tensor.offset() != next_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": offset must be ", next_offset, " (right after the previous tensor), got ",
          tensor.offset()));
    }
    next_offset += tensor.length();
  }
  if (layout.total_elements() != next_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter layout: total_elements must be the sum of the lengths (",
                     next_offset, "), got ", layout.total_elements()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::PartitionPlan> MakePartitionPlan(const v1::ParameterLayout& layout,
                                                    int64_t partition_bytes, uint32_t num_shards,
                                                    v1::PartitionCut cut) {
  if (absl::Status valid = ValidateParameterLayout(layout); !valid.ok()) return valid;
  if (partition_bytes < 4 || partition_bytes % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition_bytes must be a positive multiple of 4, got ", partition_bytes));
  }
  if (num_shards == 0) return absl::InvalidArgumentError("num_shards must be > 0, got 0");
  // Specs stored before the cut existed name none: theirs was the even one.
  if (cut == v1::PARTITION_CUT_UNSPECIFIED) cut = v1::CUT_EVEN;
  if (cut == v1::CUT_AUTO) {
    return absl::InvalidArgumentError(
        "partition cut CUT_AUTO is not a cut yet: the coordinator chooses CUT_EVEN or "
        "CUT_LAYERS when the job's first generation forms (GetJob shows it then)");
  }
  if (cut != v1::CUT_EVEN && cut != v1::CUT_LAYERS) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition cut must be CUT_EVEN or CUT_LAYERS, got ", static_cast<int>(cut)));
  }

  const int64_t total = layout.total_elements();
  int64_t trained = total;  // Elements before the first buffer.
  for (const v1::TensorView& tensor : layout.tensors()) {
    if (tensor.buffer()) {
      trained = tensor.offset();
      break;
    }
  }
  const int64_t max_elements = partition_bytes / 4;
  // Parameters: the even cut, or the layer-following one (the units: every tensor,
  // large ones in their row pieces, longer units in nearly equal parts of at most
  // max_elements; grouped); when that gives a shard nothing, an even cut into one
  // partition per shard.
  std::vector<int64_t> lengths =
      cut == v1::CUT_LAYERS ? LayerFollowingCut(layout, trained, max_elements)
                            : EvenCut(trained, (trained + max_elements - 1) / max_elements);
  const int64_t at_least = std::min<int64_t>(num_shards, trained);
  if (static_cast<int64_t>(lengths.size()) < at_least) lengths = EvenCut(trained, at_least);
  // Buffers: the fewest partitions that fit, never mixed with parameters.
  const int64_t buffer_count = (total - trained + max_elements - 1) / max_elements;
  // More partitions than ids can name cannot be pushed; refuse rather than wrap.
  const int64_t count = static_cast<int64_t>(lengths.size());
  if (count + buffer_count > static_cast<int64_t>(UINT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition_bytes ", partition_bytes, " cuts ", total, " elements into ",
        count + buffer_count, " partitions, more than a uint32 id can name"));
  }

  v1::PartitionPlan plan;
  plan.set_num_shards(num_shards);
  plan.set_partition_bytes(partition_bytes);
  plan.set_total_elements(total);
  std::vector<int64_t> shard_bytes(num_shards, 0);
  int64_t offset = 0;
  // Places partitions of the given lengths, in buffer order, each on the shard with
  // the fewest bytes so far.
  auto place = [&](const std::vector<int64_t>& parts, bool buffers) {
    for (const int64_t length : parts) {
      const uint32_t shard = static_cast<uint32_t>(
          std::min_element(shard_bytes.begin(), shard_bytes.end()) - shard_bytes.begin());
      shard_bytes[shard] += length * 4;
      v1::Partition* partition = plan.add_partitions();
      partition->set_id(static_cast<uint32_t>(plan.partitions_size() - 1));
      partition->set_offset(offset);
      partition->set_length(length);
      partition->set_shard(shard);
      if (buffers) partition->set_buffers(true);
      offset += length;
    }
  };
  place(lengths, false);
  if (buffer_count > 0) place(EvenCut(total - trained, buffer_count), true);
  plan.set_fingerprint(Fingerprint(layout, plan));
  return plan;
}

absl::Status ValidatePartitionPlan(const v1::PartitionPlan& plan) {
  if (plan.num_shards() == 0) return absl::InvalidArgumentError("plan: num_shards must be > 0");
  if (plan.partition_bytes() < 4 || plan.partition_bytes() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: partition_bytes must be a positive multiple of 4, got ", plan.partition_bytes()));
  }
  if (plan.fingerprint().empty()) return absl::InvalidArgumentError("plan: empty fingerprint");
  if (plan.partitions_size() == 0) return absl::InvalidArgumentError("plan: no partitions");
  const int64_t max_elements = plan.partition_bytes() / 4;
  int64_t next_offset = 0;
  bool in_buffers = false;
  for (int i = 0; i < plan.partitions_size(); ++i) {
    const v1::Partition& partition = plan.partitions(i);
    const std::string what = absl::StrCat("plan: partition ", i);
    if ((i == 0 && partition.buffers()) || (in_buffers && !partition.buffers())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": buffer partitions must follow every parameter partition"));
    }
    in_buffers = partition.buffers();
    if (partition.id() != static_cast<uint32_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": id must be ", i, ", got ", partition.id()));
    }
    if (partition.offset() != next_offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": offset must be ", next_offset, ", got ", partition.offset()));
    }
    if (partition.length() <= 0 || partition.length() > max_elements) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": length must be in [1, ",
                                                     max_elements, "], got ", partition.length()));
    }
    if (partition.shard() >= plan.num_shards()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shard must be < ", plan.num_shards(),
                                                     ", got ", partition.shard()));
    }
    next_offset += partition.length();
  }
  if (next_offset != plan.total_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: partitions cover ", next_offset, " elements but total_elements is ",
                     plan.total_elements()));
  }
  return absl::OkStatus();
}

uint64_t MostParameterPartitions(uint64_t trained, int64_t partition_bytes, uint32_t num_shards) {
  if (partition_bytes < 4) return 0;
  const uint64_t group =
      std::min<uint64_t>(static_cast<uint64_t>(partition_bytes) / 4, kGroupElements);
  // Two neighbouring partitions of the layer-following cut together hold more than a
  // group (a partition is closed only when the next unit would overflow it).
  return std::max<uint64_t>(2 * ((trained + group - 1) / group) + 1,
                            std::min<uint64_t>(num_shards, trained));
}

std::vector<uint32_t> PartitionsOfShard(const v1::PartitionPlan& plan, uint32_t shard) {
  std::vector<uint32_t> ids;
  for (const v1::Partition& partition : plan.partitions()) {
    if (partition.shard() == shard) ids.push_back(partition.id());
  }
  return ids;
}

int64_t BytesOfShard(const v1::PartitionPlan& plan, uint32_t shard) {
  int64_t bytes = 0;
  for (const v1::Partition& partition : plan.partitions()) {
    if (partition.shard() == shard) bytes += partition.length() * 4;
  }
  return bytes;
}

}  // namespace tributary
