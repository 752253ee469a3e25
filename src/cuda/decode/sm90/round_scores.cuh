// S = Q K^T of one tile in the round decode (round_kernel.cuh): 36 wgmma m64n64k16 over the 576
// dims in the k-order of the other forms (chunks 0-3, the rope chunk 8, chunks 4-7: the order is
// part of the bits), each chunk issued as soon as its own mbarrier says it has landed. Q's
// chunks 0-7 come from shared memory; its rope chunk from the thread's registers (RS), whose
// shared-memory area then holds P of tile B.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90::rounds {

// Q's rope chunk as this thread's wgmma A fragments, [k-step 32 + ks][register]: register i holds
// row 16 warp + lane / 4 + 8 (i & 1), dims 8 (i >> 1) + 2 (lane & 3) + {0, 1} of the k-step's 16.
using RopeFragment = std::uint32_t[4][4];

__device__ __forceinline__ void load_rope_fragment(const RoundSmem& sm, int warp, int lane,
                                                   RopeFragment& a) {
  const int row0 = 16 * warp + (lane >> 2), quad = lane & 3;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = row0 + 8 * (i & 1), dim = 16 * ks + 8 * (i >> 1) + 2 * quad;
      const std::uint32_t at =
          8 * kChunkBytes + hopper::swizzled_offset(row, dim >> 3) + (dim & 7) * 2;
      a[ks][i] = *reinterpret_cast<const std::uint32_t*>(sm.q_bytes + at);
    }
  }
}

// Issues S of tile `index` into s (one commit group; Q and K in f16 where kF16); the caller waits
// for it.
template <bool kF16>
__device__ __forceinline__ void issue_scores(const RoundSmem& sm, int index,
                                             const RopeFragment& rope, float (&s)[32]) {
  const int stage = index & 1;
  const std::uint32_t parity = std::uint32_t(index >> 1) & 1u;
  const std::uint64_t desc_q = hopper::smem_descriptor(sm.q, 16, 1024);
  const std::uint64_t desc_k = hopper::smem_descriptor(sm.stage(index), 16, 1024);
  auto off = [](int ks) { return std::uint32_t(((ks >> 2) * kChunkBytes + (ks & 3) * 32) >> 4); };
  auto ss = [&](int ks, bool accumulate) {
    if constexpr (kF16) {
      hopper::wgmma_m64n64k16_ss_f16(s, desc_q + off(ks), desc_k + off(ks), accumulate);
    } else {
      hopper::wgmma_m64n64k16_ss(s, desc_q + off(ks), desc_k + off(ks), accumulate);
    }
  };
  // Chunk c: its landing, then a fence (ptxas would otherwise add one after the wait, C7519).
  auto land = [&](int c) {
    hopper::mbarrier_wait(sm.full_bar(stage, c), parity);
    hopper::wgmma_fence();
  };
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    land(c);
#pragma unroll
    for (int ks = 4 * c; ks < 4 * c + 4; ++ks) {
      ss(ks, ks > 0);
    }
  }
  land(8);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    if constexpr (kF16) {
      hopper::wgmma_m64n64k16_rs_f16(s, rope[ks], desc_k + off(32 + ks), true);
    } else {
      hopper::wgmma_m64n64k16_rs(s, rope[ks], desc_k + off(32 + ks), true);
    }
#pragma unroll
  for (int c = 4; c < 8; ++c) {
    land(c);
#pragma unroll
    for (int ks = 4 * c; ks < 4 * c + 4; ++ks) {
      ss(ks, true);
    }
  }
  hopper::wgmma_commit();
}

}  // namespace dcpmla::cuda::sm90::rounds
