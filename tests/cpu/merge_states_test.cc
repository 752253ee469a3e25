// Backend::merge_states on the CPU backend against a double-precision log-sum-exp merge: empty
// states skipped (their payload never read), empty pairs O = 0 / L = -inf, a NaN L poisoning its
// pair, base-2 LSE, bf16 payloads; and its argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "dcpmla/backend.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/numeric.h"

namespace dcpmla {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// out [N * H, D] and lse [N * H] of the merge of v [S, N * H, D] / s [S, N * H] in double.
void reference_merge(int S, int pairs, int D, const std::vector<float>& v,
                     const std::vector<float>& s, std::vector<double>& out,
                     std::vector<double>& lse) {
  out.assign(std::size_t(pairs) * D, 0.0);
  lse.assign(std::size_t(pairs), -INFINITY);
  for (int i = 0; i < pairs; ++i) {
    double peak = -INFINITY;
    for (int r = 0; r < S; ++r) peak = std::max(peak, double(s[r * pairs + i]));
    if (peak == -INFINITY) continue;
    double total = 0.0;
    for (int r = 0; r < S; ++r) total += std::exp(double(s[r * pairs + i]) - peak);
    lse[i] = peak + std::log(total);
    for (int r = 0; r < S; ++r) {
      const double w = std::exp(double(s[r * pairs + i]) - lse[i]);
      if (w == 0.0) continue;
      for (int d = 0; d < D; ++d) out[i * D + d] += w * v[(r * pairs + i) * D + d];
    }
  }
}

struct States {
  int S, N, H, D;
  std::vector<float> v, s;
};

States random_states(int S, int N, int H, int D, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  States st{S,
            N,
            H,
            D,
            std::vector<float>(std::size_t(S) * N * H * D),
            std::vector<float>(std::size_t(S) * N * H)};
  for (float& x : st.v) x = normal(rng);
  for (float& x : st.s) x = 3.0f * normal(rng);
  const int pairs = N * H;
  st.s[0] = -kInf;  // state 0 of pair 0 is empty: its NaN payload must not be read
  for (int d = 0; d < D; ++d) st.v[d] = NAN;
  for (int r = 0; r < S; ++r) st.s[r * pairs + 1] = -kInf;  // pair 1 has no state at all
  return st;
}

MergeStatesArgs args_of(States& st, std::vector<float>& out, std::vector<float>& lse) {
  out.assign(std::size_t(st.N) * st.H * st.D, 7.0f);
  lse.assign(std::size_t(st.N) * st.H, 7.0f);
  MergeStatesArgs a;
  a.v = TensorRef(st.v.data(), DType::f32, {st.S, st.N, st.H, st.D});
  a.s = TensorRef(st.s.data(), DType::f32, {st.S, st.N, st.H});
  a.v_out = TensorRef(out.data(), DType::f32, {st.N, st.H, st.D});
  a.s_out = TensorRef(lse.data(), DType::f32, {st.N, st.H});
  return a;
}

TEST(MergeStates, MatchesTheDoubleMergeAndSkipsEmptyStates) {
  auto backend = make_cpu_backend(2);
  for (const auto& [S, D] : {std::pair{2, 512}, std::pair{5, 96}, std::pair{1, 3}}) {
    States st = random_states(S, 3, 4, D, unsigned(S * 1000 + D));
    std::vector<float> out, lse;
    backend->merge_states(args_of(st, out, lse), nullptr);
    std::vector<double> want_out, want_lse;
    std::vector<float> payload = st.v;
    for (int d = 0; d < D; ++d) payload[d] = 0.0f;  // the reference multiplies it by 0
    reference_merge(S, 12, D, payload, st.s, want_out, want_lse);
    for (int i = 0; i < 12; ++i) {
      if (want_lse[i] == -INFINITY) {
        EXPECT_EQ(lse[i], -kInf) << "pair " << i;
      } else {
        EXPECT_NEAR(lse[i], want_lse[i], 1e-5 * std::abs(want_lse[i]) + 1e-6) << "pair " << i;
      }
      for (int d = 0; d < D; ++d) {
        ASSERT_NEAR(out[i * D + d], want_out[i * D + d], 1e-5) << "pair " << i << " dim " << d;
      }
    }
    for (int d = 0; d < D; ++d) EXPECT_EQ(out[D + d], 0.0f);  // pair 1: O = 0
  }
}

TEST(MergeStates, Base2LseIsMergedAsNaturalLogTimesLn2) {
  auto backend = make_cpu_backend(1);
  States st = random_states(3, 2, 2, 16, 7);
  std::vector<float> out_e, lse_e, out_2, lse_2;
  backend->merge_states(args_of(st, out_e, lse_e), nullptr);
  States base2 = st;
  for (float& x : base2.s) x *= std::numbers::log2e_v<float>;
  MergeStatesArgs a = args_of(base2, out_2, lse_2);
  a.lse_base_e = false;
  backend->merge_states(a, nullptr);
  for (std::size_t i = 0; i < lse_e.size(); ++i) {
    if (lse_e[i] == -kInf) {
      EXPECT_EQ(lse_2[i], -kInf);
    } else {
      EXPECT_NEAR(lse_2[i], lse_e[i] * std::numbers::log2e, 1e-5);
    }
  }
  for (std::size_t i = 0; i < out_e.size(); ++i) EXPECT_NEAR(out_2[i], out_e[i], 1e-5);
}

TEST(MergeStates, NaNLsePoisonsItsPairOnly) {
  auto backend = make_cpu_backend(1);
  States st = random_states(2, 1, 3, 8, 11);
  st.s[1 * 3 + 2] = NAN;  // state 1 of pair 2
  std::vector<float> out, lse;
  backend->merge_states(args_of(st, out, lse), nullptr);
  EXPECT_TRUE(std::isnan(lse[2]));
  for (int d = 0; d < 8; ++d) EXPECT_TRUE(std::isnan(out[2 * 8 + d]));
  EXPECT_TRUE(std::isfinite(lse[0]));
}

TEST(MergeStates, Bf16PayloadAndOutput) {
  auto backend = make_cpu_backend(2);
  States st = random_states(3, 2, 2, 32, 5);
  std::vector<std::uint16_t> v16(st.v.size()), out16(std::size_t(2 * 2 * 32));
  for (std::size_t i = 0; i < st.v.size(); ++i) v16[i] = float_to_bf16(st.v[i]);
  std::vector<float> out, lse;
  MergeStatesArgs a = args_of(st, out, lse);
  backend->merge_states(a, nullptr);
  a.v = TensorRef(v16.data(), DType::bf16, {3, 2, 2, 32});
  a.v_out = TensorRef(out16.data(), DType::bf16, {2, 2, 32});
  std::vector<float> lse16(lse.size());
  a.s_out = TensorRef(lse16.data(), DType::f32, {2, 2});
  backend->merge_states(a, nullptr);
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(bf16_to_float(out16[i]), out[i], 2e-2 * (1.0f + std::abs(out[i])));
  }
  EXPECT_EQ(lse16, lse);
}

TEST(MergeStates, RefusesInconsistentArguments) {
  auto backend = make_cpu_backend(1);
  States st = random_states(2, 2, 2, 8, 3);
  std::vector<float> out, lse;
  const auto expect_error = [&](MergeStatesArgs a, const char* argument, ErrorCode code) {
    try {
      backend->merge_states(a, nullptr);
      ADD_FAILURE() << "accepted bad " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument);
      EXPECT_EQ(e.code(), code);
    }
  };
  MergeStatesArgs a = args_of(st, out, lse);
  a.s.shape = {2, 2, 3};
  expect_error(a, "s", ErrorCode::shape_mismatch);
  a = args_of(st, out, lse);
  a.v_out.dtype = DType::fp8_e4m3;
  expect_error(a, "v_out", ErrorCode::dtype_mismatch);
  a = args_of(st, out, lse);
  a.v.shape = {0, 2, 2, 8};
  a.s.shape = {0, 2, 2};
  expect_error(a, "v", ErrorCode::shape_mismatch);
  a = args_of(st, out, lse);
  a.s_out.dtype = DType::bf16;
  expect_error(a, "s_out", ErrorCode::dtype_mismatch);
}

}  // namespace
}  // namespace dcpmla
