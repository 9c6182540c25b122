// The job flags' mode (distribution) section (job_flags.h).
#include "common/job_flags_internal.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/job_spec.h"

// --- Distribution ---
ABSL_FLAG(std::string, mode, "sync",
          "sync, async, bounded (bounded staleness) or local_sgd (each node steps on its own "
          "and the PS averages every --sync_every steps). Default: sync.");
ABSL_FLAG(uint32_t, staleness, 4, "bounded: max steps ahead of the slowest node. Default: 4.");
ABSL_FLAG(uint32_t, sync_every, 0,
          "local_sgd: local steps between synchronizations, in [1, 1000000]; 0 = the job "
          "default (8). Default: 0.");
ABSL_FLAG(std::string, outer_optimizer, "sgd",
          "local_sgd: the PS's optimizer on the nodes' mean parameter change: sgd or momentum "
          "(DiLoCo: momentum with --outer_nesterov). Default: sgd.");
ABSL_FLAG(double, outer_lr, 1.0,
          "local_sgd: the outer optimizer's learning rate (1 with sgd = plain averaging). "
          "Default: 1.");
ABSL_FLAG(double, outer_momentum, 0.9, "local_sgd, outer momentum: coefficient. Default: 0.9.");
ABSL_FLAG(bool, outer_nesterov, false,
          "local_sgd, outer momentum: Nesterov's form. Default: false.");
ABSL_FLAG(uint32_t, nodes_min, 0,
          "Nodes needed to start (and to go on after a failure); 0 = every node the local "
          "cluster starts (submit: 1).");
ABSL_FLAG(uint32_t, nodes_max, 0, "Nodes admitted; 0 = nodes_min.");
ABSL_FLAG(uint32_t, replicas, 0,
          "Replicas per worker process. 0 = `tributary local`: one per core it gives each "
          "worker (the usable cores / --workers, at least 1); elsewhere 1. Default: 0.");
ABSL_FLAG(std::string, job_devices, "auto", "Where replicas run: auto, cpu or gpu. Default: auto.");
ABSL_FLAG(int64_t, partition_bytes, tributary::kDefaultPartitionBytes,
          "Largest partition in bytes. Default: 4194304 (4 MiB).");
ABSL_FLAG(std::string, partition_cut, "auto",
          "How the parameters are cut into partitions: even (nearly equal partitions, the "
          "fewest messages), layers (following the layers and the engine's row pieces, "
          "so pushes start during backward and the next forward on the first updates "
          "back) or auto (the coordinator chooses when the job starts: layers for SYNC "
          "with every replica on a GPU, else even; a resumed job keeps its earlier "
          "job's cut). Default: auto.");
ABSL_FLAG(std::string, wire_dtype, "float32",
          "Gradient dtype on the wire: float32, float16 or bfloat16. Default: float32.");

namespace tributary::job_flags {

absl::Status ApplyModeFlags(const FlagUse& use, v1::JobSpec& spec) {
  if (use("mode")) {
    absl::StatusOr<v1::TrainingMode> mode = ParseChoice<v1::TrainingMode>(
        "mode", absl::GetFlag(FLAGS_mode),
        {{"sync", v1::SYNC},
         {"async", v1::ASYNC},
         {"bounded", v1::BOUNDED_STALENESS},
         {"local_sgd", v1::LOCAL_SGD}});
    if (!mode.ok()) return mode.status();
    spec.set_mode(*mode);
  }
  // The local SGD flags mean nothing in another mode: refused there when given.
  if (spec.mode() != v1::LOCAL_SGD) {
    for (const char* name :
         {"sync_every", "outer_optimizer", "outer_lr", "outer_momentum", "outer_nesterov"}) {
      if (FlagGiven(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": applies only with --mode=local_sgd (the job's mode is ",
                         v1::TrainingMode_Name(spec.mode()), ")"));
      }
    }
  } else {
    if (use("sync_every") && absl::GetFlag(FLAGS_sync_every) > 0) {
      spec.set_sync_every(absl::GetFlag(FLAGS_sync_every));
    }
    v1::OptimizerSpec& outer = *spec.mutable_outer_optimizer();
    if (use("outer_optimizer")) {
      absl::StatusOr<v1::OptimizerType> type = ParseChoice<v1::OptimizerType>(
          "outer_optimizer", absl::GetFlag(FLAGS_outer_optimizer),
          {{"sgd", v1::SGD}, {"momentum", v1::MOMENTUM}});
      if (!type.ok()) return type.status();
      outer.set_type(*type);
    }
    if (use("outer_lr")) outer.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_outer_lr)));
    const bool outer_momentum = outer.type() == v1::MOMENTUM;
    if (FlagGiven("outer_momentum") && !outer_momentum) {
      return BadFlag("outer_momentum", std::to_string(absl::GetFlag(FLAGS_outer_momentum)),
                     "--outer_optimizer=momentum");
    }
    if (use("outer_nesterov") && absl::GetFlag(FLAGS_outer_nesterov) && !outer_momentum) {
      return BadFlag("outer_nesterov", "true", "--outer_optimizer=momentum");
    }
    if (use("outer_momentum") && outer_momentum) {
      outer.set_momentum(static_cast<float>(absl::GetFlag(FLAGS_outer_momentum)));
    }
    if (use("outer_nesterov")) outer.set_nesterov(absl::GetFlag(FLAGS_outer_nesterov));
  }
  if (use("staleness") && spec.mode() == v1::BOUNDED_STALENESS) {
    spec.set_staleness(absl::GetFlag(FLAGS_staleness));
  }
  if (use("nodes_min") && absl::GetFlag(FLAGS_nodes_min) > 0) {
    spec.set_nodes_min(absl::GetFlag(FLAGS_nodes_min));
  }
  if (use("nodes_max") && absl::GetFlag(FLAGS_nodes_max) > 0) {
    spec.set_nodes_max(absl::GetFlag(FLAGS_nodes_max));
  }
  if (FlagGiven("replicas") && absl::GetFlag(FLAGS_replicas) == 0) {
    return BadFlag("replicas", "0",
                   "a replica count in [1, 64] (leave --replicas out for the default)");
  }
  if (use("replicas") && absl::GetFlag(FLAGS_replicas) > 0) {
    spec.set_replicas_per_worker(absl::GetFlag(FLAGS_replicas));
  }
  if (use("job_devices")) {
    absl::StatusOr<v1::DeviceKind> devices =
        ParseChoice<v1::DeviceKind>("job_devices", absl::GetFlag(FLAGS_job_devices),
                                    {{"auto", v1::AUTO}, {"cpu", v1::CPU}, {"gpu", v1::GPU}});
    if (!devices.ok()) return devices.status();
    spec.set_devices(*devices);
  }
  if (use("partition_bytes")) spec.set_partition_bytes(absl::GetFlag(FLAGS_partition_bytes));
  if (use("partition_cut")) {
    absl::StatusOr<v1::PartitionCut> cut = ParseChoice<v1::PartitionCut>(
        "partition_cut", absl::GetFlag(FLAGS_partition_cut),
        {{"auto", v1::CUT_AUTO}, {"even", v1::CUT_EVEN}, {"layers", v1::CUT_LAYERS}});
    if (!cut.ok()) return cut.status();
    spec.set_partition_cut(*cut);
  }
  if (use("wire_dtype")) {
    absl::StatusOr<v1::DType> dtype = ParseChoice<v1::DType>(
        "wire_dtype", absl::GetFlag(FLAGS_wire_dtype),
        {{"float32", v1::FLOAT32}, {"float16", v1::FLOAT16}, {"bfloat16", v1::BFLOAT16}});
    if (!dtype.ok()) return dtype.status();
    spec.set_wire_dtype(*dtype);
  }
  return absl::OkStatus();
}

}  // namespace tributary::job_flags
