// Counter-based random numbers: every value is a pure function of (seed, stream,
// counters), so initial parameters and dropout masks come out identical on every
// party, on CPU and GPU, however the work is split across replicas and threads.
#ifndef TRIBUTARY_WORKER_ENGINE_COUNTER_RNG_H_
#define TRIBUTARY_WORKER_ENGINE_COUNTER_RNG_H_

#include <cstdint>

#if defined(__CUDACC__)
#define TRIBUTARY_HOST_DEVICE __host__ __device__
#else
#define TRIBUTARY_HOST_DEVICE
#endif

namespace tributary::engine {

// Independent streams of the one job seed. Changing a value changes every run that
// uses the stream: these numbers are part of the reproducibility contract.
enum RngStream : uint64_t {
  kInitStream = 0x1a17,       // Initial parameters: counter = flat element index.
  kDropoutStream = 0xd209,    // Dropout masks: counters = step, sample, layer, element.
  kShuffleStream = 0x5f1e,    // Epoch permutations of the training set.
  kSyntheticStream = 0x5e7d,  // SYNTHETIC datasets.
};

// SplitMix64's finaliser: a bijective 64-bit mix with full avalanche.
TRIBUTARY_HOST_DEVICE inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

TRIBUTARY_HOST_DEVICE inline uint64_t HashCombine(uint64_t h, uint64_t value) {
  return Mix64(h ^ Mix64(value));
}

// Uniform in [0, 1) with 53 random bits: exact in double on every IEEE platform.
TRIBUTARY_HOST_DEVICE inline double UnitInterval(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// Uniform in [0, 1) with 24 random bits, exact in float: used on the hot dropout path.
TRIBUTARY_HOST_DEVICE inline float UnitIntervalFloat(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

// Whether dropout keeps element `element` of the activations that dropout layer
// `layer` (0-based among the model's dropout layers) sees for dataset sample
// `sample` at training step `step`. Depends on nothing replica-local.
TRIBUTARY_HOST_DEVICE inline bool DropoutKeeps(uint64_t seed, uint64_t step, uint64_t sample,
                                               uint32_t layer, uint64_t element, float p) {
  uint64_t h = HashCombine(seed, kDropoutStream);
  h = HashCombine(h, step);
  h = HashCombine(h, sample);
  h = HashCombine(h, layer);
  h = HashCombine(h, element);
  return UnitIntervalFloat(h) >= p;
}

// A sequential generator over the same mix, for shuffles and synthetic data.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream, uint64_t key = 0)
      : base_(HashCombine(HashCombine(seed, stream), key)) {}

  uint64_t Next() { return Mix64(base_ ^ Mix64(counter_++)); }
  double NextDouble() { return UnitInterval(Next()); }
  // Uniform in [0, n); n > 0. The modulo bias is below 2^-40 for n < 2^24.
  uint64_t NextBelow(uint64_t n) { return Next() % n; }

 private:
  uint64_t base_;
  uint64_t counter_ = 0;
};

}  // namespace tributary::engine

#endif  // TRIBUTARY_WORKER_ENGINE_COUNTER_RNG_H_
