// The block layout the warp-specialised decode (kernel.cuh) and its narrow tiles
// (narrow_tile.cuh) share: three warpgroups, their named barriers, and the shared memory
// of one thread block.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/tile_common.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90 {

constexpr int kThreads = 384;
constexpr int kPReady = 1, kPFree = 2;  // named barriers
constexpr int kLoaded = 3;              // kLoaded + og: an output warpgroup's copies landed
constexpr int kOIssued = 5;             // output -> scores: P.V of tile i is issued (o_first)
constexpr int kScoresReduce = 6;        // the scores warpgroup alone (narrow tiles' reductions)
constexpr int kPvFirstDone = 7;         // output warpgroup 0 -> 1 (full fp8 tiles): its P.V is done

constexpr std::uint32_t kOffQ = 0;
constexpr std::uint32_t kOffKv = kOffQ + kTileBytes;
constexpr std::uint32_t kOffP = kOffKv + 2 * kTileBytes;
constexpr std::uint32_t kOffFactor = kOffP + kPairs * 128u;      // float [64]
constexpr std::uint32_t kOffFinal = kOffFactor + kPairs * 4u;    // float [2][64]: m, l
constexpr std::uint32_t kOffFull = kOffFinal + 2 * kPairs * 4u;  // uint64 [stage][output wg]
constexpr std::uint32_t kUsedBytes = kOffFull + 4 * 8u;
constexpr std::uint32_t kSmemBytes = kUsedBytes + 1024;  // aligned up to 1024 inside
static_assert(kSmemBytes <= 227u * 1024u, "sm_90 allows 227 KiB of shared memory per block");

// The thread's warpgroup as a value ptxas knows is the same in every lane of a warp (lane 0's,
// shuffled). With `threadIdx.x >> 7` ptxas treats the warpgroups' branches as divergent, and it
// schedules the wgmma code inside them worse (docs/design/decode-kernel.md); it also keeps a
// wgmma group in flight across a branch from being serialised (C7520).
__device__ __forceinline__ int warp_uniform_warpgroup() {
  return __shfl_sync(0xffffffffu, int(threadIdx.x) >> 7, 0);
}

// A thread block's shared memory: shared addresses for the operands and barriers, pointers for
// what threads read and write directly.
struct BlockSmem {
  std::uint32_t q, kv, p, full;
  float* factors;          // [64] per-pair rescale factor of the tile in P
  float* final_m;          // [64]
  float* final_l;          // [64]
  unsigned char* q_bytes;  // the Q tile (narrow tiles keep scratch in rows they never read)

  __device__ __forceinline__ explicit BlockSmem(unsigned char* smem)
      : q(smem_addr(smem) + kOffQ),
        kv(smem_addr(smem) + kOffKv),
        p(smem_addr(smem) + kOffP),
        full(smem_addr(smem) + kOffFull),
        factors(reinterpret_cast<float*>(smem + kOffFactor)),
        final_m(reinterpret_cast<float*>(smem + kOffFinal)),
        final_l(reinterpret_cast<float*>(smem + kOffFinal) + kPairs),
        q_bytes(smem + kOffQ) {}
  // Stage s's mbarrier for the copies of output warpgroup g (one arrival a phase, plus the bytes
  // of bulk copies; phase k completes when tile 2 k + s has landed).
  __device__ __forceinline__ std::uint32_t full_bar(int stage, int g) const {
    return full + std::uint32_t(2 * stage + g) * 8u;
  }
  __device__ __forceinline__ std::uint32_t stage(int tile_index) const {
    return kv + std::uint32_t(tile_index & 1) * kTileBytes;
  }
};

// Issues S of tile `tile_index` (step(ks, off) issues the wgmma of k-step ks, off = the
// descriptor offset of its 16 dims in a Q or KV tile): the chunks output warpgroup 0 loads (0-3
// and 8) as soon as they have landed, then those of output warpgroup 1 (4-7); one commit group.
template <class Step>
__device__ __forceinline__ void issue_scores_as_chunks_land(const BlockSmem& sm, int tile_index,
                                                            Step step) {
  const int stage = tile_index & 1;
  const std::uint32_t parity = std::uint32_t(tile_index >> 1) & 1u;
  auto at = [&](int ks) {
    step(ks, std::uint32_t(((ks >> 2) * kChunkBytes + (ks & 3) * 32) >> 4));
  };
  hopper::mbarrier_wait(sm.full_bar(stage, 0), parity);
  hopper::fence_proxy_async_shared();
  hopper::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 16; ++ks) at(ks);
#pragma unroll
  for (int ks = 32; ks < 36; ++ks) at(ks);
  hopper::mbarrier_wait(sm.full_bar(stage, 1), parity);
  hopper::fence_proxy_async_shared();
  // The wgmmas after the wait's loop need their accumulators fenced; without this ptxas injects
  // the fence itself (C7519).
  hopper::wgmma_fence();
#pragma unroll
  for (int ks = 16; ks < 32; ++ks) at(ks);
  hopper::wgmma_commit();
}

}  // namespace dcpmla::cuda::sm90
