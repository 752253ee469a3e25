// The online-softmax step of the sm90 decode, one function per operation, shared by the wide and
// the narrow tiles: each pair's bits are then the same in both forms by construction.
#pragma once

#include <cmath>

#include "cuda/decode/sm90/config.h"
#include "cuda/kernels.h"

namespace dcpmla::cuda::sm90 {

#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/tc_emulation.h) defines it
// 2^x (MUFU, about 2 ulp; 2^-inf = 0; denormal results flush to 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
#endif  // !DCPMLA_EMULATE

// Scores are kept raw; exp2 takes them times this.
__device__ __forceinline__ float score_scale_log2(const DecodeParams& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  return p.score_scale * kLog2e;
}

// A pair's running max (log2 units of the scaled scores) after a tile whose own max is tile_max:
// raised only when the tile exceeds it by more than kRescaleSlack (config.h); the first finite
// max is always taken.
__device__ __forceinline__ float running_max(float m, float tile_max) {
  const float raised = fmaxf(m, tile_max);
  return raised > m + kRescaleSlack ? raised : m;
}

// After a tile whose largest raw score of the pair is tile_max: raises the running max m and
// returns the factor that rescales the pair's O and exp-sum; m_use is what P subtracts (0 while
// m is -inf, so masked scores stay -inf and exp2 gives 0).
__device__ __forceinline__ float softmax_step(float& m, float tile_max, float scale_log2,
                                              float& m_use) {
  const float m_new = running_max(m, tile_max * scale_log2);
  const float factor = m_new == -INFINITY ? 1.0f : exp2f(m - m_new);
  m = m_new;
  m_use = m_new == -INFINITY ? 0.0f : m_new;
  return factor;
}

// P = exp2(S * scale_log2 - m) of one raw score.
__device__ __forceinline__ float softmax_p(float s, float scale_log2, float m_use) {
  return fast_exp2(fmaf(s, scale_log2, -m_use));
}

// The exp-sum after a tile: the previous one rescaled, plus the tile's.
__device__ __forceinline__ float rescaled_sum(float l, float factor, float tile_sum) {
  return fmaf(l, factor, tile_sum);
}

// A row's exp-sum from the four lanes of a quad (each holds keys 8 j + 2 quad + {0, 1}), added
// as (l0 + l1) + (l2 + l3).
__device__ __forceinline__ float quad_sum(float l) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  return l;
}

// The natural-log LSE of a pair from its final running max m (log2 units, scaled scores) and
// exp-sum l: -inf for a pair that saw no key (l = 0; a pair that saw one has l >= 1), NaN when a
// score was not finite (l is NaN).
__device__ __forceinline__ float pair_lse(float m, float l) {
  constexpr float kLn2 = 0.6931471805599453f;
  return l == 0.0f ? -INFINITY : (m + log2f(l)) * kLn2;
}

// A score the mask keeps but that is -inf (an infinite query or key element) would weigh 0 and
// hide the corrupted key: as NaN it poisons the pair's exp-sum and P (SPEC section 5).
__device__ __forceinline__ float read_score(float s) {
  return s == -INFINITY ? NAN : s;
}

}  // namespace dcpmla::cuda::sm90
