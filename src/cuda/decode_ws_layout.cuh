// The block layout the warp-specialised decode (decode_ws_kernel.cuh) and its narrow tiles
// (decode_narrow_tile.cuh) share: three warpgroups, their named barriers, and the shared memory
// of one thread block.
#pragma once

#include <cstdint>

#include "decode_tc_common.cuh"

namespace dcpmla::cuda::ws {

using namespace tc;

constexpr int kThreads = 384;
constexpr int kPReady = 1, kPFree = 2;  // named barriers
constexpr int kLoaded = 3;              // kLoaded + og: an output warpgroup's copies landed
constexpr int kOIssued = 5;             // output -> scores: P.V of tile i is issued (o_first)
constexpr int kScoresReduce = 6;        // the scores warpgroup alone (narrow tiles' reductions)

constexpr std::uint32_t kOffQ = 0;
constexpr std::uint32_t kOffKv = kOffQ + kTileBytes;
constexpr std::uint32_t kOffP = kOffKv + 2 * kTileBytes;
constexpr std::uint32_t kOffFactor = kOffP + kPairs * 128u;      // float [64]
constexpr std::uint32_t kOffFinal = kOffFactor + kPairs * 4u;    // float [2][64]: m, l
constexpr std::uint32_t kOffFull = kOffFinal + 2 * kPairs * 4u;  // uint64 [stage][output wg]
constexpr std::uint32_t kUsedBytes = kOffFull + 4 * 8u;
constexpr std::uint32_t kSmemBytes = kUsedBytes + 1024;  // aligned up to 1024 inside
static_assert(kSmemBytes <= 227u * 1024u, "sm_90 allows 227 KiB of shared memory per block");

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

}  // namespace dcpmla::cuda::ws
