// The decode kernel, v3: warp-specialised tensor-core decode for a bf16 query and a bf16 cache.
//
// One thread block of three warpgroups per DecodeTile (64 (row, head) pairs of one work item),
// walking the item's KV in 64-token tiles through a 2-stage ring:
//
//   warpgroup 0 (scores):  S = Q K^T for all 64 keys (36 wgmma m64n64k16 over the 576 dims), the
//                          per-row mask, the running max m and exp-sum l, P = exp(S - m) in bf16
//                          and the per-row rescale factor, handed to the others in shared memory.
//   warpgroups 1 and 2:    O_L, O_R (64 x 256 fp32 each, dims [256 (g - 1), 256 g)): rescale,
//   (output)               O += P V (4 wgmma m64n256k16, V read as a transposed operand of the
//                          same KV tile), and the KV loads: after tile i's P.V, warpgroup 1 loads
//                          chunks 0-3 and 8 of tile i + 2 into the freed stage, warpgroup 2
//                          chunks 4-7, i.e. each overwrites only what it alone read.
//
// So S of tile i + 1 and its softmax run while the output warpgroups multiply P of tile i into V,
// and the tensor cores see the two streams interleaved. Hand-offs use named barriers, each used by
// all 384 threads (one side arrives, the other waits):
//   kPReady   scores -> output   P(i) and the factors of tile i are in shared memory
//   kPFree    output -> scores   P.V of tile i is done: P may be overwritten
//   kFull + s output -> scores   the loads into stage s have landed (tiles 2, 3, ...; tiles 0 and
//                                1 are loaded by everyone before the loop)
//
// Shared memory (128-byte swizzled, hopper/wgmma.cuh): Q 72 KiB, KV 2 x 72 KiB, P 8 KiB, and 64
// rescale factors plus the final m and l of each row. As in v2, each pair's result depends only on
// its own query, bound and the KV tiles, so the flattened and native forms give the same bits.
#pragma once

#include <cstdint>

#include "decode_tc_common.cuh"

namespace dcpmla::cuda {
namespace ws {

using namespace tc;

constexpr int kThreads = 384;
constexpr int kPReady = 1, kPFree = 2, kFull = 3;  // named barriers kFull, kFull + 1

constexpr std::uint32_t kOffQ = 0;
constexpr std::uint32_t kOffKv = kOffQ + kTileBytes;
constexpr std::uint32_t kOffP = kOffKv + 2 * kTileBytes;
constexpr std::uint32_t kOffFactor = kOffP + kPairs * 128u;    // float [64]
constexpr std::uint32_t kOffFinal = kOffFactor + kPairs * 4u;  // float [2][64]: m, l
constexpr std::uint32_t kUsedBytes = kOffFinal + 2 * kPairs * 4u;
constexpr std::uint32_t kSmemBytes = kUsedBytes + 1024;  // aligned up to 1024 inside
static_assert(kSmemBytes <= 227u * 1024u, "sm_90 allows 227 KiB of shared memory per block");

// One output warpgroup's share of a KV tile: 2 threads per token, each copying 4 of the 8
// 16-byte units of every chunk the warpgroup owns (og 0: chunks 0-3 and 8, og 1: chunks 4-7).
template <Cache C>
struct OutputLoader {
  int token;           // 0 .. 63
  std::uint32_t off0;  // row offset of the thread's first unit in a chunk (swizzled), + 16 each
  int half;            // which 4 units
  int og;

  __device__ __forceinline__ OutputLoader(int wt, int og_) : og(og_) {
    token = wt >> 1;
    half = wt & 1;
    off0 = std::uint32_t(token) * 128u;
  }
  __device__ __forceinline__ static int chunk(int og, int k) {
    return og == 0 ? (k < 4 ? k : 8) : 4 + k;
  }
  // Cache row of the thread's token in the tile at local token t0 (read early: it is a global
  // load the copies depend on).
  __device__ __forceinline__ std::int64_t entry(const DecodeParams& p, const DecodeTile& tile,
                                                int t0) const {
    return cache_entry(p, tile.request, t0 + token, tile.kv_visible_end);
  }
  // Issues the copies of the thread's token (cache row e) into stage `s`: asynchronous copies for
  // bf16; for fp8, global loads widened to bf16 (exact) and stored in batches of four 16-byte loads
  // (the output warpgroups are off the critical path, and o[] leaves few registers).
  __device__ __forceinline__ void issue(const DecodeParams& p, std::int64_t e,
                                        std::uint32_t s) const {
    const std::uint32_t swz = std::uint32_t(token & 7);
    const int chunks = og == 0 ? 5 : 4;
    if constexpr (C == Cache::bf16) {
      const auto* src =
          static_cast<const unsigned char*>(p.cache) + (e >= 0 ? e : 0) * (kHeadDim * 2);
      const std::uint32_t fill = e == kEntryNone ? 0u : 0x7fc07fc0u;  // zeros or bf16 NaN
#pragma unroll
      for (int k = 0; k < 5; ++k) {
        if (k < chunks) {
          const int c = chunk(og, k);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const std::uint32_t unit = std::uint32_t(4 * half + u);
            const std::uint32_t dst = s + c * kChunkBytes + off0 + ((unit ^ swz) << 4);
            if (e >= 0) {
              cp_async16(dst, src + c * 128 + unit * 16);
            } else {
              st_shared16(dst, make_uint4(fill, fill, fill, fill));
            }
          }
        }
      }
    } else {
      // Chunk c's dims [32 half, 32 half + 32) are fp8 bytes c * 64 + 32 half + [0, 32): two
      // 16-byte loads, each widened into two 16-byte bf16 units 4 half + 2 v, 4 half + 2 v + 1.
      const auto* src = static_cast<const uint4*>(p.cache) + (e >= 0 ? e : 0) * (kHeadDim / 16);
      const std::uint32_t fill = e == kEntryNone ? 0u : 0x7f7f7f7fu;  // zeros or e4m3 NaN
#pragma unroll
      for (int k0 = 0; k0 < 5; k0 += 2) {
        uint4 raw[2][2];
#pragma unroll
        for (int k = k0; k < k0 + 2; ++k) {
#pragma unroll
          for (int v = 0; v < 2; ++v) {
            raw[k - k0][v] = (k < chunks && e >= 0) ? __ldg(src + chunk(og, k) * 4 + 2 * half + v)
                                                    : make_uint4(fill, fill, fill, fill);
          }
        }
#pragma unroll
        for (int k = k0; k < k0 + 2; ++k) {
          if (k >= chunks) continue;
          const std::uint32_t row = s + chunk(og, k) * kChunkBytes + off0;
#pragma unroll
          for (int v = 0; v < 2; ++v) {
            const uint4 r = raw[k - k0][v];
            const std::uint32_t unit = std::uint32_t(4 * half + 2 * v);
            st_shared16(row + ((unit ^ swz) << 4),
                        make_uint4(widen_fp8x2(r.x), widen_fp8x2(r.x >> 16), widen_fp8x2(r.y),
                                   widen_fp8x2(r.y >> 16)));
            st_shared16(row + (((unit + 1) ^ swz) << 4),
                        make_uint4(widen_fp8x2(r.z), widen_fp8x2(r.z >> 16), widen_fp8x2(r.w),
                                   widen_fp8x2(r.w >> 16)));
          }
        }
      }
    }
  }
};

template <Cache C>
__global__ void __launch_bounds__(kThreads, 1) decode_ws_kernel(const DecodeParams p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = aligned_smem(smem_raw);
  const std::uint32_t s_q = smem_addr(smem) + kOffQ;
  const std::uint32_t s_kv = smem_addr(smem) + kOffKv;
  const std::uint32_t s_p = smem_addr(smem) + kOffP;
  float* factors = reinterpret_cast<float*>(smem + kOffFactor);
  float* final_m = reinterpret_cast<float*>(smem + kOffFinal);
  float* final_l = final_m + kPairs;

  // Launched for the plan buffer's capacity under a CUDA graph: blocks past the plan exit.
  if (p.header != nullptr && std::int64_t(blockIdx.x) >= p.header->num_tiles) return;
  const DecodeTile tile = p.tiles[blockIdx.x];
  const int tid = threadIdx.x, wg = tid >> 7, wt = tid & 127;
  const int lane = tid & 31, warp = wt >> 5, quad = lane & 3;
  const int n = (tile.kv_visible_end - tile.kv_begin + kKeys - 1) / kKeys;
  // The thread's two accumulator rows (the same in S and in O).
  const int rows[2] = {16 * warp + (lane >> 2), 16 * warp + (lane >> 2) + 8};

  if (n > 0) {
    load_q<kThreads>(p, tile, s_q, tid);
    if (wg > 0) {
      const OutputLoader<C> ld(wt, wg - 1);
      ld.issue(p, ld.entry(p, tile, tile.kv_begin), s_kv);
      if (n > 1) ld.issue(p, ld.entry(p, tile, tile.kv_begin + kKeys), s_kv + kTileBytes);
    }
    cp_async_wait_all();
    hopper::fence_proxy_async_shared();
  }
  __syncthreads();

  float
      o[128];  // output warpgroups: O_L or O_R, rows[r] in o[4 j + 2 r + {0, 1}], dim 8 j + 2 quad
#pragma unroll
  for (int k = 0; k < 128; ++k) o[k] = 0.0f;
  if (wg == 0) {
    // ---- scores warpgroup --------------------------------------------------------------------
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale_log2 = p.score_scale * kLog2e;
    const int lim[2] = {pair_key_limit(p, tile, rows[0]), pair_key_limit(p, tile, rows[1])};
    const std::uint64_t desc_q = hopper::smem_descriptor(s_q, 16, 1024);
    float m[2] = {-INFINITY, -INFINITY};  // running max of score * scale_log2
    float l[2] = {0.0f, 0.0f};            // this thread's share of the running exp-sum
    auto issue_scores = [&](float(&acc)[32], int tile_index) {
      const std::uint64_t desc_k =
          hopper::smem_descriptor(s_kv + (tile_index & 1) * kTileBytes, 16, 1024);
      hopper::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const std::uint32_t off = ((ks >> 2) * kChunkBytes + (ks & 3) * 32) >> 4;
        hopper::wgmma_m64n64k16_ss(acc, desc_q + off, desc_k + off, ks > 0);
      }
      hopper::wgmma_commit();
    };
    float s[32];
    if (n > 0) {
      issue_scores(s, 0);
      hopper::wgmma_wait<0>();
      hopper::pin_registers(s);
    }
    for (int i = 0; i < n; ++i) {
      const int t0 = tile.kv_begin + i * kKeys;
      // Mask (only tiles that reach past a row's bound: the last ones), row max over the 64 keys
      // (4 lanes of a quad hold a row) on raw scores (the scale is positive), rescale factor.
      if (t0 + kKeys > min(lim[0], lim[1])) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = t0 + 8 * j + 2 * quad + e;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              if (key >= lim[r]) s[4 * j + 2 * r + e] = -INFINITY;
            }
          }
        }
      }
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[r] = fmaxf(mx[r], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
        }
      }
      float factor[2], m_use[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float m_new = fmaxf(m[r], mx[r] * scale_log2);
        factor[r] = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
        m[r] = m_new;
        m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // masked scores stay -inf: exp2 gives 0
      }
      // P = exp2(S * scale_log2 - m): fp32 into the exp-sum (and the LSE), bf16 for the P.V MMAs.
      std::uint32_t packed[8][2];
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float p0 = fast_exp2(fmaf(s[4 * j + 2 * r], scale_log2, -m_use[r]));
          const float p1 = fast_exp2(fmaf(s[4 * j + 2 * r + 1], scale_log2, -m_use[r]));
          sum[r] += p0 + p1;
          packed[j][r] = pack_bf16x2(p0, p1);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = l[r] * factor[r] + sum[r];

      if (i >= 1) named_barrier_sync(kPFree, kThreads);  // P.V of tile i - 1 is done
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          st_shared4(s_p + hopper::swizzled_offset(rows[r], j) + 4 * quad, packed[j][r]);
        }
      }
      if (quad == 0) {
        factors[rows[0]] = factor[0];
        factors[rows[1]] = factor[1];
      }
      hopper::fence_proxy_async_shared();
      named_barrier_arrive(kPReady, kThreads);
      // S of the next tile.
      if (i + 1 < n) {
        if (i + 1 >= 2) named_barrier_sync(kFull + ((i + 1) & 1), kThreads);
        issue_scores(s, i + 1);
        hopper::wgmma_wait<0>();
        hopper::pin_registers(s);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      if (quad == 0) {
        final_m[rows[r]] = m[r];
        final_l[rows[r]] = l[r];
      }
    }
  } else {
    // ---- output warpgroups -------------------------------------------------------------------
    const int og = wg - 1;
    const OutputLoader<C> ld(wt, og);
    const std::uint64_t desc_p = hopper::smem_descriptor(s_p, 16, 1024);
    for (int i = 0; i < n; ++i) {
      const int stage = i & 1;
      const std::int64_t next_entry =
          i + 2 < n ? ld.entry(p, tile, tile.kv_begin + (i + 2) * kKeys) : kEntryNone;
      named_barrier_sync(kPReady, kThreads);
      const float f0 = factors[rows[0]], f1 = factors[rows[1]];
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
      const std::uint64_t desc_v = hopper::smem_descriptor(
          s_kv + stage * kTileBytes + og * 4 * kChunkBytes, kChunkBytes, 1024);
      hopper::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kKeys / 16; ++ks) {
        hopper::wgmma_m64n256k16_ss_tb(o, desc_p + ks * 2, desc_v + ks * (16 * 128 >> 4), true);
      }
      hopper::wgmma_commit();
      // Tile i + 1's loads (issued last iteration) have had a tile's time: publish them. (Waiting
      // for them right after issuing, at the end of the last iteration, measured 1.3x slower.)
      if (i >= 1 && i + 1 < n) {
        cp_async_wait_all();
        hopper::fence_proxy_async_shared();
        named_barrier_arrive(kFull + ((i + 1) & 1), kThreads);
      }
      hopper::wgmma_wait<0>();
      hopper::pin_registers(o);
      if (i + 1 < n) named_barrier_arrive(kPFree, kThreads);
      // Tile i + 2 into the stage tile i used.
      if (i + 2 < n) ld.issue(p, next_entry, s_kv + stage * kTileBytes);
    }
  }
  __syncthreads();  // the final m and l of every row are written

  const bool partial = tile.partial_row >= 0;
  const std::int64_t first = first_output_row(p, tile);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= tile.num_pairs) continue;
    const float total = final_l[rows[r]];
    if (wg == 0) {
      constexpr float kLn2 = 0.6931471805599453f;
      const float lse = total > 0.0f ? (final_m[rows[r]] + log2f(total)) * kLn2 : -INFINITY;
      if (quad == 0) (partial ? p.partial_lse : p.lse)[first + rows[r]] = lse;
      continue;
    }
    const float scale = total > 0.0f ? p.out_scale / total : 0.0f;
    const std::int64_t at = (first + rows[r]) * kLatentDim + 256 * (wg - 1) + 2 * quad;
    store_output_row(p, partial, at, o, r, scale);
  }
}

}  // namespace ws
}  // namespace dcpmla::cuda
