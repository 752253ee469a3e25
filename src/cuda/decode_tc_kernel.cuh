// The decode kernel, v2: tensor cores (sm_90a warpgroup MMA) for a bf16 query against an fp8
// e4m3 latent cache. (bf16 caches run v3, decode_ws_kernel.cuh; v2's cp.async loader for them
// went with that switch, see commit 0bb1bbc.)
//
// One thread block (two warpgroups, 256 threads) per DecodeTile: up to 64 (row, head) pairs of one
// work item (pair = j * H + h) against the item's local KV range, walked in tiles of 64 tokens
// gathered through the block table. Shared memory (all 128-byte swizzled, see hopper/wgmma.cuh):
//
//   Q  [9 chunks][64 pairs][64 dims]   bf16, 72 KiB, loaded once
//   KV [2 stages][9 chunks][64 tokens][64 dims] bf16, 2 x 72 KiB ring (fp8 widened to bf16, exact)
//   P  [64 pairs][64 tokens] bf16, 8 KiB
//   a 64 x 2 float exchange area, and the gathered cache rows of each stage's 64 tokens
//
// Per KV tile: warpgroup g computes S_g = Q K[32g, 32g + 32)^T (64 x 32, 36 wgmma k-steps over
// the 576 dims), masks each pair by its own row bound, and the two warpgroups exchange row maxima
// so both apply the same running max m. Each writes its half of P = exp(S - m) (bf16) to shared
// memory; then warpgroup g accumulates O_g += P V[:, 256g, 256g + 256) (64 x 256 fp32 in
// registers, 4 wgmma k-steps; V is the first 512 dims of the same KV tile, read as a transposed
// operand). The next tile's loads (cp.async for bf16; global loads into registers, widened and
// stored while the P.V MMAs run, for fp8) are in flight during the current tile's MMAs.
//
// Each pair's result depends only on its own query, its own bound and the KV tiles (which start
// at kv_begin + multiples of 64): masked keys add exact zeros and a tile in which a pair sees no
// key leaves its running state unchanged. So the flattened and the native forms of a batch give
// the same bits for the same KV split.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "decode_tc_common.cuh"

namespace dcpmla::cuda {
namespace tc {

constexpr int kThreads = 256;

constexpr std::uint32_t kOffQ = 0;
constexpr std::uint32_t kOffKv = kOffQ + kTileBytes;
constexpr std::uint32_t kOffP = kOffKv + 2 * kTileBytes;
constexpr std::uint32_t kOffExchange = kOffP + kPairs * 128u;          // float [2][64]
constexpr std::uint32_t kOffEntries = kOffExchange + 2 * kPairs * 4u;  // int64 [2][64]
constexpr std::uint32_t kUsedBytes = kOffEntries + 2 * kKeys * 8u;
// The dynamic shared memory is aligned up to 1024 bytes inside the allocation.
constexpr std::uint32_t kSmemBytes = kUsedBytes + 1024;
static_assert(kSmemBytes <= 227u * 1024u, "sm_90 allows 227 KiB of shared memory per block");

// Fills one KV stage with the tokens whose cache rows are in `entries`.
template <Cache C>
struct KvLoader;

// fp8: 16-byte global loads into registers at issue(); widened to bf16 (exact: every e4m3 value
// is a bf16 value) and stored at finish(), which the kernel calls while MMAs run. Thread tid
// handles loads tid % 4 + 4 i (i < 9) of token tid / 4, each 16 values = dims [16 k, 16 k + 16).
template <>
struct KvLoader<Cache::fp8> {
  static constexpr int kLoadsPerToken = kHeadDim / 16;  // 36
  static constexpr int kThreadsPerToken = kThreads / kKeys;
  static constexpr int kPerThread = kLoadsPerToken / kThreadsPerToken;
  static_assert(kThreads % kKeys == 0 && kLoadsPerToken % kThreadsPerToken == 0);
  uint4 raw[kPerThread];

  __device__ __forceinline__ void issue(const void* cache, const std::int64_t* entries,
                                        std::uint32_t, int tid) {
    const int t = tid / kThreadsPerToken, first = tid % kThreadsPerToken;
    const std::int64_t e = entries[t];
    const auto* src = static_cast<const uint4*>(cache) + (e >= 0 ? e : 0) * kLoadsPerToken;
    const std::uint32_t fill = e == kEntryNone ? 0u : 0x7f7f7f7fu;  // zeros or e4m3 NaN
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      raw[i] =
          e >= 0 ? __ldg(src + first + kThreadsPerToken * i) : make_uint4(fill, fill, fill, fill);
    }
    static_assert(kThreadsPerToken == 4 && kPerThread == kChunks,
                  "finish() assumes load i in chunk i");
  }
  __device__ __forceinline__ void finish(std::uint32_t stage, int tid) {
    // Load i covers dims [16 k, 16 k + 16) with k = first + 4 i: chunk i, 16-byte units 2 first
    // and 2 first + 1.
    const int t = tid / kThreadsPerToken, first = tid % kThreadsPerToken;
    const std::uint32_t row = stage + t * 128u;
    const std::uint32_t lo = row + ((std::uint32_t(2 * first) ^ (t & 7)) << 4);
    const std::uint32_t hi = row + ((std::uint32_t(2 * first + 1) ^ (t & 7)) << 4);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const uint4 v = raw[i];
      st_shared16(lo + i * kChunkBytes, make_uint4(widen_fp8x2(v.x), widen_fp8x2(v.x >> 16),
                                                   widen_fp8x2(v.y), widen_fp8x2(v.y >> 16)));
      st_shared16(hi + i * kChunkBytes, make_uint4(widen_fp8x2(v.z), widen_fp8x2(v.z >> 16),
                                                   widen_fp8x2(v.w), widen_fp8x2(v.w >> 16)));
    }
  }
};

template <Cache C>
__global__ void __launch_bounds__(kThreads, 1) decode_tc_kernel(const DecodeParams p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = aligned_smem(smem_raw);
  const std::uint32_t s_q = smem_addr(smem) + kOffQ;
  const std::uint32_t s_kv = smem_addr(smem) + kOffKv;
  const std::uint32_t s_p = smem_addr(smem) + kOffP;
  float* exchange = reinterpret_cast<float*>(smem + kOffExchange);      // [2 warpgroups][64 pairs]
  auto* entries = reinterpret_cast<std::int64_t*>(smem + kOffEntries);  // [2 stages][64]

  // Launched for the plan buffer's capacity under a CUDA graph: blocks past the plan exit.
  if (p.header != nullptr && std::int64_t(blockIdx.x) >= p.header->num_tiles) return;
  const DecodeTile tile = p.tiles[blockIdx.x];
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, warp = (tid >> 5) & 3;
  const int quad = lane & 3;
  const int num_kv_tiles = (tile.kv_visible_end - tile.kv_begin + kKeys - 1) / kKeys;

  // The thread's two accumulator rows (pairs) and their exclusive local key limits.
  const int rows[2] = {16 * warp + (lane >> 2), 16 * warp + (lane >> 2) + 8};
  const int lim[2] = {pair_key_limit(p, tile, rows[0]), pair_key_limit(p, tile, rows[1])};

  KvLoader<C> loader;
  if (num_kv_tiles > 0) {
    load_q<kThreads>(p, tile, s_q, tid);
    if (tid < kKeys)
      entries[tid] = cache_entry(p, tile.request, tile.kv_begin + tid, tile.kv_visible_end);
    __syncthreads();
    loader.issue(p.cache, entries, s_kv, tid);
    loader.finish(s_kv, tid);
  }

  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.score_scale * kLog2e;
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of score * scale_log2
  float l[2] = {0.0f, 0.0f};            // this thread's share of the running exp-sum

  for (int it = 0; it < num_kv_tiles; ++it) {
    const int stage = it & 1;
    const int t0 = tile.kv_begin + it * kKeys;
    const bool has_next = it + 1 < num_kv_tiles;
    const std::uint32_t s_cur = s_kv + stage * kTileBytes;
    const std::uint32_t s_next = s_kv + (stage ^ 1) * kTileBytes;
    if (has_next && tid < kKeys) {
      entries[(stage ^ 1) * kKeys + tid] =
          cache_entry(p, tile.request, t0 + kKeys + tid, tile.kv_visible_end);
    }
    cp_async_wait_all();
    hopper::fence_proxy_async_shared();
    __syncthreads();  // this tile (and Q) visible to wgmma; the other stage free; entries ready
    if (has_next) loader.issue(p.cache, entries + (stage ^ 1) * kKeys, s_next, tid);

    // S = Q K^T for this warpgroup's 32 keys [32 wg, 32 wg + 32) of the tile.
    // Descriptors advance by (byte offset >> 4) in their address field.
    float s[16];
    const std::uint64_t desc_q = hopper::smem_descriptor(s_q, 16, 1024);
    const std::uint64_t desc_k = hopper::smem_descriptor(s_cur + wg * 4096, 16, 1024);
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      const std::uint32_t k_off = ((ks >> 2) * kChunkBytes + (ks & 3) * 32) >> 4;
      hopper::wgmma_m64n32k16_ss(s, desc_q + k_off, desc_k + k_off, ks > 0);
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::pin_registers(s);

    // Mask by each row's bound; the row max of this warpgroup's keys, shared with the other.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = t0 + 32 * wg + 8 * j + 2 * quad + e;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float& v = s[4 * j + 2 * i + e];
          v = key < lim[i] ? v * scale_log2 : -INFINITY;
          mx[i] = fmaxf(mx[i], v);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      if (quad == 0) exchange[wg * kPairs + rows[i]] = mx[i];
    }
    __syncthreads();
    float factor[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float m_new = fmaxf(m[i], fmaxf(exchange[rows[i]], exchange[kPairs + rows[i]]));
      factor[i] = m_new == -INFINITY ? 1.0f : exp2f(m[i] - m_new);
      m[i] = m_new;
    }
    // P = exp2(S - m): the fp32 values into the exp-sum (and so the LSE), bf16-rounded copies into
    // the shared P tile for the P.V MMAs.
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float pr[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v = s[4 * j + 2 * i + e];
          pr[e] = v == -INFINITY ? 0.0f : exp2f(v - m[i]);
          sum[i] += pr[e];
        }
        st_shared4(s_p + hopper::swizzled_offset(rows[i], 4 * wg + j) + 4 * quad,
                   pack_bf16x2(pr[0], pr[1]));
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l[i] = l[i] * factor[i] + sum[i];
    // Once the running max settles, most tiles leave it unchanged: skip the 128 multiplies.
    if (__any_sync(0xffffffffu, factor[0] != 1.0f || factor[1] != 1.0f)) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        o[4 * j + 0] *= factor[0];
        o[4 * j + 1] *= factor[0];
        o[4 * j + 2] *= factor[1];
        o[4 * j + 3] *= factor[1];
      }
    }
    hopper::pin_registers(o);
    hopper::fence_proxy_async_shared();
    __syncthreads();  // both halves of P written

    // O_g += P V[:, 256 g .. 256 g + 256): V rows are the tile's tokens, 4 chunks of 64 dims.
    const std::uint64_t desc_p = hopper::smem_descriptor(s_p, 16, 1024);
    const std::uint64_t desc_v =
        hopper::smem_descriptor(s_cur + wg * 4 * kChunkBytes, kChunkBytes, 1024);
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      hopper::wgmma_m64n256k16_ss_tb(o, desc_p + ks * 2, desc_v + ks * (16 * 128 >> 4), true);
    }
    hopper::wgmma_commit();
    if (has_next) loader.finish(s_next, tid);
    hopper::wgmma_wait<0>();
    hopper::pin_registers(o);
  }

  // Epilogue: the full exp-sum of each row (4 lanes x 2 warpgroups), normalise, write O and LSE.
  // Rows that saw no key have O = 0 exactly and LSE = -inf.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    if (quad == 0) exchange[wg * kPairs + rows[i]] = l[i];
  }
  __syncthreads();
  const bool partial = tile.partial_row >= 0;
  const std::int64_t first = first_output_row(p, tile);
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (rows[i] >= tile.num_pairs) continue;
    const float total = exchange[rows[i]] + exchange[kPairs + rows[i]];
    const float scale = total > 0.0f ? p.out_scale / total : 0.0f;
    const std::int64_t idx = first + rows[i];
    const std::int64_t at = idx * kLatentDim + 256 * wg + 2 * quad;
    store_output_row(p, partial, at, o, i, scale);
    if (wg == 0 && quad == 0) {
      const float lse = total > 0.0f ? (m[i] + log2f(total)) * kLn2 : -INFINITY;
      (partial ? p.partial_lse : p.lse)[idx] = lse;
    }
  }
}

}  // namespace tc
}  // namespace dcpmla::cuda
