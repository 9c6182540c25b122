// The job flags' optimizer section (job_flags.h).
#include "common/job_flags_internal.h"

#include <string>
#include <tuple>

#include "absl/flags/flag.h"
#include "common/job_spec.h"

// --- Optimizer ---
ABSL_FLAG(std::string, optimizer, "momentum", "sgd, momentum, adam or adamw. Default: momentum.");
ABSL_FLAG(double, lr, 0.05,
          "Learning rate. Default: 0.05 for sgd and momentum; adam and adamw take 0.001 "
          "unless --lr is given.");
ABSL_FLAG(double, momentum, 0.9, "momentum: coefficient. Default: 0.9.");
ABSL_FLAG(bool, nesterov, false, "momentum: Nesterov's form. Default: false.");
ABSL_FLAG(double, beta1, 0, "adam/adamw: first-moment decay; 0 = the default (0.9).");
ABSL_FLAG(double, beta2, 0, "adam/adamw: second-moment decay; 0 = the default (0.999).");
ABSL_FLAG(double, epsilon, 0, "adam/adamw: denominator epsilon; 0 = the default (1e-8).");
ABSL_FLAG(double, weight_decay, 0, "Weight decay (L2; decoupled for adamw). Default: 0.");
ABSL_FLAG(std::string, lr_schedule, "cosine",
          "constant, step or cosine (to min_lr over the job's steps). Default: cosine.");
ABSL_FLAG(uint64_t, lr_step_size, 0, "step schedule: steps between decays.");
ABSL_FLAG(double, lr_gamma, 0.1, "step schedule: decay factor. Default: 0.1.");
ABSL_FLAG(double, min_lr, 0, "cosine schedule: floor. Default: 0.");
ABSL_FLAG(uint64_t, warmup_steps, 0, "Linear warm-up steps. Default: 0.");

namespace tributary::job_flags {

absl::Status ApplyOptimizerFlags(const FlagUse& use, v1::JobSpec& spec) {
  v1::OptimizerSpec& optimizer = *spec.mutable_optimizer();
  if (use("optimizer")) {
    absl::StatusOr<v1::OptimizerType> type = ParseChoice<v1::OptimizerType>(
        "optimizer", absl::GetFlag(FLAGS_optimizer),
        {{"sgd", v1::SGD}, {"momentum", v1::MOMENTUM}, {"adam", v1::ADAM}, {"adamw", v1::ADAMW}});
    if (!type.ok()) return type.status();
    optimizer.set_type(*type);
  }
  // The flag's default suits SGD and momentum; Adam keeps its own unless asked.
  const bool adam = optimizer.type() == v1::ADAM || optimizer.type() == v1::ADAMW;
  if (use("lr") && (!adam || FlagGiven("lr"))) {
    optimizer.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_lr)));
  }
  for (const auto& [name, value, field] :
       {std::tuple{"beta1", absl::GetFlag(FLAGS_beta1), &v1::OptimizerSpec::set_beta1},
        std::tuple{"beta2", absl::GetFlag(FLAGS_beta2), &v1::OptimizerSpec::set_beta2},
        std::tuple{"epsilon", absl::GetFlag(FLAGS_epsilon), &v1::OptimizerSpec::set_epsilon}}) {
    if (!use(name) || value == 0) continue;
    if (!adam) return BadFlag(name, std::to_string(value), "--optimizer=adam or adamw");
    (optimizer.*field)(static_cast<float>(value));
  }
  // Momentum's settings with another optimizer would be ignored: refused instead.
  const bool momentum = optimizer.type() == v1::MOMENTUM;
  if (FlagGiven("momentum") && !momentum) {
    return BadFlag("momentum", std::to_string(absl::GetFlag(FLAGS_momentum)),
                   "--optimizer=momentum");
  }
  if (use("nesterov") && absl::GetFlag(FLAGS_nesterov) && !momentum) {
    return BadFlag("nesterov", "true", "--optimizer=momentum");
  }
  if (use("momentum") && momentum) {
    optimizer.set_momentum(static_cast<float>(absl::GetFlag(FLAGS_momentum)));
  }
  if (use("nesterov")) optimizer.set_nesterov(absl::GetFlag(FLAGS_nesterov));
  if (use("weight_decay")) {
    optimizer.set_weight_decay(static_cast<float>(absl::GetFlag(FLAGS_weight_decay)));
  }
  v1::LrSchedule& schedule = *optimizer.mutable_schedule();
  if (use("lr_schedule")) {
    absl::StatusOr<v1::LrScheduleKind> kind = ParseChoice<v1::LrScheduleKind>(
        "lr_schedule", absl::GetFlag(FLAGS_lr_schedule),
        {{"constant", v1::CONSTANT}, {"step", v1::STEP}, {"cosine", v1::COSINE}});
    if (!kind.ok()) return kind.status();
    schedule.set_kind(*kind);
  }
  if (use("lr_step_size")) schedule.set_step_size(absl::GetFlag(FLAGS_lr_step_size));
  if (use("lr_gamma") && schedule.kind() == v1::STEP) {
    schedule.set_gamma(static_cast<float>(absl::GetFlag(FLAGS_lr_gamma)));
  }
  if (use("min_lr")) schedule.set_min_lr(static_cast<float>(absl::GetFlag(FLAGS_min_lr)));
  if (use("warmup_steps")) schedule.set_warmup_steps(absl::GetFlag(FLAGS_warmup_steps));
  return absl::OkStatus();
}

}  // namespace tributary::job_flags
