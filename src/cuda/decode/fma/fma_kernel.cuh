// The FMA decode: plain fp32 FMA, no tensor cores; the decode of an f32 query or an f32 cache
// (kernel_selection.h picks it).
//
// One thread block (256 threads, 8 warps) per DecodeTile: up to 64 (row, head) pairs of one work
// item, pair = j * H + h, so one tile spans several query rows when H is small. The block walks
// the work item's local KV range in tiles of KT tokens gathered page by page through the block
// table, and stages each KV tile in shared memory once for all 64 pairs:
//
//   shared: Q [64 pairs][576 (+pad)] in q's dtype (bf16 stays bf16, exact)
//           K [KT tokens][576 (+pad)]: f32 for an f32 cache, bf16 for bf16 and fp8 caches (an
//           e4m3 value is exact in bf16; k_scale is folded into the score and output scales)
//           P [8 warps][KT][8] probabilities, per-warp softmax factors, KT gathered entry ids
//   KT = 64 when Q and K are both 16-bit, else 32 (16 for f32 Q with an f32 cache).
//
// Warp w owns pairs [8w, 8w + 8) for the whole block: scores, online softmax and P.V, so only
// the KV tile load needs block barriers. Scores: lane = (half ph, key group kg), 4 pairs x KT/16
// keys per lane, 576-long fp32 dot products from shared memory, then per pair the tile max and
// exp-sum by butterfly shuffles within the 16 lanes of a half. P.V: lane owns dims
// {128 i + 4 lane + c} of the warp's 8 pairs: 8 x 16 fp32 accumulators in registers.
//
// Each pair's arithmetic depends only on its own q, its own bound and the KV tiles (which start
// at kv_begin + multiples of KT), never on which other pairs share its tile: masked keys add
// exact zeros. So the flattened and the native form give the same bits for the same KV split.
#pragma once

#include <cstring>
#include <type_traits>

#include "cuda/decode/decode_tile.cuh"
#include "cuda/device_common.cuh"
#include "cuda/hopper/cp_async.cuh"
#include "cuda/kernels.h"
#include "cuda/output_rows.cuh"
#include "dcpmla/merge.h"

// DCPMLA_EMULATE: the kernel is compiled as plain C++ by a host emulation test
// (tests/cuda/decode_emulation_test.cc), which supplies threads, barriers and shuffles.

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpPairs = kTilePairs / kWarps;
static_assert(kWarpPairs == 8, "the lane mappings below assume 8 pairs per warp");
constexpr unsigned kFullMask = 0xffffffffu;
// Dynamic shared memory per block (sm_90 allows up to 227 KiB).
constexpr std::size_t kSmemBudget = 220 * 1024;

enum class CacheKind { f32, bf16, fp8 };
template <CacheKind C>
using KStore = std::conditional_t<C == CacheKind::f32, float, bf16_bits>;

template <class QS, class KS>
struct Layout {
  // Rows padded by 16 bytes: consecutive rows start 16 bytes apart modulo 128, so the 16-byte
  // reads of 8 different rows by a quarter warp hit distinct banks.
  static constexpr int kQStride = kHeadDim + 16 / int(sizeof(QS));
  static constexpr int kKStride = kHeadDim + 16 / int(sizeof(KS));
  static constexpr std::size_t kQBytes = std::size_t(kTilePairs) * kQStride * sizeof(QS);
  static constexpr std::size_t bytes_for(int keys) {
    return kQBytes + std::size_t(keys) * kKStride * sizeof(KS) +
           std::size_t(kWarps) * keys * kWarpPairs * 4 + 2 * kWarps * kWarpPairs * 4 +
           std::size_t(keys) * 8;
  }
  static constexpr int kKeys = bytes_for(64) <= kSmemBudget   ? 64
                               : bytes_for(32) <= kSmemBudget ? 32
                                                              : 16;
  static constexpr std::size_t kOffK = kQBytes;
  static constexpr std::size_t kOffP = kOffK + std::size_t(kKeys) * kKStride * sizeof(KS);
  static constexpr std::size_t kOffF = kOffP + std::size_t(kWarps) * kKeys * kWarpPairs * 4;
  static constexpr std::size_t kOffL = kOffF + kWarps * kWarpPairs * 4;
  static constexpr std::size_t kOffE = kOffL + kWarps * kWarpPairs * 4;
  static constexpr std::size_t kBytes = kOffE + std::size_t(kKeys) * 8;
  static_assert(kBytes == bytes_for(kKeys) && kBytes <= kSmemBudget);
  static_assert(kOffK % 16 == 0 && kOffP % 16 == 0 && kOffF % 16 == 0 && kOffE % 8 == 0);
  static_assert(kQStride * sizeof(QS) % 16 == 0 && kKStride * sizeof(KS) % 16 == 0);
};

// 16 bytes into shared memory at `smem`, asynchronously (the emulation copies at once).
__device__ __forceinline__ void copy16_to_shared(void* smem, const void* gmem) {
#if defined(DCPMLA_EMULATE)
  std::memcpy(smem, gmem, 16);
#else
  hopper::cp_async16(static_cast<unsigned>(__cvta_generic_to_shared(smem)), gmem);
#endif
}

// KV tile -> shared memory: token t of the tile from cache row entries[t].
template <CacheKind C, int KT, int KStride>
__device__ __forceinline__ void load_kv_tile(const void* cache, const std::int64_t* entries,
                                             KStore<C>* ks, int tid) {
  using KS = KStore<C>;
  if constexpr (C != CacheKind::fp8) {
    // Same element type in the cache and in shared memory: asynchronous 16-byte copies.
    constexpr int kUnits = kHeadDim * int(sizeof(KS)) / 16;
    constexpr std::uint32_t kNan = sizeof(KS) == 4 ? 0x7fc00000u : 0x7fc07fc0u;
    const auto* src = static_cast<const unsigned char*>(cache);
    for (int u = tid; u < KT * kUnits; u += kThreads) {
      const int t = u / kUnits, c = u - t * kUnits;
      unsigned char* dst = reinterpret_cast<unsigned char*>(ks + t * KStride) + c * 16;
      const std::int64_t e = entries[t];
      if (e >= 0) {
        copy16_to_shared(dst, src + (e * kUnits + c) * 16);
      } else {
        const std::uint32_t w = e == kEntryNone ? 0u : kNan;
        *reinterpret_cast<uint4*>(dst) = make_uint4(w, w, w, w);
      }
    }
    hopper::cp_async_wait_all();
  } else {
    // 16 e4m3 values per 16-byte load, widened to 16 bf16 (32 bytes) in shared memory.
    constexpr int kUnits = kHeadDim / 16;
    constexpr int kTotal = KT * kUnits;
    constexpr int kBatch = 3;  // loads in flight per thread before the first conversion
    const auto* src = static_cast<const uint4*>(cache);
    for (int u0 = tid; u0 < kTotal; u0 += kThreads * kBatch) {
      uint4 raw[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int u = u0 + b * kThreads;
        raw[b] = make_uint4(0u, 0u, 0u, 0u);
        if (u < kTotal) {
          const int t = u / kUnits, c = u - t * kUnits;
          const std::int64_t e = entries[t];
          if (e >= 0) {
            raw[b] = __ldg(src + e * kUnits + c);
          } else if (e == kEntryInvalid) {
            raw[b] = make_uint4(0x7f7f7f7fu, 0x7f7f7f7fu, 0x7f7f7f7fu, 0x7f7f7f7fu);  // e4m3 NaN
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int u = u0 + b * kThreads;
        if (u < kTotal) {
          const int t = u / kUnits, c = u - t * kUnits;
          uint4* dst = reinterpret_cast<uint4*>(ks + t * KStride + c * 16);
          dst[0] = make_uint4(widen_fp8x2_exact(raw[b].x), widen_fp8x2_exact(raw[b].x >> 16),
                              widen_fp8x2_exact(raw[b].y), widen_fp8x2_exact(raw[b].y >> 16));
          dst[1] = make_uint4(widen_fp8x2_exact(raw[b].z), widen_fp8x2_exact(raw[b].z >> 16),
                              widen_fp8x2_exact(raw[b].w), widen_fp8x2_exact(raw[b].w >> 16));
        }
      }
    }
  }
}

template <class QS, CacheKind C>
__global__ void __launch_bounds__(kThreads, 1) fma_decode_kernel(const DecodeParams p) {
  using KS = KStore<C>;
  using L = Layout<QS, KS>;
  constexpr int KT = L::kKeys;
  constexpr int KPL = KT / 16;  // keys per lane in the score phase
  static_assert(KT % 16 == 0 && KPL >= 1 && KPL <= 4);

#if defined(DCPMLA_EMULATE)
  unsigned char* smem = emulated_shared_memory();
#else
  extern __shared__ __align__(16) unsigned char smem[];
#endif
  QS* qs = reinterpret_cast<QS*>(smem);
  KS* ks = reinterpret_cast<KS*>(smem + L::kOffK);
  float* ps = reinterpret_cast<float*>(smem + L::kOffP);
  float* fs = reinterpret_cast<float*>(smem + L::kOffF);
  float* ls = reinterpret_cast<float*>(smem + L::kOffL);
  std::int64_t* es = reinterpret_cast<std::int64_t*>(smem + L::kOffE);

  // Launched for the plan buffer's capacity under a CUDA graph: blocks past the plan exit.
  if (p.header != nullptr && std::int64_t(blockIdx.x) >= p.header->num_items) return;
  const DecodeTile tile = p.tiles[blockIdx.x];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ph = lane >> 4, kg = lane & 15;
  const int H = p.num_heads;

  // Q of the tile's pairs (pair = j * H + h, a slot of q by grouped_slot), zeros past num_pairs.
  {
    constexpr int kUnits = kHeadDim * int(sizeof(QS)) / 16;
    const auto* src = static_cast<const uint4*>(p.q);
    const std::int64_t first = std::int64_t(tile.row_begin) * H + tile.pair_begin;
    for (int u = tid; u < kTilePairs * kUnits; u += kThreads) {
      const int r = u / kUnits, c = u - r * kUnits;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r < tile.num_pairs) {
        const std::int64_t slot = grouped_slot(first + r, H, p.q_group_heads, p.q_rows);
        v = __ldg(src + slot * kUnits + c);
      }
      *reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(qs + r * L::kQStride) + c * 16) =
          v;
    }
  }

  // The lane's 4 score pairs (warp pairs 4 ph .. 4 ph + 3): exclusive local key limit.
  int lim[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int pair = warp * kWarpPairs + ph * 4 + i;
    lim[i] = tile.kv_begin;  // empty
    if (pair < tile.num_pairs) {
      const int row = tile.row_begin + (tile.pair_begin + pair) / H;
      lim[i] = max(tile.kv_begin, min(p.row_bound[row], tile.kv_end));
    }
  }
  merge::OnlineSoftmax st[4];
  float acc[kWarpPairs][16];
#pragma unroll
  for (int pp = 0; pp < kWarpPairs; ++pp) {
#pragma unroll
    for (int e = 0; e < 16; ++e) acc[pp][e] = 0.0f;
  }
  float* pw = ps + warp * KT * kWarpPairs;  // this warp's P [KT][8]
  float* fw = fs + warp * kWarpPairs;       // this warp's per-pair factors
  float* lw = ls + warp * kWarpPairs;

  for (int t0 = tile.kv_begin; t0 < tile.kv_visible_end; t0 += KT) {
    // Cache rows of the tile's tokens (es is not read while other warps still compute).
    if (tid < KT) es[tid] = cache_entry(p, tile.request, t0 + tid, tile.kv_visible_end);
    __syncthreads();  // entries visible; every warp is done with the previous K tile
    load_kv_tile<C, KT, L::kKStride>(p.cache, es, ks, tid);
    __syncthreads();  // K tile (and, on the first pass, Q) visible

    int n_lane = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) n_lane = max(n_lane, min(lim[i] - t0, KT));
    const int n_warp = max(n_lane, __shfl_xor_sync(kFullMask, n_lane, 16));
    if (n_warp == 0) continue;  // warp-uniform: no pair of this warp sees a key of this tile

    // Scores of 4 pairs x KPL keys (keys kg + 16 jj) per lane.
    float sc[4][KPL];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int jj = 0; jj < KPL; ++jj) sc[i][jj] = 0.0f;
    }
    const QS* q_lane = qs + (warp * kWarpPairs + ph * 4) * L::kQStride;
    const KS* k_lane = ks + kg * L::kKStride;
#pragma unroll 2
    for (int d = 0; d < kHeadDim; d += 8) {
      float kv[KPL][8];
#pragma unroll
      for (int jj = 0; jj < KPL; ++jj) load8(k_lane + jj * 16 * L::kKStride + d, kv[jj]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float qv[8];
        load8(q_lane + i * L::kQStride + d, qv);
#pragma unroll
        for (int jj = 0; jj < KPL; ++jj) {
#pragma unroll
          for (int c = 0; c < 8; ++c) sc[i][jj] = fmaf(qv[c], kv[jj][c], sc[i][jj]);
        }
      }
    }

    // Online softmax per pair: mask, tile max, rescale factor, probabilities, their sum.
    float factor[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < KPL; ++jj) {
        const int key = t0 + kg + 16 * jj;
        // A read -inf score (an infinite element) becomes NaN: it must poison, not weigh 0.
        sc[i][jj] =
            key < lim[i] ? (sc[i][jj] == -INFINITY ? NAN : sc[i][jj] * p.score_scale) : -INFINITY;
        mx = fmaxf(mx, sc[i][jj]);
      }
#pragma unroll
      for (int off = 8; off >= 1; off >>= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, off));
      }
      factor[i] = st[i].rescale_for(mx);
      float sum = 0.0f;
#pragma unroll
      for (int jj = 0; jj < KPL; ++jj) {
        const float e = sc[i][jj] == -INFINITY ? 0.0f : expf(sc[i][jj] - st[i].m);
        sc[i][jj] = e;
        sum += e;
      }
#pragma unroll
      for (int off = 8; off >= 1; off >>= 1) sum += __shfl_xor_sync(kFullMask, sum, off);
      st[i].s += sum;
    }
#pragma unroll
    for (int jj = 0; jj < KPL; ++jj) {
      *reinterpret_cast<float4*>(pw + (kg + 16 * jj) * kWarpPairs + ph * 4) =
          make_float4(sc[0][jj], sc[1][jj], sc[2][jj], sc[3][jj]);
    }
    if (kg == 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) fw[ph * 4 + i] = factor[i];
    }
    __syncwarp();

    // O = O * factor + P . V over the keys any pair of the warp sees.
    {
      const float4 fa = *reinterpret_cast<const float4*>(fw);
      const float4 fb = *reinterpret_cast<const float4*>(fw + 4);
      const float f[kWarpPairs] = {fa.x, fa.y, fa.z, fa.w, fb.x, fb.y, fb.z, fb.w};
#pragma unroll
      for (int pp = 0; pp < kWarpPairs; ++pp) {
#pragma unroll
        for (int e = 0; e < 16; ++e) acc[pp][e] *= f[pp];
      }
    }
    const KS* v_lane = ks + 4 * lane;
#pragma unroll 2
    for (int k = 0; k < n_warp; ++k) {
      const float4 pa = *reinterpret_cast<const float4*>(pw + k * kWarpPairs);
      const float4 pb = *reinterpret_cast<const float4*>(pw + k * kWarpPairs + 4);
      const float pr[kWarpPairs] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
      float v[16];
#pragma unroll
      for (int i4 = 0; i4 < 4; ++i4) load4(v_lane + k * L::kKStride + 128 * i4, v + 4 * i4);
#pragma unroll
      for (int pp = 0; pp < kWarpPairs; ++pp) {
#pragma unroll
        for (int e = 0; e < 16; ++e) acc[pp][e] = fmaf(pr[pp], v[e], acc[pp][e]);
      }
    }
    __syncwarp();  // every lane has read fw / pw before the next tile rewrites them
  }

  // Epilogue: normalise, write final rows or fp32 partials, and the LSE. Empty pairs have
  // acc = 0 and inv_sum = 0 (O = 0 exactly) and lse = -inf.
  if (kg == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      fw[ph * 4 + i] = st[i].inv_sum() * p.out_scale;
      lw[ph * 4 + i] = st[i].lse();
    }
  }
  __syncwarp();
  const bool partial = tile.partial_row >= 0;
  const std::int64_t first =
      (partial ? std::int64_t(tile.partial_row) : std::int64_t(tile.row_begin)) * H +
      tile.pair_begin;
#pragma unroll
  for (int pp = 0; pp < kWarpPairs; ++pp) {
    const int pair = warp * kWarpPairs + pp;
    if (pair < tile.num_pairs) {
      const std::int64_t idx = first + pair;
      const float scale = fw[pp];
      const std::int64_t row_at = partial ? idx * kLatentDim : output_offset(p.final_rows, idx, H);
#pragma unroll
      for (int i4 = 0; i4 < 4; ++i4) {
        const std::int64_t at = row_at + 128 * i4 + 4 * lane;
        const float* a = acc[pp] + 4 * i4;
        if (partial) {
          store4(p.partial_out, false, at, a[0] * scale, a[1] * scale, a[2] * scale, a[3] * scale);
        } else {
          store_output4(p.final_rows, at, a[0] * scale, a[1] * scale, a[2] * scale, a[3] * scale);
        }
      }
      if (lane == 0) {
        *pair_lse_at(p, partial, idx, row_at) = lw[pp];
      }
    }
  }
}

}  // namespace
}  // namespace dcpmla::cuda
