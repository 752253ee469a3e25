// The random case generator of the property tests: thousands of DCP + speculative-decoding
// batches drawn from a seed, shared by the CPU suite (tests/testing/property_test.cc) and the GPU
// one (tests/cuda/property_test.cc), so both run exactly the same cases.
//
// Reproducing a failure: the message prints the case index; draw_case(kBaseSeed + index) gives
// back the exact ScenarioSpec and RunOptions (the printed ones), deterministic on one platform.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "testing/test_support.h"

namespace dcpmla::testing {

constexpr std::uint64_t kBaseSeed = 0x5EED2024;
constexpr int kSmallShards = 20;
constexpr int kCasesPerShard = 100;  // 2000 small cases in all
constexpr int kFullSizeCases = 4;

struct PropertyCase {
  testing::ScenarioSpec spec;
  testing::RunOptions options;
};

// Plain modulo draws (not std::uniform_int_distribution) so a seed means the same case with
// every standard library.
inline int pick(std::mt19937_64& rng, int n) {
  return int(rng() % std::uint64_t(n));
}
template <class T, std::size_t N>
T pick_of(std::mt19937_64& rng, const T (&choices)[N]) {
  return choices[rng() % N];
}

inline PropertyCase draw_case(std::uint64_t seed, bool full_size) {
  std::mt19937_64 rng(seed);
  PropertyCase c;
  auto& s = c.spec;
  s.seed = seed;
  // Heads first, then a world size dividing them: the DCP combine splits the gathered heads
  // into W groups of H / W (ag_rs reduce-scatter and a2a both), so H must be a multiple of W.
  if (full_size) {
    s.heads = 128;
  } else {
    const int r = pick(rng, 100);
    s.heads = r < 28 ? 1 : r < 94 ? 16 : r < 98 ? 96 : 128;
  }
  std::vector<int> worlds;
  for (int w : {1, 2, 3, 4, 8}) {
    if (s.heads % w == 0) worlds.push_back(w);
  }
  s.world = worlds[rng() % worlds.size()];
  const int block_sizes[] = {1, 16, 64};
  s.block_size = pick_of(rng, block_sizes);
  const int interleaves[] = {1, 2, 4};
  s.interleave = pick_of(rng, interleaves);
  if (s.block_size % s.interleave != 0) s.interleave = 1;  // I must divide the block size
  s.max_drafts = pick(rng, 8);                             // Q in 1..8, ragged per request
  if (full_size) {
    s.requests = 3;
    s.max_drafts = 7;
    s.max_context = 4000 + pick(rng, 1001);
  } else if (s.heads >= 96) {
    // many heads: keep the (double-precision, single-threaded) reference cheap
    s.requests = 1 + pick(rng, 2);
    s.max_drafts = pick(rng, 4);
    s.max_context = s.max_drafts + 1 + pick(rng, 32);
  } else {
    s.requests = 1 + pick(rng, 4);
    // T log-uniform-ish: the last request gets max_context, others are drawn below it
    const double hi = std::log(300.0), lo = std::log(double(s.max_drafts + 1));
    s.max_context = std::max<std::int64_t>(
        s.max_drafts + 1, std::int64_t(std::exp(lo + (hi - lo) * double(pick(rng, 1000)) / 999)));
  }
  s.short_request = pick(rng, 3) != 0;  // request 0 with T < W + Q: rows empty on some ranks
  const int mask_kind = pick(rng, 20);
  s.full_mask_fraction = mask_kind < 10 ? 0.0 : mask_kind < 17 ? 0.3 : 1.0;
  s.padding_rows = pick(rng, 10) < 3 ? 1 + pick(rng, 3) : 0;
  s.extra_blocks = pick(rng, 4);
  const DType kv_dtypes[] = {DType::f32, DType::bf16, DType::fp8_e4m3};
  s.kv_dtype = pick_of(rng, kv_dtypes);
  s.q_dtype = pick(rng, 10) < 7 ? DType::bf16 : DType::f32;
  const float k_scales[] = {0.0625f, 0.04f, 0.125f};
  s.k_scale = pick_of(rng, k_scales);
  const float scales[] = {0.1352338f, 0.0721688f, 0.2f};
  s.softmax_scale = pick_of(rng, scales);

  auto& o = c.options;
  o.combine = pick(rng, 2) ? Combine::a2a : Combine::ag_rs;
  // random split policies so that split-KV merges run often: a fixed chunk, and a device model
  // with few workers and short splits (contexts here are <= 300 tokens) whose cost model splits
  // (else the backend's own model). Tiles of 64 pairs: the CUDA backend runs no other size.
  if (pick(rng, 2)) o.kv_chunk_blocks = 1 + pick(rng, 4);
  if (pick(rng, 2)) o.model = DeviceModel{1 + pick(rng, 16), 64, 16 * (1 + pick(rng, 4))};
  // A quarter of the causal cases plan on the backend (Schedule::plan_on_device).
  o.device_plan = pick(rng, 4) == 0 && s.full_mask_fraction == 0.0;
  o.flatten = pick(rng, 10) == 0;
  // Half the a2a cases ship the bf16 payload (decided by the seed, not drawn, so the other knobs
  // of a case do not depend on it).
  if (o.combine == Combine::a2a && (seed & 1)) o.combine_payload = DType::bf16;
  o.poison = true;
  return c;
}

inline std::string repro(std::uint64_t index, const PropertyCase& c) {
  return "case " + std::to_string(index) + " (draw_case(kBaseSeed + " + std::to_string(index) +
         ")): " + describe(c.spec) + " " + describe(c.options);
}

}  // namespace dcpmla::testing
