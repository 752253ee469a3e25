// What the parts of the sm90 decode share: the tile geometry (64 (row, head) pairs against
// 64-token KV tiles, 128-byte-swizzled 64-column chunks), shared-memory access helpers, named
// barriers, and the load of a tile's query.
#pragma once

#include <cstdint>

#include "cuda/decode/decode_tile.cuh"
#include "cuda/device_common.cuh"
#include "cuda/hopper/cp_async.cuh"
#include "cuda/hopper/wgmma.cuh"
#include "cuda/kernels.h"
#include "cuda/output_rows.cuh"

namespace dcpmla::cuda {
namespace sm90 {

constexpr int kPairs = 64;  // == kTilePairs
constexpr int kKeys = 64;   // tokens per KV tile, == kTileKeys
constexpr int kChunks = kHeadDim / 64;
constexpr std::uint32_t kChunkBytes = 64u * 128u;  // 64 rows of 64 bf16
constexpr std::uint32_t kTileBytes = kChunks * kChunkBytes;
// fp8 caches: a chunk's e4m3 bytes (64 tokens x 64 bytes) are staged in the upper half of its
// bf16 area and widened in place; four e4m3 NaNs, which stand for a page outside the cache.
constexpr std::uint32_t kStagedFp8 = kChunkBytes / 2;
constexpr std::uint32_t kFp8NanWord = 0x7f7f7f7fu;
static_assert(kPairs == kTilePairs && kKeys == kTileKeys && kHeadDim % 64 == 0 &&
              kLatentDim == 512);

enum class Cache { bf16, fp8 };

#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/tc_emulation.h) defines these
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void st_shared16(std::uint32_t dst, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 ld_shared16(std::uint32_t src) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(src)
               : "memory");
  return v;
}
__device__ __forceinline__ void st_shared2(std::uint32_t dst, std::uint16_t v) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(dst), "h"(v) : "memory");
}
__device__ __forceinline__ void st_shared4(std::uint32_t dst, std::uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(dst), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared8(std::uint32_t dst, uint2 v) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(dst), "r"(v.x), "r"(v.y) : "memory");
}
#endif  // !DCPMLA_EMULATE

// Q of the tile's pairs (contiguous in q, bf16) -> the swizzled Q tile at s_q, zeros past
// num_pairs; asynchronous copies, complete after hopper::cp_async_wait_all().
template <int Threads>
__device__ __forceinline__ void load_q(const DecodeParams& p, const DecodeTile& tile,
                                       std::uint32_t s_q, int tid) {
  constexpr int kUnits = kHeadDim * 2 / 16;  // 72 per row
  const auto* q = static_cast<const unsigned char*>(p.q);
  for (int u = tid; u < kPairs * kUnits; u += Threads) {
    const int r = u / kUnits, rem = u - r * kUnits;
    const std::uint32_t dst = s_q + (rem >> 3) * kChunkBytes + hopper::swizzled_offset(r, rem & 7);
    if (r < tile.num_pairs) {
      // 32-bit division: a tile's pairs lie in a few rows of H heads.
      const int pair = tile.pair_begin + r, j = pair / p.num_heads;
      const std::int64_t slot = grouped_slot(tile.row_begin + j, pair - j * p.num_heads,
                                             p.num_heads, p.q_group_heads, p.q_rows);
      hopper::cp_async16_line(dst, q + slot * (kHeadDim * 2) + rem * 16);
    } else {
      st_shared16(dst, make_uint4(0u, 0u, 0u, 0u));
    }
  }
}

// The thread block's dynamic shared memory (the host emulation hands out its own buffer).
#if defined(DCPMLA_EMULATE)
#define DCPMLA_DYNAMIC_SMEM(name) unsigned char* name = emulated_shared_memory()
#else
#define DCPMLA_DYNAMIC_SMEM(name) extern __shared__ __align__(1024) unsigned char name[]
#endif

// The 1024-byte-aligned start of the dynamic shared memory (the swizzle atoms need it).
__device__ __forceinline__ unsigned char* aligned_smem(unsigned char* raw) {
  const std::uint32_t a = smem_addr(raw);
  return raw + ((1024u - (a & 1023u)) & 1023u);
}

#if !defined(DCPMLA_EMULATE)
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
#endif  // !DCPMLA_EMULATE

}  // namespace sm90
}  // namespace dcpmla::cuda
