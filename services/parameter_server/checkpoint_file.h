// A PS shard's checkpoint on disk: one file per checkpoint under <dir>/shard-<k>/,
// written to a temp file, fsynced, renamed into place and the directory fsynced, so
// a crash leaves either the whole file or none. Layout (integers little-endian):
//   "TRBPSCK1" | u64 meta_len | u64 body_len | CheckpointMeta | body | u32 crc32c | "TRBPSEND"
// The body is, per partition in meta order, its float32 params then its optimizer
// state; the CRC32C covers every byte before it. Truncated, torn or corrupt files
// are detected on reading and never loaded.
#ifndef TRIBUTARY_SERVICES_PARAMETER_SERVER_CHECKPOINT_FILE_H_
#define TRIBUTARY_SERVICES_PARAMETER_SERVER_CHECKPOINT_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tensor.pb.h"
#include "services/parameter_server/checkpoint.pb.h"

namespace tributary::ps {

struct PartitionData {
  // FLOAT32 parameters, meta.length elements. Shared with the live shard when writing,
  // so taking a snapshot copies no parameters.
  std::shared_ptr<const v1::PartitionValues> values;
  std::vector<float> state;  // state_slots * length floats, slot by slot.
};

struct ShardCheckpoint {
  CheckpointMeta meta;
  std::vector<PartitionData> partitions;  // Parallel to meta.partitions().
};

struct WrittenCheckpoint {
  std::string path;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// <dir>/shard-<shard>.
std::string ShardDirectory(const std::string& dir, uint32_t shard);

// Writes <shard_dir>/ckpt-<written_unix_micros>-step-<step>.tpc atomically, creating
// shard_dir when needed. INVALID_ARGUMENT when the data does not match the meta;
// INTERNAL naming the path and errno text on an I/O error.
absl::StatusOr<WrittenCheckpoint> WriteCheckpoint(const std::string& shard_dir,
                                                  const ShardCheckpoint& checkpoint);

// Reads and verifies a whole file. DATA_LOSS naming the path and what is wrong
// (truncated, bad magic, checksum mismatch, meta inconsistent with the body);
// NOT_FOUND / INTERNAL for I/O errors.
absl::StatusOr<ShardCheckpoint> ReadCheckpoint(const std::string& path);

// Checkpoint files of a shard directory, newest first (by the time in their name).
std::vector<std::string> ListCheckpoints(const std::string& shard_dir);

struct LoadedCheckpoint {
  std::string path;
  ShardCheckpoint checkpoint;
};

// The newest checkpoint of shard_dir that reads back intact; every newer file that
// does not is logged with its reason, appended to *skipped (may be null) and left
// in place for inspection. Leftover temp files are removed. nullopt when there is
// no intact checkpoint (or no directory).
std::optional<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& shard_dir,
                                                     std::vector<std::string>* skipped);

// Deletes all but the newest `keep` checkpoint files (keep >= 1).
void PruneCheckpoints(const std::string& shard_dir, int keep);

// Shard indices that have a shard-<k> directory holding checkpoint files under dir.
std::vector<uint32_t> ShardsWithCheckpoints(const std::string& dir);

}  // namespace tributary::ps

#endif  // TRIBUTARY_SERVICES_PARAMETER_SERVER_CHECKPOINT_FILE_H_
