// The softmax of one tile in the round decode (round_kernel.cuh), and the hand-off of each row's
// running max m and exp-sum shares l from one tile's owner to the next. The arithmetic is the
// scores warpgroup's of kernel.cuh, operation for operation and in the same order (softmax.cuh's
// functions), so a pair's bits are those of the warp-specialised and narrow forms.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/decode/sm90/softmax.cuh"

namespace dcpmla::cuda::sm90::rounds {

// A thread's view of its two rows (rows[r] = 16 warp + lane / 4 + 8 r): the running max m (log2
// units of the scaled scores, the same in a quad's four lanes) and its share l of the exp-sum
// (keys 8 j + 2 quad + {0, 1}).
struct RowState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
};

// The tile at local token t0 (raw scores s, masked here on tiles past a row's limit lim):
// advances st, gives the factor that rescales O and P = exp2(s * scale_log2 - m) as bf16 pairs
// (packed[j][r]: row r, keys 8 j + 2 quad + {0, 1}).
__device__ __forceinline__ void tile_softmax(float (&s)[32], int t0, const int (&lim)[2], int quad,
                                             float scale_log2, RowState& st, float (&factor)[2],
                                             std::uint32_t (&packed)[8][2]) {
  // A -inf score the mask keeps poisons its row (read_score in masked tiles, the minimum in the
  // others), as in kernel.cuh.
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
    factor[r] = softmax_step(st.m[r], mx[r], scale_log2, m_use[r]);
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
      packed[j][r] = pack_bf16x2(p0, p1);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = rescaled_sum(st.l[r], factor[r], sum[r]);
}

// The factor softmax_step gave when the running max went from m_old to m_new: the other
// warpgroup's O half is rescaled by the same bits.
__device__ __forceinline__ float factor_between(float m_old, float m_new) {
  return m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);
}

// P of the thread's rows into the 64 x 64 bf16 tile at p (128-byte swizzled).
__device__ __forceinline__ void store_p(std::uint32_t p, const int (&rows)[2], int quad,
                                        const std::uint32_t (&packed)[8][2]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      st_shared4(p + hopper::swizzled_offset(rows[r], j) + 4 * quad, packed[j][r]);
    }
  }
}

// The thread's m and l shares after its tile into shared memory. Each thread rewrites only its
// own l slot, but m[row] is read by the quad's four lanes: the warp syncs before lane 0 of a quad
// overwrites what the others may still read of the previous tile's m.
__device__ __forceinline__ void publish_rows(const RoundSmem& sm, const int (&rows)[2], int quad,
                                             const RowState& st) {
  __syncwarp();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (quad == 0) sm.m[rows[r]] = st.m[r];
    sm.l[4 * rows[r] + quad] = st.l[r];
  }
}

// The other warpgroup's m and l shares after its tile (it published them before the named
// barrier the caller has passed).
__device__ __forceinline__ void read_rows(const RoundSmem& sm, const int (&rows)[2], int quad,
                                          RowState& st) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.m[r] = sm.m[rows[r]];
    st.l[r] = sm.l[4 * rows[r] + quad];
  }
}

}  // namespace dcpmla::cuda::sm90::rounds
