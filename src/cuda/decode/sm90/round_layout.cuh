// The block layout of the round decode (round_kernel.cuh): two consumer warpgroups and a
// producer warpgroup, their barriers, and the shared memory of one thread block.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/tile_common.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90::rounds {

// Warpgroup 0 (C0): even tiles, O_L; warpgroup 1 (C1): odd tiles, O_R; warpgroup 2: the
// producer, whose thread 0 issues every box (a box's issue waits while the copy engine is busy,
// ~150 cycles a box, which stalled a consumer's whole chain). For a bf16 cache its other threads
// only exit; for an fp8 cache its warps 1-3 widen each chunk's e4m3 bytes to f16 in place
// (round_widening.cuh).
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 128;
// Registers a thread after the split (setmaxnreg). The launch gives each thread 168 (65536 / 384,
// down to a multiple of 8), and the consumers can claim only what the producer has released:
// 2 (consumer - 168) <= 168 - producer. The fp8 wideners spilled at 40 (ptxas), so fp8 takes 8
// registers from each consumer.
constexpr int kLaunchRegisters = 168;
template <Cache C>
constexpr int kConsumerRegisters = C == Cache::bf16 ? 232 : 224;
template <Cache C>
constexpr int kProducerRegisters = C == Cache::bf16 ? 40 : 56;
static_assert(2 * kConsumerRegisters<Cache::bf16> + kProducerRegisters<Cache::bf16> <=
                  3 * kLaunchRegisters &&
              2 * kConsumerRegisters<Cache::fp8> + kProducerRegisters<Cache::fp8> <=
                  3 * kLaunchRegisters);

// Named barriers of the consumers (256 threads): one side arrives, the other waits.
constexpr int kAReady = 1;     // C0 -> C1: P of tile A is in pbuf0, its m and l in m / l
constexpr int kBReady = 2;     // C1 -> C0: the same for tile B (pbuf1)
constexpr int kArIssued = 3;   // C1 -> C0: P_A V_R is issued (P_B V_L queues behind it)
constexpr int kBlIssued = 4;   // C0 -> C1: P_B V_L is issued (P_B V_R queues behind it)
constexpr int kZeroed = 5;     // + warpgroup, its 128 threads: a partial tile's tail is zero
constexpr int kQLoaded = 7;    // both consumers: Q is in shared memory
constexpr int kFinalRows = 8;  // both consumers: the last tile's m and l are in shared memory
constexpr int kQScaled = 9;    // both consumers, fp8: every warp's largest |q| is in m's slots
// The fp8 wideners: warps 1-3 of the producer warpgroup.
constexpr int kWideners = 96;

// The chunk groups of a stage that the consumers free for the producer's refill, each by the
// last warpgroup that reads it: the rope chunk by the tile's owner once S is done, chunks 0-3 by
// C0 and chunks 4-7 by C1 once their P.V of the tile is done.
enum ChunkGroup { kRopeGroup = 0, kLowGroup = 1, kHighGroup = 2, kGroups = 3 };

// Q's chunks 0-7 (64 KiB), then the area of its rope chunk 8, which holds P of tile B once the
// threads have read the rope chunk into registers (S's k-steps 32-35 take Q from there).
constexpr std::uint32_t kOffQ = 0;
constexpr std::uint32_t kOffP1 = kOffQ + 8 * kChunkBytes;
constexpr std::uint32_t kOffKv = kOffQ + kTileBytes;       // 2 stages of 9 chunks
constexpr std::uint32_t kOffP0 = kOffKv + 2 * kTileBytes;  // P of tile A, 64 x 64 bf16 (f16: fp8)
constexpr std::uint32_t kOffM = kOffP0 + kPairs * 128u;    // float [64]: m after a tile
constexpr std::uint32_t kOffL = kOffM + kPairs * 4u;       // float [64][4]: l shares (quads)
constexpr std::uint32_t kOffFull = kOffL + kPairs * 16u;   // uint64 [2 stages][9 chunks]
constexpr std::uint32_t kOffEmpty = kOffFull + 2u * kChunks * 8u;    // uint64 [2 stages][3 groups]
constexpr std::uint32_t kOffStaged = kOffEmpty + 2u * kGroups * 8u;  // uint64 [2 stages][9 chunks]
constexpr std::uint32_t kOffQFull = kOffStaged + 2u * kChunks * 8u;  // uint64: Q's boxes landed
constexpr std::uint32_t kOffOutside = kOffQFull + 8u;                // int [2 stages][3 groups]
constexpr std::uint32_t kUsedBytes = kOffOutside + 2u * kGroups * 4u;
constexpr std::uint32_t kSmemBytes = kUsedBytes + 1024;  // aligned up to 1024 inside
static_assert(kSmemBytes <= 227u * 1024u, "sm_90 allows 227 KiB of shared memory per block");
static_assert(kChunks == 9, "8 latent chunks and the rope chunk");

// A thread block's shared memory: shared addresses for the MMA operands and barriers, pointers
// for what threads read and write directly.
struct RoundSmem {
  // q_full: the query's 9 boxes have landed (query_by_boxes, round_loads.cuh; count 1 and 72 KiB,
  // one phase).
  std::uint32_t q, kv, p0, p1, full, empty, staged, q_full;
  const unsigned char* q_bytes;
  float* m;      // [64]
  float* l;      // [64][4]
  int* outside;  // [2 stages][3 groups]

  __device__ __forceinline__ explicit RoundSmem(unsigned char* smem)
      : q(smem_addr(smem) + kOffQ),
        kv(smem_addr(smem) + kOffKv),
        p0(smem_addr(smem) + kOffP0),
        p1(smem_addr(smem) + kOffP1),
        full(smem_addr(smem) + kOffFull),
        empty(smem_addr(smem) + kOffEmpty),
        staged(smem_addr(smem) + kOffStaged),
        q_full(smem_addr(smem) + kOffQFull),
        q_bytes(smem + kOffQ),
        m(reinterpret_cast<float*>(smem + kOffM)),
        l(reinterpret_cast<float*>(smem + kOffL)),
        outside(reinterpret_cast<int*>(smem + kOffOutside)) {}
  // Chunk c of stage s has landed (count 1 and the chunk's bytes; phase k: tile 2 k + s).
  __device__ __forceinline__ std::uint32_t full_bar(int stage, int c) const {
    return full + std::uint32_t(kChunks * stage + c) * 8u;
  }
  // fp8: the e4m3 bytes of chunk c of stage s have landed in its upper half (count 1 and 4 KiB;
  // phase k: tile 2 k + s), for the wideners; the chunk's full barrier follows their widening.
  __device__ __forceinline__ std::uint32_t staged_bar(int stage, int c) const {
    return staged + std::uint32_t(kChunks * stage + c) * 8u;
  }
  // Group g of stage s is free (count 1: phase k once tile 2 k + s is done with it).
  __device__ __forceinline__ std::uint32_t empty_bar(int stage, ChunkGroup g) const {
    return empty + std::uint32_t(kGroups * stage + g) * 8u;
  }
  // fp8: whether group g of stage s holds a page outside the cache (its boxes read zeros), set by
  // the producer before the group's boxes, so that a widener that has waited for a chunk's
  // staged barrier reads it without the block ids (rewritten only once the group is freed).
  __device__ __forceinline__ int& outside_group(int stage, ChunkGroup g) const {
    return outside[kGroups * stage + g];
  }
  __device__ __forceinline__ std::uint32_t stage(int tile_index) const {
    return kv + std::uint32_t(tile_index & 1) * kTileBytes;
  }
};

}  // namespace dcpmla::cuda::sm90::rounds
