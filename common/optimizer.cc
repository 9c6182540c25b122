#include "common/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace tributary {
namespace {

constexpr double kPi = 3.14159265358979323846;

absl::Status Bad(const char* field, double value, const char* rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, ": ", rule, ", got ", value));
}

}  // namespace

absl::StatusOr<Optimizer> Optimizer::Create(const v1::OptimizerSpec& spec,
                                            uint64_t total_steps) {
  if (spec.type() == v1::OPTIMIZER_TYPE_UNSPECIFIED || !v1::OptimizerType_IsValid(spec.type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.type: unknown optimizer ", spec.type()));
  }
  if (!(spec.learning_rate() > 0) || !std::isfinite(spec.learning_rate())) {
    return Bad("learning_rate", spec.learning_rate(), "must be a finite number > 0");
  }
  if (!(spec.weight_decay() >= 0) || !std::isfinite(spec.weight_decay())) {
    return Bad("weight_decay", spec.weight_decay(), "must be a finite number >= 0");
  }
  if (spec.type() == v1::MOMENTUM && !(spec.momentum() >= 0 && spec.momentum() < 1)) {
    return Bad("momentum", spec.momentum(), "must be in [0, 1)");
  }
  if (spec.type() == v1::ADAM || spec.type() == v1::ADAMW) {
    if (!(spec.beta1() >= 0 && spec.beta1() < 1)) return Bad("beta1", spec.beta1(), "must be in [0, 1)");
    if (!(spec.beta2() >= 0 && spec.beta2() < 1)) return Bad("beta2", spec.beta2(), "must be in [0, 1)");
    if (!(spec.epsilon() > 0)) return Bad("epsilon", spec.epsilon(), "must be > 0");
  }
  const v1::LrSchedule& schedule = spec.schedule();
  if (!v1::LrScheduleKind_IsValid(schedule.kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.schedule.kind: unknown schedule ", schedule.kind()));
  }
  if (schedule.kind() == v1::STEP) {
    if (schedule.step_size() == 0) {
      return Bad("schedule.step_size", 0, "must be > 0 for a STEP schedule");
    }
    if (!(schedule.gamma() > 0 && schedule.gamma() <= 1)) {
      return Bad("schedule.gamma", schedule.gamma(), "must be in (0, 1]");
    }
  }
  if (schedule.kind() == v1::COSINE &&
      !(schedule.min_lr() >= 0 && schedule.min_lr() <= spec.learning_rate())) {
    return Bad("schedule.min_lr", schedule.min_lr(), "must be in [0, learning_rate]");
  }
  return Optimizer(spec, total_steps);
}

Optimizer::Optimizer(v1::OptimizerSpec spec, uint64_t total_steps)
    : spec_(std::move(spec)), total_steps_(total_steps) {
  switch (spec_.type()) {
    case v1::MOMENTUM:
      state_slots_ = 1;
      break;
    case v1::ADAM:
    case v1::ADAMW:
      state_slots_ = 2;
      break;
    default:
      state_slots_ = 0;
  }
}

UpdateCoefficients Optimizer::Coefficients(uint64_t step) const {
  UpdateCoefficients c;
  c.lr = LearningRate(step);
  c.weight_decay = spec_.weight_decay();
  switch (spec_.type()) {
    case v1::MOMENTUM:
      c.kind = spec_.nesterov() ? UpdateCoefficients::kNesterov : UpdateCoefficients::kMomentum;
      c.momentum = spec_.momentum();
      break;
    case v1::ADAM:
    case v1::ADAMW: {
      c.kind = spec_.type() == v1::ADAMW ? UpdateCoefficients::kAdamW : UpdateCoefficients::kAdam;
      c.beta1 = spec_.beta1();
      c.beta2 = spec_.beta2();
      c.epsilon = spec_.epsilon();
      const double t = static_cast<double>(step) + 1;
      c.correction1 = static_cast<float>(1 - std::pow(static_cast<double>(c.beta1), t));
      c.correction2 = static_cast<float>(1 - std::pow(static_cast<double>(c.beta2), t));
      break;
    }
    default:
      c.kind = UpdateCoefficients::kSgd;
  }
  return c;
}

float Optimizer::LearningRate(uint64_t step) const {
  const v1::LrSchedule& schedule = spec_.schedule();
  const double base = spec_.learning_rate();
  double rate = base;
  switch (schedule.kind()) {
    case v1::STEP:
      rate = base * std::pow(static_cast<double>(schedule.gamma()),
                             static_cast<double>(step / schedule.step_size()));
      break;
    case v1::COSINE: {
      const double progress =
          total_steps_ == 0 ? 1.0
                            : std::min<double>(1.0, static_cast<double>(step) / total_steps_);
      rate = schedule.min_lr() + (base - schedule.min_lr()) * (1 + std::cos(kPi * progress)) / 2;
      break;
    }
    default:
      break;
  }
  if (step < schedule.warmup_steps()) {
    rate *= static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps());
  }
  return static_cast<float>(rate);
}

namespace {

// One update of out[i] from in[i] and g(i), the gradient of element i, through the
// element functions the GPU kernel runs too (optimizer_step.h). Every optimizer has one
// loop per variant with no branch inside, so that it vectorizes (with
// -fno-math-errno: BUILD.bazel); the arithmetic of an element never depends on how
// its gradient is obtained, so Apply and ApplyMean agree bit for bit. Each element's
// state is read from `from` (which may be `state`) and the new one written to `state`.
template <typename Gradient>
void Update(const UpdateCoefficients& c, const float* in, float* out, Gradient g, float* state,
            const float* from, size_t n) {
  switch (c.kind) {
    case UpdateCoefficients::kMomentum:
      for (size_t i = 0; i < n; ++i) {
        float velocity = from[i];
        out[i] = MomentumStep(c, in[i], g(i), velocity);
        state[i] = velocity;
      }
      break;
    case UpdateCoefficients::kNesterov:
      for (size_t i = 0; i < n; ++i) {
        float velocity = from[i];
        out[i] = NesterovStep(c, in[i], g(i), velocity);
        state[i] = velocity;
      }
      break;
    case UpdateCoefficients::kAdam:
      for (size_t i = 0; i < n; ++i) {
        float m = from[i];
        float v = from[n + i];
        out[i] = AdamStep<false>(c, in[i], g(i), m, v);
        state[i] = m;
        state[n + i] = v;
      }
      break;
    case UpdateCoefficients::kAdamW:
      for (size_t i = 0; i < n; ++i) {
        float m = from[i];
        float v = from[n + i];
        out[i] = AdamStep<true>(c, in[i], g(i), m, v);
        state[i] = m;
        state[n + i] = v;
      }
      break;
    default:  // SGD
      for (size_t i = 0; i < n; ++i) out[i] = SgdStep(c, in[i], g(i));
  }
}

}  // namespace

void Optimizer::Apply(uint64_t step, float* params, const float* grad, float* state,
                      size_t n) const {
  Update(Coefficients(step), params, params, [grad](size_t i) { return grad[i]; }, state, state,
         n);
}

bool Optimizer::ApplyMeanAdding(uint64_t step, const float* in, float* out,
                                const float* grad_sum, const char* last, float divisor,
                                float* state, size_t n, const float* state_from) const {
  const float* from = state_from != nullptr ? state_from : state;
  // The finiteness flags are ORed, not branched on, so the loops still vectorize.
  const auto not_finite = [](float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    return static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  };
  uint32_t bad = 0;
  const UpdateCoefficients c = Coefficients(step);
  if (grad_sum == nullptr) {
    Update(c, in, out,
           [&](size_t i) {
             float x;
             std::memcpy(&x, last + 4 * i, 4);
             bad |= not_finite(x);
             return x / divisor;
           },
           state, from, n);
  } else {
    Update(c, in, out,
           [&](size_t i) {
             float x;
             std::memcpy(&x, last + 4 * i, 4);
             const float sum = grad_sum[i] + x;
             bad |= not_finite(x) | not_finite(sum);
             return sum / divisor;
           },
           state, from, n);
  }
  return bad == 0;
}

void Optimizer::ApplyMean(uint64_t step, const float* in, float* out, const float* grad_sum,
                          float divisor, float* state, size_t n, const float* state_from) const {
  Update(Coefficients(step), in, out,
         [grad_sum, divisor](size_t i) { return grad_sum[i] / divisor; }, state,
         state_from != nullptr ? state_from : state, n);
}

}  // namespace tributary
