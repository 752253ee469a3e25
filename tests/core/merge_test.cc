// The merge algebra of SPEC section 5: LseAccumulator, weight, merge_partials, OnlineSoftmax.
#include "dcpmla/merge.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace dcpmla {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

auto identity = [](float x) { return x; };

// Merges two 2-wide partials stored back to back.
float merge2(std::vector<float> o, std::vector<float> lse, float out[2]) {
  return merge::merge_partials(2, o.data(), 2, lse.data(), 1, 2, out, identity);
}

TEST(Merge, SpecVectorTwoPartials) {
  float out[2];
  const float L = merge2({1, 0, 0, 1}, {std::log(3.0f), 0.0f}, out);
  EXPECT_NEAR(out[0], 0.75f, 1e-6f);
  EXPECT_NEAR(out[1], 0.25f, 1e-6f);
  EXPECT_NEAR(L, std::log(4.0f), 1e-6f);
}

TEST(Merge, SpecVectorEmptySecondPartialNeverLeaks) {
  float out[2];
  const float L = merge2({1, 0, 123, kNaN}, {std::log(3.0f), -kInf}, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_FLOAT_EQ(L, std::log(3.0f));
  // order does not matter
  const float L2 = merge2({123, kNaN, 1, 0}, {-kInf, std::log(3.0f)}, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_FLOAT_EQ(L2, std::log(3.0f));
}

TEST(Merge, SpecVectorBothEmpty) {
  float out[2] = {7, 7};
  const float L = merge2({kNaN, 5, kInf, -1}, {-kInf, -kInf}, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::isinf(L) && L < 0);
}

TEST(Merge, SpecVectorNanPartialPoisonsTheMerge) {
  float out[2];
  const float L = merge2({1, 0, 0, 1}, {std::log(3.0f), kNaN}, out);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_TRUE(std::isnan(L));
}

// NaN and +inf LSE come only from non-finite inputs: never dropped, whatever the other partials
// and the order; an empty partial beside them stays skipped (its payload is not read).
TEST(Merge, NanAndPositiveInfLsePropagate) {
  for (float bad : {kNaN, kInf}) {
    float out[2];
    const float L = merge2({1, 0, 5, 9}, {std::log(3.0f), bad}, out);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1])) << "bad lse " << bad;
    EXPECT_TRUE(std::isnan(L)) << "bad lse " << bad;
    const float L2 = merge2({5, 9, 4, 2}, {bad, 0.5f}, out);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
    EXPECT_TRUE(std::isnan(L2));
    const float L3 = merge2({5, 9, kNaN, kNaN}, {bad, -kInf}, out);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
    EXPECT_TRUE(std::isnan(L3));
    const float L4 = merge2({5, 9, 4, 2}, {bad, bad}, out);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(L4));
  }
  EXPECT_TRUE(merge::poisoned_lse(kNaN));
  EXPECT_TRUE(merge::poisoned_lse(kInf));
  EXPECT_FALSE(merge::poisoned_lse(-kInf));
  EXPECT_FALSE(merge::poisoned_lse(-3.5f));
  EXPECT_FALSE(merge::poisoned_lse(1e30f));
}

TEST(Merge, StridesAndStore) {
  // 3 partials of dim 3 with o_stride 5 and lse_stride 2; store doubles the output
  const std::vector<float> o = {1, 2, 3, -1, -1, 4, 5, 6, -1, -1, 7, 8, 9};
  const std::vector<float> lse = {0.0f, -1.0f, 0.0f, -1.0f, std::log(2.0f)};
  double out[3];
  const float L =
      merge::merge_partials(3, o.data(), 5, lse.data(), 2, 3, out, [](float x) { return 2.0 * x; });
  EXPECT_NEAR(L, std::log(4.0f), 1e-6);
  EXPECT_NEAR(out[0], 2.0 * (0.25 * 1 + 0.25 * 4 + 0.5 * 7), 1e-5);
  EXPECT_NEAR(out[1], 2.0 * (0.25 * 2 + 0.25 * 5 + 0.5 * 8), 1e-5);
  EXPECT_NEAR(out[2], 2.0 * (0.25 * 3 + 0.25 * 6 + 0.5 * 9), 1e-5);
}

TEST(LseAccumulator, MatchesLogSumExpInDouble) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 20.0);
  for (int iter = 0; iter < 500; ++iter) {
    const int n = 1 + int(rng() % 12);
    std::vector<float> l(n);
    for (auto& x : l) x = float(normal(rng));
    if (rng() % 3 == 0) l[rng() % n] = -kInf;
    merge::LseAccumulator acc;
    double mx = -INFINITY;
    for (float x : l) {
      acc.add(x);
      mx = std::max(mx, double(x));
    }
    if (mx == -INFINITY) {
      EXPECT_TRUE(std::isinf(acc.lse()) && acc.lse() < 0);
      continue;
    }
    double s = 0;
    for (float x : l) s += std::exp(double(x) - mx);
    const double want = mx + std::log(s);
    EXPECT_NEAR(acc.lse(), want, 1e-5 * std::max(1.0, std::abs(want)));
  }
}

TEST(LseAccumulator, EmptyAndSpecialValues) {
  merge::LseAccumulator empty;
  EXPECT_TRUE(std::isinf(empty.lse()) && empty.lse() < 0);
  merge::LseAccumulator only_empty;
  only_empty.add(-kInf);
  only_empty.add(-kInf);
  EXPECT_TRUE(std::isinf(only_empty.lse()) && only_empty.lse() < 0);
  // A poisoned term is sticky, before or after finite and empty ones.
  for (float bad : {kNaN, kInf}) {
    merge::LseAccumulator late;
    late.add(-kInf);
    late.add(2.5f);
    late.add(bad);
    late.add(1.0f);
    EXPECT_TRUE(std::isnan(late.lse())) << bad;
    merge::LseAccumulator early;
    early.add(bad);
    early.add(-kInf);
    early.add(7.0f);
    EXPECT_TRUE(std::isnan(early.lse())) << bad;
  }
  merge::LseAccumulator one;
  one.add(-kInf);
  one.add(2.5f);
  EXPECT_EQ(one.lse(), 2.5f);
  // large values do not overflow: ln(e^1000 + e^1000) = 1000 + ln 2
  merge::LseAccumulator big;
  big.add(1000.0f);
  big.add(1000.0f);
  EXPECT_NEAR(big.lse(), 1000.0f + std::log(2.0f), 1e-3);
  merge::LseAccumulator tiny;
  tiny.add(-1000.0f);
  tiny.add(-1000.0f);
  EXPECT_NEAR(tiny.lse(), -1000.0f + std::log(2.0f), 1e-3);
}

TEST(LseAccumulator, OrderIndependentUpToRounding) {
  std::mt19937_64 rng(8);
  std::normal_distribution<float> normal(0.0f, 5.0f);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<float> l(1 + rng() % 10);
    for (auto& x : l) x = normal(rng);
    merge::LseAccumulator a, b;
    for (float x : l) a.add(x);
    for (auto it = l.rbegin(); it != l.rend(); ++it) b.add(*it);
    EXPECT_NEAR(a.lse(), b.lse(), 1e-5f * std::max(1.0f, std::abs(a.lse())));
  }
}

TEST(Weight, EmptyPartialsWeighZeroAndWeightsSumToOne) {
  EXPECT_EQ(merge::weight(-kInf, 1.0f), 0.0f);
  EXPECT_TRUE(std::isnan(merge::weight(kNaN, 1.0f)));
  EXPECT_TRUE(std::isnan(merge::weight(1.0f, kNaN)));
  EXPECT_EQ(merge::weight(-kInf, kNaN), 0.0f);
  EXPECT_EQ(merge::weight(1.0f, -kInf), 0.0f);
  EXPECT_EQ(merge::weight(2.0f, 2.0f), 1.0f);
  std::mt19937_64 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<float> l(1 + rng() % 8);
    for (auto& x : l) x = normal(rng);
    merge::LseAccumulator acc;
    for (float x : l) acc.add(x);
    double sum = 0;
    for (float x : l) {
      const float w = merge::weight(x, acc.lse());
      EXPECT_GE(w, 0.0f);
      EXPECT_LE(w, 1.0f + 1e-6f);
      sum += w;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// Merging a partition hierarchically (pairs first) equals merging flat, and equals attention
// over the union computed directly.
TEST(Merge, HierarchicalEqualsFlatEqualsDirect) {
  std::mt19937_64 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kDim = 4;
  for (int iter = 0; iter < 100; ++iter) {
    const int keys = 1 + int(rng() % 40);
    std::vector<float> score(keys), value(std::size_t(keys) * kDim);
    for (auto& s : score) s = 3.0f * normal(rng);
    for (auto& v : value) v = normal(rng);
    // direct attention in double
    double mx = -INFINITY, sum = 0;
    for (float s : score) mx = std::max(mx, double(s));
    std::vector<double> direct(kDim, 0.0);
    for (int k = 0; k < keys; ++k) sum += std::exp(score[k] - mx);
    for (int k = 0; k < keys; ++k) {
      for (int d = 0; d < kDim; ++d) {
        direct[d] += std::exp(score[k] - mx) / sum * value[std::size_t(k) * kDim + d];
      }
    }
    const double direct_lse = mx + std::log(sum);
    // 4 partials over a random partition (some may be empty)
    constexpr int kParts = 4;
    std::vector<int> part(keys);
    for (auto& p : part) p = int(rng() % kParts);
    std::vector<float> po(kParts * kDim, kNaN), pl(kParts, -kInf);
    for (int p = 0; p < kParts; ++p) {
      double m = -INFINITY, s = 0;
      for (int k = 0; k < keys; ++k) {
        if (part[k] == p) m = std::max(m, double(score[k]));
      }
      if (m == -INFINITY) continue;  // empty: payload stays NaN
      std::vector<double> o(kDim, 0.0);
      for (int k = 0; k < keys; ++k) {
        if (part[k] == p) s += std::exp(score[k] - m);
      }
      for (int k = 0; k < keys; ++k) {
        if (part[k] != p) continue;
        for (int d = 0; d < kDim; ++d) {
          o[d] += std::exp(score[k] - m) / s * value[std::size_t(k) * kDim + d];
        }
      }
      for (int d = 0; d < kDim; ++d) po[p * kDim + d] = float(o[d]);
      pl[p] = float(m + std::log(s));
    }
    float flat[kDim];
    const float flat_lse =
        merge::merge_partials(kParts, po.data(), kDim, pl.data(), 1, kDim, flat, identity);
    float pair[2 * kDim];
    float pair_lse[2];
    pair_lse[0] = merge::merge_partials(2, po.data(), kDim, pl.data(), 1, kDim, pair, identity);
    pair_lse[1] = merge::merge_partials(2, po.data() + 2 * kDim, kDim, pl.data() + 2, 1, kDim,
                                        pair + kDim, identity);
    float hier[kDim];
    const float hier_lse = merge::merge_partials(2, pair, kDim, pair_lse, 1, kDim, hier, identity);
    EXPECT_NEAR(flat_lse, direct_lse, 1e-4 * std::max(1.0, std::abs(direct_lse)));
    EXPECT_NEAR(hier_lse, flat_lse, 1e-4 * std::max(1.0f, std::abs(flat_lse)));
    for (int d = 0; d < kDim; ++d) {
      ASSERT_FALSE(std::isnan(flat[d]));
      EXPECT_NEAR(flat[d], direct[d], 1e-5);
      EXPECT_NEAR(hier[d], flat[d], 1e-5);
    }
  }
}

// Streams keys through OnlineSoftmax in tiles, the way the decode kernels do.
TEST(OnlineSoftmax, TiledStreamingEqualsDirectSoftmax) {
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr int kDim = 3;
  for (int iter = 0; iter < 200; ++iter) {
    const int keys = int(rng() % 60);
    const int tile = 1 + int(rng() % 9);
    std::vector<float> score(keys), value(std::size_t(keys) * kDim);
    for (auto& s : score) s = 4.0f * normal(rng);
    for (auto& v : value) v = normal(rng);
    merge::OnlineSoftmax st;
    float acc[kDim] = {0, 0, 0};
    for (int t0 = 0; t0 < keys; t0 += tile) {
      const int t1 = std::min(keys, t0 + tile);
      float tile_max = -kInf;
      for (int k = t0; k < t1; ++k) tile_max = std::max(tile_max, score[k]);
      const float factor = st.rescale_for(tile_max);
      EXPECT_GE(factor, 0.0f);
      EXPECT_LE(factor, 1.0f);
      for (float& a : acc) a *= factor;
      for (int k = t0; k < t1; ++k) {
        const float p = std::exp(score[k] - st.m);
        st.s += p;
        for (int d = 0; d < kDim; ++d) acc[d] += p * value[std::size_t(k) * kDim + d];
      }
    }
    if (keys == 0) {
      EXPECT_TRUE(st.empty());
      EXPECT_TRUE(std::isinf(st.lse()) && st.lse() < 0);
      EXPECT_EQ(st.inv_sum(), 0.0f);
      continue;
    }
    double mx = -INFINITY, sum = 0;
    for (float s : score) mx = std::max(mx, double(s));
    for (float s : score) sum += std::exp(s - mx);
    EXPECT_FALSE(st.empty());
    EXPECT_NEAR(st.lse(), mx + std::log(sum), 1e-4 * std::max(1.0, std::abs(mx)));
    EXPECT_EQ(st.m, float(mx));
    for (int d = 0; d < kDim; ++d) {
      double want = 0;
      for (int k = 0; k < keys; ++k) {
        want += std::exp(score[k] - mx) / sum * value[std::size_t(k) * kDim + d];
      }
      EXPECT_NEAR(acc[d] * st.inv_sum(), want, 1e-5);
    }
  }
}

TEST(OnlineSoftmax, RescaleFactors) {
  merge::OnlineSoftmax st;
  EXPECT_EQ(st.rescale_for(2.0f), 0.0f);  // first tile: the empty accumulator is dropped
  EXPECT_EQ(st.m, 2.0f);
  st.s = 1.0f;
  EXPECT_EQ(st.rescale_for(1.0f), 1.0f);  // lower max: nothing changes
  EXPECT_EQ(st.rescale_for(2.0f), 1.0f);
  EXPECT_EQ(st.m, 2.0f);
  EXPECT_FLOAT_EQ(st.rescale_for(3.0f), std::exp(-1.0f));
  EXPECT_FLOAT_EQ(st.s, std::exp(-1.0f));
  EXPECT_EQ(st.m, 3.0f);
  EXPECT_FLOAT_EQ(st.lse(), 3.0f + std::log(std::exp(-1.0f)));
  EXPECT_FLOAT_EQ(st.inv_sum(), std::exp(1.0f));
}

TEST(OnlineSoftmax, NanScorePoisonsLseAndOutput) {
  merge::OnlineSoftmax st;
  st.rescale_for(1.0f);
  st.s += std::exp(1.0f - st.m);
  st.s += std::exp(kNaN - st.m);
  EXPECT_FALSE(st.empty());
  EXPECT_TRUE(std::isnan(st.lse()));
  EXPECT_TRUE(std::isnan(st.inv_sum()));
}

}  // namespace
}  // namespace dcpmla
