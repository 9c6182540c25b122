#include "worker/engine/cpu_executor.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "common/row_pieces.h"
#include "worker/engine/counter_rng.h"
#include "worker/engine/ordered_ready.h"

namespace tributary::engine {
namespace {

template <typename S>
using Matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename S>
using MatrixMap = Eigen::Map<Matrix<S>>;
template <typename S>
using ConstMatrixMap = Eigen::Map<const Matrix<S>>;
template <typename S>
using RowVectorMap = Eigen::Map<Eigen::Matrix<S, 1, Eigen::Dynamic>>;
template <typename S>
using ConstRowVectorMap = Eigen::Map<const Eigen::Matrix<S, 1, Eigen::Dynamic>>;
template <typename S>
using VectorMap = Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, 1>>;
template <typename S>
using ConstVectorMap = Eigen::Map<const Eigen::Matrix<S, Eigen::Dynamic, 1>>;

// col[(c*k + ki)*k + kj][oh*OW + ow] = x[c][oh*s - p + ki][ow*s - p + kj] (0 outside).
// Rows are `ld` apart, so the columns of several samples can sit side by side.
template <typename S>
void Im2Col(const LayerSpec& l, const S* x, S* col, int64_t ld) {
  for (int64_t c = 0; c < l.in.channels; ++c) {
    for (int ki = 0; ki < l.kernel; ++ki) {
      for (int kj = 0; kj < l.kernel; ++kj) {
        S* row = col + ((c * l.kernel + ki) * l.kernel + kj) * ld;
        for (int64_t oh = 0; oh < l.out.height; ++oh) {
          const int64_t ih = oh * l.stride - l.padding + ki;
          for (int64_t ow = 0; ow < l.out.width; ++ow) {
            const int64_t iw = ow * l.stride - l.padding + kj;
            const bool inside = ih >= 0 && ih < l.in.height && iw >= 0 && iw < l.in.width;
            row[oh * l.out.width + ow] =
                inside ? x[(c * l.in.height + ih) * l.in.width + iw] : S(0);
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: dx (zeroed by the caller) += scatter of dcol.
template <typename S>
void Col2Im(const LayerSpec& l, const S* dcol, int64_t ld, S* dx) {
  for (int64_t c = 0; c < l.in.channels; ++c) {
    for (int ki = 0; ki < l.kernel; ++ki) {
      for (int kj = 0; kj < l.kernel; ++kj) {
        const S* row = dcol + ((c * l.kernel + ki) * l.kernel + kj) * ld;
        for (int64_t oh = 0; oh < l.out.height; ++oh) {
          const int64_t ih = oh * l.stride - l.padding + ki;
          if (ih < 0 || ih >= l.in.height) continue;
          for (int64_t ow = 0; ow < l.out.width; ++ow) {
            const int64_t iw = ow * l.stride - l.padding + kj;
            if (iw < 0 || iw >= l.in.width) continue;
            dx[(c * l.in.height + ih) * l.in.width + iw] += row[oh * l.out.width + ow];
          }
        }
      }
    }
  }
}

// A convolution as matrix products over chunks of samples: W is [oc, ckk], the
// im2col columns of a chunk of g samples [ckk, g*ohw].
struct ConvShape {
  int64_t in_size = 0;   // Input values per sample.
  int64_t out_size = 0;  // Output values per sample.
  int64_t ckk = 0;    // Inputs per output position: channels x kernel x kernel.
  int64_t ohw = 0;    // Output positions per channel.
  int64_t oc = 0;     // Output channels.
  int64_t chunk = 0;  // Samples per product.
};

// Samples whose im2col columns go into one matrix product: large products keep the
// threads busy with few hand-offs; the cap bounds the scratch at ~4 MiB (float).
ConvShape ConvShapeOf(const LayerSpec& l, int64_t n) {
  ConvShape shape;
  shape.in_size = l.in.size();
  shape.out_size = l.out.size();
  shape.ckk = l.in.channels * l.kernel * l.kernel;
  shape.ohw = l.out.height * l.out.width;
  shape.oc = l.out.channels;
  shape.chunk =
      std::max<int64_t>(1, std::min<int64_t>(n, (int64_t{1} << 20) / (shape.ckk * shape.ohw)));
  return shape;
}

}  // namespace

namespace {

std::atomic<int> matmul_threads{1};

// Products smaller than this run on the calling thread alone: waking helpers costs
// tens of microseconds, and on a loaded machine a product split in two can wait for a
// helper the scheduler has not run yet. 20 MFLOP is about 1 ms on one core.
constexpr double kMinParallelFlops = 20e6;

// dst = lhs * rhs (or += with accumulate), cut into blocks of dst's rows or columns
// (whichever dimension is longer) that the runner's threads compute independently.
template <typename Dst, typename Lhs, typename Rhs>
void Product(ParallelRunner& runner, Dst& dst, const Lhs& lhs, const Rhs& rhs, bool accumulate) {
  const int64_t rows = dst.rows(), cols = dst.cols();
  const double flops = 2.0 * rows * cols * lhs.cols();
  int64_t blocks = 1;
  if (runner.threads() > 1 && flops >= kMinParallelFlops) {
    blocks = std::min<int64_t>(4 * runner.threads(),
                               static_cast<int64_t>(flops / (kMinParallelFlops / 2)));
  }
  const bool by_rows = rows >= cols;
  const int64_t extent = by_rows ? rows : cols;
  blocks = std::max<int64_t>(1, std::min(blocks, extent));
  if (blocks == 1) {
    if (accumulate) {
      dst.noalias() += lhs * rhs;
    } else {
      dst.noalias() = lhs * rhs;
    }
    return;
  }
  runner.Run(static_cast<int>(blocks), [&](int b) {
    const int64_t begin = extent * b / blocks;
    const int64_t size = extent * (b + 1) / blocks - begin;
    if (by_rows) {
      auto part = dst.middleRows(begin, size);
      if (accumulate) {
        part.noalias() += lhs.middleRows(begin, size) * rhs;
      } else {
        part.noalias() = lhs.middleRows(begin, size) * rhs;
      }
    } else {
      auto part = dst.middleCols(begin, size);
      if (accumulate) {
        part.noalias() += lhs * rhs.middleCols(begin, size);
      } else {
        part.noalias() = lhs * rhs.middleCols(begin, size);
      }
    }
  });
}

// Calls fn(t) for t in [0, pieces): on the runner's threads when the work is worth
// splitting (the same threshold as Product), else in order on the calling thread.
void RunPieces(ParallelRunner& runner, int64_t pieces, double flops,
               const std::function<void(int)>& fn) {
  if (runner.threads() > 1 && flops >= kMinParallelFlops) {
    runner.Run(static_cast<int>(pieces), fn);
    return;
  }
  for (int t = 0; t < static_cast<int>(pieces); ++t) fn(t);
}

}  // namespace

void SetCpuMatmulThreads(int threads) { matmul_threads = std::max(1, threads); }
int CpuMatmulThreads() { return matmul_threads.load(); }

template <typename Scalar>
CpuExecutor<Scalar>::CpuExecutor(ModelDef model)
    : model_(std::move(model)),
      activations_(model_.layers.size() + 1),
      dropout_scale_(model_.layers.size()),
      pool_argmax_(model_.layers.size()),
      runner_(std::make_unique<ParallelRunner>(CpuMatmulThreads())) {}

template <typename Scalar>
CpuExecutor<Scalar>::~CpuExecutor() = default;

template <typename Scalar>
void CpuExecutor<Scalar>::ConvForward(const LayerSpec& l, const Scalar* params, const Scalar* x,
                                      Scalar* y, int64_t n) {
  using S = Scalar;
  // For a chunk of g samples: out[oc, g*ohw] = W[oc, ckk] col[ckk, g*ohw] + b,
  // then each sample's [oc, ohw] block is copied to its place in y.
  const auto [in_size, out_size, ckk, ohw, oc, chunk] = ConvShapeOf(l, n);
  col_.resize(ckk * chunk * ohw);
  dcol_.resize(oc * chunk * ohw);
  ConstMatrixMap<S> w(params + l.weight.offset, oc, ckk);
  ConstVectorMap<S> b(params + l.bias.offset, oc);
  for (int64_t s0 = 0; s0 < n; s0 += chunk) {
    const int64_t g = std::min(chunk, n - s0);
    for (int64_t t = 0; t < g; ++t) {
      Im2Col(l, x + (s0 + t) * in_size, col_.data() + t * ohw, g * ohw);
    }
    ConstMatrixMap<S> col(col_.data(), ckk, g * ohw);
    MatrixMap<S> out(dcol_.data(), oc, g * ohw);
    Product(*runner_, out, w, col, false);
    out.colwise() += b;
    for (int64_t t = 0; t < g; ++t) {
      for (int64_t c = 0; c < oc; ++c) {
        const S* src = dcol_.data() + c * g * ohw + t * ohw;
        std::copy(src, src + ohw, y + (s0 + t) * out_size + c * ohw);
      }
    }
  }
}

template <typename Scalar>
void CpuExecutor<Scalar>::ConvBackward(const LayerSpec& l, const Scalar* params, const Scalar* x,
                                       Scalar* grads, int64_t n, bool need_input_grad) {
  using S = Scalar;
  // Per chunk of g samples, with dout gathered to [oc, g*ohw]:
  // dW += dout col^T, db += row sums, dcol = W^T dout scattered back by Col2Im.
  const auto [in_size, out_size, ckk, ohw, oc, chunk] = ConvShapeOf(l, n);
  col_.resize(ckk * chunk * ohw);
  dcol_.resize(ckk * chunk * ohw);
  dout_.resize(oc * chunk * ohw);
  ConstMatrixMap<S> w(params + l.weight.offset, oc, ckk);
  MatrixMap<S> dw(grads + l.weight.offset, oc, ckk);
  VectorMap<S> db(grads + l.bias.offset, oc);
  bias_sums_.assign(oc, S(0));  // Aligned, as for linear layers.
  VectorMap<S> sums(bias_sums_.data(), oc);
  dw.setZero();
  for (int64_t s0 = 0; s0 < n; s0 += chunk) {
    const int64_t g = std::min(chunk, n - s0);
    for (int64_t t = 0; t < g; ++t) {
      Im2Col(l, x + (s0 + t) * in_size, col_.data() + t * ohw, g * ohw);
      for (int64_t c = 0; c < oc; ++c) {
        const S* src = grad_out_.data() + (s0 + t) * out_size + c * ohw;
        std::copy(src, src + ohw, dout_.data() + c * g * ohw + t * ohw);
      }
    }
    ConstMatrixMap<S> col(col_.data(), ckk, g * ohw);
    ConstMatrixMap<S> dout(dout_.data(), oc, g * ohw);
    Product(*runner_, dw, dout, col.transpose(), true);
    sums.noalias() += dout.rowwise().sum();
    if (need_input_grad) {
      MatrixMap<S> dcol(dcol_.data(), ckk, g * ohw);
      Product(*runner_, dcol, w.transpose(), dout, false);
      for (int64_t t = 0; t < g; ++t) {
        S* dx = grad_in_.data() + (s0 + t) * in_size;
        std::fill(dx, dx + in_size, S(0));
        Col2Im(l, dcol_.data() + t * ohw, g * ohw, dx);
      }
    }
  }
  db = sums;
}

template <typename Scalar>
LossStats CpuExecutor<Scalar>::RunForward(const Scalar* params, const Batch& batch,
                                          const DropoutKey* dropout, Scalar* dlogits,
                                          const ParametersNeededFn& needed) {
  using S = Scalar;
  const int64_t n = batch.count;
  AlignedVector<S>& input = activations_[0];
  input.resize(n * model_.input.size());
  std::copy(batch.features, batch.features + input.size(), input.begin());

  for (size_t i = 0; i < model_.layers.size(); ++i) {
    const LayerSpec& l = model_.layers[i];
    const AlignedVector<S>& x = activations_[i];
    AlignedVector<S>& y = activations_[i + 1];
    const int64_t in_size = l.in.size();
    const int64_t out_size = l.out.size();
    y.resize(n * out_size);
    const int64_t pieces = l.kind == LayerKind::kLinear ? RowPieceCount(out_size, in_size) : 1;
    if (needed && l.has_parameters() && pieces == 1) {
      needed(l.weight.offset, l.weight.length + l.bias.length);
    }
    switch (l.kind) {
      case LayerKind::kLinear: {
        ConstMatrixMap<S> xm(x.data(), n, in_size);
        ConstMatrixMap<S> w(params + l.weight.offset, out_size, in_size);
        ConstRowVectorMap<S> b(params + l.bias.offset, out_size);
        MatrixMap<S> ym(y.data(), n, out_size);
        if (pieces == 1) {
          Product(*runner_, ym, xm, w.transpose(), false);
        } else {
          // The weight's row pieces (row_pieces.h), last first: the order backward
          // finished them, so the order their updates come back in. Each piece waits
          // only for its own rows; the runner's threads take pieces in turn.
          RunPieces(*runner_, pieces, 2.0 * n * out_size * in_size, [&](int t) {
            const RowRange rows = RowPiece(out_size, pieces, pieces - 1 - t);
            if (needed) needed(l.weight.offset + rows.first * in_size, rows.count * in_size);
            ym.middleCols(rows.first, rows.count).noalias() =
                xm * w.middleRows(rows.first, rows.count).transpose();
          });
          if (needed) needed(l.bias.offset, l.bias.length);
        }
        ym.rowwise() += b;
        break;
      }
      case LayerKind::kConv2d:
        ConvForward(l, params, x.data(), y.data(), n);
        break;
      case LayerKind::kMaxPool2d: {
        std::vector<int32_t>& argmax = pool_argmax_[i];
        argmax.resize(n * out_size);
        const int k = l.kernel;
        for (int64_t s = 0; s < n; ++s) {
          const S* xs = x.data() + s * in_size;
          for (int64_t c = 0; c < l.out.channels; ++c) {
            for (int64_t oh = 0; oh < l.out.height; ++oh) {
              for (int64_t ow = 0; ow < l.out.width; ++ow) {
                int64_t best = (c * l.in.height + oh * k) * l.in.width + ow * k;
                for (int ki = 0; ki < k; ++ki) {
                  for (int kj = 0; kj < k; ++kj) {
                    const int64_t at = (c * l.in.height + oh * k + ki) * l.in.width + ow * k + kj;
                    if (xs[at] > xs[best]) best = at;
                  }
                }
                const int64_t o = s * out_size + (c * l.out.height + oh) * l.out.width + ow;
                y[o] = xs[best];
                argmax[o] = static_cast<int32_t>(best);
              }
            }
          }
        }
        break;
      }
      case LayerKind::kRelu:
        for (int64_t j = 0; j < n * out_size; ++j) y[j] = x[j] > 0 ? x[j] : S(0);
        break;
      case LayerKind::kTanh:
        for (int64_t j = 0; j < n * out_size; ++j) y[j] = std::tanh(x[j]);
        break;
      case LayerKind::kFlatten:
        std::copy(x.begin(), x.begin() + n * out_size, y.begin());
        break;
      case LayerKind::kDropout: {
        if (dropout == nullptr) {
          std::copy(x.begin(), x.begin() + n * out_size, y.begin());
          break;
        }
        AlignedVector<S>& scale = dropout_scale_[i];
        scale.resize(n * out_size);
        const S keep_scale = S(1) / (S(1) - S(l.dropout));
        for (int64_t s = 0; s < n; ++s) {
          for (int64_t e = 0; e < out_size; ++e) {
            const bool keep = DropoutKeeps(dropout->seed, dropout->step, batch.sample_ids[s],
                                           l.dropout_index, e, l.dropout);
            scale[s * out_size + e] = keep ? keep_scale : S(0);
          }
        }
        for (int64_t j = 0; j < n * out_size; ++j) y[j] = x[j] * scale[j];
        break;
      }
    }
  }

  // Softmax cross-entropy, summed over the batch; dlogits = softmax - onehot.
  LossStats stats;
  stats.samples = n;
  const AlignedVector<S>& logits = activations_.back();
  const int64_t classes = model_.num_classes;
  for (int64_t s = 0; s < n; ++s) {
    const S* z = logits.data() + s * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    const int32_t label = batch.labels[s];
    if (best == label) ++stats.correct;
    const S max = z[best];
    S total = 0;
    for (int64_t c = 0; c < classes; ++c) total += std::exp(z[c] - max);
    const S log_total = std::log(total);
    stats.loss_sum += static_cast<double>(log_total + max - z[label]);
    if (dlogits != nullptr) {
      S* d = dlogits + s * classes;
      for (int64_t c = 0; c < classes; ++c) d[c] = std::exp(z[c] - max - log_total);
      d[label] -= S(1);
    }
  }
  return stats;
}

template <typename Scalar>
LossStats CpuExecutor<Scalar>::Forward(const Scalar* params, const Batch& batch) {
  return RunForward(params, batch, nullptr, nullptr, {});
}

template <typename Scalar>
LossStats CpuExecutor<Scalar>::ForwardBackward(const Scalar* params, const Batch& batch,
                                               const DropoutKey* dropout, Scalar* grads,
                                               const GradientReadyFn& on_ready,
                                               const ParametersNeededFn& needed) {
  using S = Scalar;
  const int64_t n = batch.count;
  grad_out_.resize(n * model_.num_classes);
  const LossStats stats = RunForward(params, batch, dropout, grad_out_.data(), needed);

  auto ready = [&](const TensorRange& range, int64_t tensor_offset) {
    if (!on_ready) return;
    on_ready(model_.TensorAt(tensor_offset), range.offset, range.length);
  };

  for (size_t i = model_.layers.size(); i-- > 0;) {
    const LayerSpec& l = model_.layers[i];
    const AlignedVector<S>& x = activations_[i];
    const AlignedVector<S>& y = activations_[i + 1];
    const int64_t in_size = l.in.size();
    const int64_t out_size = l.out.size();
    // The first layer's input gradient is never needed; its parameters' are.
    const bool need_input_grad = i > 0;
    grad_in_.resize(n * in_size);
    switch (l.kind) {
      case LayerKind::kLinear: {
        ConstMatrixMap<S> dy(grad_out_.data(), n, out_size);
        ConstMatrixMap<S> xm(x.data(), n, in_size);
        ConstMatrixMap<S> w(params + l.weight.offset, out_size, in_size);
        MatrixMap<S> dw(grads + l.weight.offset, out_size, in_size);
        RowVectorMap<S> db(grads + l.bias.offset, out_size);
        const int64_t pieces = RowPieceCount(out_size, in_size);
        if (n == 0) {
          dw.setZero();
          db.setZero();
        } else {
          // Summed into an aligned scratch, then copied: Eigen picks which columns it
          // sums with vectors, and so their order of additions, from the destination's
          // address, and grads may lie anywhere (aligned.h).
          bias_sums_.resize(out_size);
          RowVectorMap<S> sums(bias_sums_.data(), out_size);
          sums.noalias() = dy.colwise().sum();
          db = sums;
          if (pieces == 1) Product(*runner_, dw, dy.transpose(), xm, false);
        }
        if (need_input_grad) {
          MatrixMap<S> dx(grad_in_.data(), n, in_size);
          Product(*runner_, dx, dy, w, false);
        }
        // Ready once the weights are no longer read (Replica::DoneWithParametersWhenReady).
        ready(l.bias, l.bias.offset);
        if (pieces == 1 || n == 0) {
          ready(l.weight, l.weight.offset);
          break;
        }
        // The weight's gradient in its row pieces, last first, on the runner's threads;
        // each is reported as soon as it and every piece after it are final, so the
        // node can push it while the pieces before it are computed.
        const int weight_tensor = model_.TensorAt(l.weight.offset);
        OrderedReady in_order(static_cast<int>(pieces), [&](int t) {
          if (!on_ready) return;
          const RowRange rows = RowPiece(out_size, pieces, pieces - 1 - t);
          on_ready(weight_tensor, l.weight.offset + rows.first * in_size, rows.count * in_size);
        });
        RunPieces(*runner_, pieces, 2.0 * n * out_size * in_size, [&](int t) {
          const RowRange rows = RowPiece(out_size, pieces, pieces - 1 - t);
          dw.middleRows(rows.first, rows.count).noalias() =
              dy.middleCols(rows.first, rows.count).transpose() * xm;
          in_order.Done(t);
        });
        break;
      }
      case LayerKind::kConv2d:
        ConvBackward(l, params, x.data(), grads, n, need_input_grad);
        ready(l.bias, l.bias.offset);  // After the last read of the weights, as above.
        ready(l.weight, l.weight.offset);
        break;
      case LayerKind::kMaxPool2d: {
        if (!need_input_grad) break;
        std::fill(grad_in_.begin(), grad_in_.end(), S(0));
        const std::vector<int32_t>& argmax = pool_argmax_[i];
        for (int64_t s = 0; s < n; ++s) {
          for (int64_t o = 0; o < out_size; ++o) {
            grad_in_[s * in_size + argmax[s * out_size + o]] += grad_out_[s * out_size + o];
          }
        }
        break;
      }
      case LayerKind::kRelu:
        for (int64_t j = 0; j < n * out_size; ++j) grad_in_[j] = y[j] > 0 ? grad_out_[j] : S(0);
        break;
      case LayerKind::kTanh:
        for (int64_t j = 0; j < n * out_size; ++j)
          grad_in_[j] = grad_out_[j] * (S(1) - y[j] * y[j]);
        break;
      case LayerKind::kFlatten:
        std::copy(grad_out_.begin(), grad_out_.begin() + n * out_size, grad_in_.begin());
        break;
      case LayerKind::kDropout:
        if (dropout == nullptr) {
          std::copy(grad_out_.begin(), grad_out_.begin() + n * out_size, grad_in_.begin());
        } else {
          const AlignedVector<S>& scale = dropout_scale_[i];
          for (int64_t j = 0; j < n * out_size; ++j) grad_in_[j] = grad_out_[j] * scale[j];
        }
        break;
    }
    std::swap(grad_out_, grad_in_);
  }
  return stats;
}

template class CpuExecutor<float>;
template class CpuExecutor<double>;

}  // namespace tributary::engine
