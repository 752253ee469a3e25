// The block layout of the round decode (round_kernel.cuh): two consumer warpgroups, their named
// barriers, and the shared memory of one thread block.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/tile_common.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90::rounds {

constexpr int kThreads = 256;  // warpgroup 0 (C0): even tiles, O_L; warpgroup 1 (C1): odd, O_R

// Named barriers of both warpgroups (256 threads): one side arrives, the other waits.
constexpr int kAReady = 1;    // C0 -> C1: P of tile A is in pbuf0, its m and l in m / l
constexpr int kBReady = 2;    // C1 -> C0: the same for tile B (pbuf1)
constexpr int kArIssued = 3;  // C1 -> C0: P_A V_R is issued (P_B V_L queues behind it)
constexpr int kBlIssued = 4;  // C0 -> C1: P_B V_L is issued (P_B V_R queues behind it)
constexpr int kZeroed = 5;    // + warpgroup, its 128 threads: a partial tile's tail is zero

// Q's chunks 0-7 (64 KiB), then the area of its rope chunk 8, which holds P of tile B once the
// threads have read the rope chunk into registers (S's k-steps 32-35 take Q from there).
constexpr std::uint32_t kOffQ = 0;
constexpr std::uint32_t kOffP1 = kOffQ + 8 * kChunkBytes;
constexpr std::uint32_t kOffKv = kOffQ + kTileBytes;       // 2 stages of 9 chunks
constexpr std::uint32_t kOffP0 = kOffKv + 2 * kTileBytes;  // P of tile A, 64 x 64 bf16
constexpr std::uint32_t kOffM = kOffP0 + kPairs * 128u;    // float [64]: m after a tile
constexpr std::uint32_t kOffL = kOffM + kPairs * 4u;       // float [64][4]: l shares (quads)
constexpr std::uint32_t kOffFull = kOffL + kPairs * 16u;   // uint64 [2 stages][9 chunks]
constexpr std::uint32_t kUsedBytes = kOffFull + 2u * kChunks * 8u;
// Diagnostic stamps (Variant 2): uint32 [kStampRounds][2 warpgroups][12].
constexpr int kStampRounds = 5, kStampFirstRound = 8;
constexpr std::uint32_t kOffStamps = kUsedBytes;
constexpr std::uint32_t kSmemBytes = kUsedBytes + kStampRounds * 24 * 4 + 1024;  // aligned up to 1024 inside
static_assert(kSmemBytes <= 227u * 1024u, "sm_90 allows 227 KiB of shared memory per block");
static_assert(kChunks == 9, "8 latent chunks and the rope chunk");

// A thread block's shared memory: shared addresses for the MMA operands and barriers, pointers
// for what threads read and write directly.
struct RoundSmem {
  std::uint32_t q, kv, p0, p1, full;
  const unsigned char* q_bytes;
  float* m;  // [64]
  float* l;  // [64][4]

  __device__ __forceinline__ explicit RoundSmem(unsigned char* smem)
      : q(smem_addr(smem) + kOffQ),
        kv(smem_addr(smem) + kOffKv),
        p0(smem_addr(smem) + kOffP0),
        p1(smem_addr(smem) + kOffP1),
        full(smem_addr(smem) + kOffFull),
        q_bytes(smem + kOffQ),
        m(reinterpret_cast<float*>(smem + kOffM)),
        l(reinterpret_cast<float*>(smem + kOffL)) {}
  // Chunk c of stage s has landed (count 1 and the chunk's bytes; phase k: tile 2 k + s).
  __device__ __forceinline__ std::uint32_t full_bar(int stage, int c) const {
    return full + std::uint32_t(kChunks * stage + c) * 8u;
  }
  __device__ __forceinline__ std::uint32_t stage(int tile_index) const {
    return kv + std::uint32_t(tile_index & 1) * kTileBytes;
  }
};

}  // namespace dcpmla::cuda::sm90::rounds
