// What the tensor-core decode kernels share: the tile geometry (64 (row, head) pairs against
// 64-token KV tiles, 128-byte-swizzled 64-column chunks), shared-memory access helpers, and the
// cache-row lookup of a token through the block table.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/device_common.cuh"
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
static_assert(kPairs == kTilePairs && kKeys == kTileKeys && kHeadDim % 64 == 0 &&
              kLatentDim == 512);

enum class Cache { bf16, fp8 };

constexpr std::int64_t kEntryNone = -1;     // past the tile's visible end: zeros, never read
constexpr std::int64_t kEntryInvalid = -2;  // block id outside the cache: NaN, never read

#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/tc_emulation.h) defines these
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
// The threads' 16-byte copies (fp8 cache bytes, the query, bf16 tiles not copied in bulk) ask L2
// for whole 128-byte lines: fp8 decodes 1-4.5 % faster (Kimi's H 96 rank 759 -> 730 us, ragged
// L 32K H 16 1168 -> 1125; median of three runs each, one H200, 2026-12-01); 256 bytes measured
// the same.
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
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
// Two floats -> two bf16 (round to nearest even, one instruction), lo in the low half.
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif  // !DCPMLA_EMULATE
// Two e4m3 values (low 16 bits, element 0 low) -> two bf16 in one word (exact: every e4m3 value
// is a bf16 value).
__device__ __forceinline__ std::uint32_t widen_fp8x2(std::uint32_t two) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3));
  const float2 f = __half22float2(h);
  return pack_bf16x2(f.x, f.y);
}
// A pair's running max (log2 units of the scaled scores) after a tile whose own max is
// tile_max: raised only when the tile exceeds it by more than 8, so P = exp2(s - m) stays <= 256
// (as exact in bf16, far from fp32 overflow) and most tiles of a long row leave O unscaled (the
// rescale sat on the chain between P and P.V: early tiles of random data ran 2.66 -> 2.30 us,
// phase stamps, 2026-12-01). The first finite max is always taken; the wide and narrow tiles
// share it, so both forms keep the same bits.
// DCPMLA_RESCALE_SLACK (8 by default; 0 rescales at every rise, as before session 10) is a build
// option for A/B measurements; P stays <= 2^slack.
#ifndef DCPMLA_RESCALE_SLACK
#define DCPMLA_RESCALE_SLACK 8.0f
#endif
__device__ __forceinline__ float running_max(float m, float tile_max) {
  const float raised = fmaxf(m, tile_max);
  return raised > m + (DCPMLA_RESCALE_SLACK) ? raised : m;
}
#if !defined(DCPMLA_EMULATE)
// 2^x (MUFU, about 2 ulp; 2^-inf = 0; denormal results flush to 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}
#endif  // !DCPMLA_EMULATE

// Cache row of local token t of `request`, or one of the markers above.
__device__ __forceinline__ std::int64_t cache_entry(const DecodeParams& p, int request, int t,
                                                    int visible_end) {
  if (t >= visible_end) return kEntryNone;
  const std::int64_t id = p.block_table[std::int64_t(request) * p.max_blocks + t / p.block_size];
  return (id >= 0 && id < p.num_blocks) ? id * p.block_size + t % p.block_size : kEntryInvalid;
}

// Q of the tile's pairs (contiguous in q, bf16) -> the swizzled Q tile at s_q, zeros past
// num_pairs; asynchronous copies, complete after cp_async_wait_all().
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
      cp_async16(dst, q + slot * (kHeadDim * 2) + rem * 16);
    } else {
      st_shared16(dst, make_uint4(0u, 0u, 0u, 0u));
    }
  }
}

// Item (row * H + head) of the tile's pair 0, in the fp32 partials (split work items) or in the
// final rows.
__device__ __forceinline__ std::int64_t first_output_item(const DecodeParams& p,
                                                          const DecodeTile& tile) {
  const std::int64_t row = tile.partial_row >= 0 ? tile.partial_row : tile.row_begin;
  return row * p.num_heads + tile.pair_begin;
}

// The natural-log LSE of a pair from its final running max m (log2 units, scaled scores) and
// exp-sum l: -inf for a pair that saw no key.
__device__ __forceinline__ float pair_lse(float m, float l) {
  constexpr float kLn2 = 0.6931471805599453f;
  return l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
}
// Writes accumulator row r (0 or 1) of a 64 x 256 wgmma fragment o, times scale, at element
// `at` (dim 2 quad of the thread's first column) of the partials or of the plain final rows:
// columns 8 j + {0, 1}.
__device__ __forceinline__ void store_output_row(const DecodeParams& p, bool partial,
                                                 std::int64_t at, const float (&o)[128], int r,
                                                 float scale) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float a = o[4 * j + 2 * r] * scale, b = o[4 * j + 2 * r + 1] * scale;
    if (partial) {
      *reinterpret_cast<float2*>(p.partial_out + at + 8 * j) = make_float2(a, b);
    } else if (p.final_rows.bf16) {
      *reinterpret_cast<std::uint32_t*>(static_cast<bf16_bits*>(p.final_rows.out) + at + 8 * j) =
          pack_bf16x2(a, b);
    } else {
      *reinterpret_cast<float2*>(static_cast<float*>(p.final_rows.out) + at + 8 * j) =
          make_float2(a, b);
    }
  }
}

// The same row into the packed a2a send rows (OutputRows with group_heads), from the element
// offset `at` of its slot's column: a separate function, so the partials' and plain rows' code
// stays as it was (mixing the packed stores into it slowed split decodes by ~10 us, session 7).
__device__ __forceinline__ void store_packed_row(const DecodeParams& p, std::int64_t at,
                                                 const float (&o)[128], int r, float scale) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    store_output2(p.final_rows, at + 8 * j, o[4 * j + 2 * r] * scale, o[4 * j + 2 * r + 1] * scale);
  }
}

// Exclusive local key limit of accumulator row `pair` of the tile (kv_begin: no key).
__device__ __forceinline__ int pair_key_limit(const DecodeParams& p, const DecodeTile& tile,
                                              int pair) {
  if (pair >= tile.num_pairs) return tile.kv_begin;
  const int row = tile.row_begin + (tile.pair_begin + pair) / p.num_heads;
  return max(tile.kv_begin, min(p.row_bound[row], tile.kv_end));
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
