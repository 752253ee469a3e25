// An output warpgroup's half of O (64 pairs x 256 dims, fp32 in its registers: rows[r] in
// o[4 j + 2 r + {0, 1}], dims 8 j + 2 quad): its lazy rescale and its P.V, shared by the
// warp-specialised form (kernel.cuh) and the round decode (round_kernel.cuh).
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/tile_common.cuh"

namespace dcpmla::cuda::sm90 {

// O times the factors of the thread's two rows, unless every row of the warp keeps its scale
// (x 1 changes no bits).
__device__ __forceinline__ void rescale_o(float (&o)[128], float f0, float f1) {
  if (__any_sync(0xffffffffu, f0 != 1.0f || f1 != 1.0f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j + 0] *= f0;
      o[4 * j + 1] *= f0;
      o[4 * j + 2] *= f1;
      o[4 * j + 3] *= f1;
    }
  }
  hopper::pin_registers(o);
}

// O += P V for the half og (V chunks 4 og .. 4 og + 3 of the KV stage at `stage`), P the 64 x 64
// bf16 tile at p (P and V in f16 where kF16): 4 wgmma m64n256k16, V read transposed; one commit
// group.
template <bool kF16 = false>
__device__ __forceinline__ void issue_pv(float (&o)[128], std::uint32_t p, std::uint32_t stage,
                                         int og) {
  const std::uint64_t desc_p = hopper::smem_descriptor(p, 16, 1024);
  const std::uint64_t desc_v =
      hopper::smem_descriptor(stage + og * 4 * kChunkBytes, kChunkBytes, 1024);
  hopper::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kKeys / 16; ++ks) {
    if constexpr (kF16) {
      hopper::wgmma_m64n256k16_ss_tb_f16(o, desc_p + ks * 2, desc_v + ks * (16 * 128 >> 4), true);
    } else {
      hopper::wgmma_m64n256k16_ss_tb(o, desc_p + ks * 2, desc_v + ks * (16 * 128 >> 4), true);
    }
  }
  hopper::wgmma_commit();
}

}  // namespace dcpmla::cuda::sm90
