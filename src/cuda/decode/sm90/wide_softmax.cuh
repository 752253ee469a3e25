// The online-softmax step of one wide tile (64 pairs x 64 keys, S in a warpgroup's m64n64
// accumulators) for a thread's two rows, shared by the warp-specialised form (kernel.cuh) and the
// round decode (round_softmax.cuh), so both give the same bits by construction.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/conversions.cuh"
#include "cuda/decode/sm90/softmax.cuh"
#include "cuda/decode/sm90/tile_common.cuh"

namespace dcpmla::cuda::sm90 {

// The tile at local token t0, raw scores s[4 j + 2 r + e] (row r of the thread, key
// 8 j + 2 quad + e): masks keys at or past each row's limit lim (only on tiles that reach past
// one: the last ones), raises each row's running max m (the row max over the quad's four lanes,
// on raw scores: the scale is positive), gives the factor that rescales O, P = exp2(s *
// scale_log2 - m) as bf16 pairs (f16 where kF16P: the round decode's fp8 cache; packed[j][r]),
// and adds the fp32 probabilities into the exp-sum
// share l. A -inf score the mask keeps poisons its row: read_score in masked tiles, the minimum
// (a -inf among the thread's scores makes its P NaN) in the others.
template <bool kF16P = false>
__device__ __forceinline__ void wide_tile_softmax(float (&s)[32], int t0, const int (&lim)[2],
                                                  int quad, float scale_log2, float (&m)[2],
                                                  float (&l)[2], float (&factor)[2],
                                                  std::uint32_t (&packed)[8][2]) {
  const bool masked = t0 + kKeys > min(lim[0], lim[1]);
  if (masked) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = t0 + 8 * j + 2 * quad + e;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float& v = s[4 * j + 2 * r + e];
          v = key >= lim[r] ? -INFINITY : read_score(v);
        }
      }
    }
  }
  float mx[2] = {-INFINITY, -INFINITY}, mn[2] = {INFINITY, INFINITY};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      mn[r] = fminf(mn[r], fminf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    }
  }
  float m_use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    factor[r] = softmax_step(m[r], mx[r], scale_log2, m_use[r]);
    if (!masked && mn[r] == -INFINITY) m_use[r] = NAN;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float p0 = softmax_p(s[4 * j + 2 * r], scale_log2, m_use[r]);
      const float p1 = softmax_p(s[4 * j + 2 * r + 1], scale_log2, m_use[r]);
      sum[r] += p0 + p1;
      packed[j][r] = kF16P ? pack_f16x2(p0, p1) : pack_bf16x2(p0, p1);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = rescaled_sum(l[r], factor[r], sum[r]);
}

}  // namespace dcpmla::cuda::sm90
