// The benchmarks' random numbers: splitmix64, fast, seedable and the same on every machine, so a
// benchmark's batch and data depend only on its seed.
#pragma once

#include <cstdint>

namespace dcpmla::bench {

class SplitMixRng {
 public:
  explicit SplitMixRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform() { return float(next() >> 40) * 0x1p-23f - 1.0f; }
  // Uniform integer in [lo, hi].
  std::int64_t range(std::int64_t lo, std::int64_t hi) {
    return lo + std::int64_t(next() % std::uint64_t(hi - lo + 1));
  }

 private:
  std::uint64_t state_;
};

}  // namespace dcpmla::bench
