// The softmax hand-offs of the round decode (round_kernel.cuh): P into its buffer, and each
// row's running max m and exp-sum shares l from one tile's owner to the next. The tile's own
// softmax is wide_softmax.cuh's, the warp-specialised form's, so a pair's bits are those of the
// warp-specialised and narrow forms.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/decode/sm90/softmax.cuh"
#include "cuda/decode/sm90/wide_softmax.cuh"

namespace dcpmla::cuda::sm90::rounds {

// A thread's view of its two rows (rows[r] = 16 warp + lane / 4 + 8 r): the running max m (log2
// units of the scaled scores, the same in a quad's four lanes) and its share l of the exp-sum
// (keys 8 j + 2 quad + {0, 1}).
struct RowState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
};

// The factor softmax_step gave when the running max went from m_old to m_new: the other
// warpgroup's O half is rescaled by the same bits.
__device__ __forceinline__ float factor_between(float m_old, float m_new) {
  return m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);
}

// P of the thread's rows into the 64 x 64 tile at p (bf16; f16 for an fp8 cache), 128-byte
// swizzled.
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
