// The start of a warp-specialised decode block (kernel.cuh, and the narrow tiles the round decode
// hands to that form): its mbarriers, the tile's query and the first KV tiles' loads.
#pragma once

#include "cuda/decode/sm90/refill.cuh"
#include "cuda/decode/sm90/smem_layout.cuh"
#include "cuda/decode/sm90/tile_loader.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90 {

// The warp-specialised block's start, by all its threads (tid, its warpgroup wg and its index
// wt in it): its mbarriers, Q, and (the output warpgroups, wg > 0) the loads of the item's first
// tiles; ends at a block-wide barrier.
template <Cache C, bool Bulk>
__device__ __forceinline__ void start_block(const DecodeParams& p, const DecodeTile& tile,
                                            const BlockSmem& sm, int tid, int wg, int wt, int n) {
  if (tid == 0) {
    for (int i = 0; i < 4; ++i) hopper::mbarrier_init(sm.full + 8u * i, 1);
  }
  __syncthreads();
  if (n > 0) {
    load_q<kThreads>(p, tile, sm.q, tid);
    if (wg > 0) {
      const OutputLoader<C> ld(wt, wg - 1, kLoaded + wg - 1);
      OutputRefill<C, Bulk, true>(p, tile, sm, ld, n).prologue();
    }
    hopper::cp_async_wait_all();
    hopper::fence_proxy_async_shared();
  }
  __syncthreads();
}

}  // namespace dcpmla::cuda::sm90
