// Narrow tiles of the warp-specialised decode: a tile of at most N = 16 or 32 (row, head) pairs
// computed transposed, so that the tensor cores do N pairs' work instead of 64 (wgmma's M is
// fixed at 64: a 16-pair tile padded to 64 rows wastes 3/4 of every MMA). Tiles of at most
// kNarrowPairs pairs run here (config.h: H 16 at Q 1, the tail of a Q 5 row at H 16, H 1-16 short
// rows).
//
//   scores warpgroup:   S^T = K Q^T (36 wgmma m64nNk16: keys along M, pairs along N), the mask,
//                       per-pair max over the 64 keys (shuffles, then the four warps through
//                       shared memory), P^T in bf16 into P (pairs as rows, as in the wide form).
//   output warpgroups:  O^T (4 x 64 dims x N pairs each) += V^T P^T (V^T read as a transposed
//                       operand of the KV tile), the same loads and hand-offs as the wide form.
//
// Each pair's bits equal the wide form's (the SPEC's flattened = native bit for bit, when one form
// has narrow tiles and the other wide ones): S and O are the same dot products over the same
// k-steps; the max is exact; the softmax step, P and the output are the same functions
// (softmax.cuh, epilogue.cuh); the exp-sum is added in the wide form's order (per pair, four
// partial sums over keys 8 j + 2 q + {0, 1}, each tile's in order of j, combined by quad_sum at
// the end), for which the fp32 P values go through shared memory.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/block_start.cuh"
#include "cuda/decode/sm90/epilogue.cuh"
#include "cuda/decode/sm90/refill.cuh"
#include "cuda/decode/sm90/smem_layout.cuh"
#include "cuda/decode/sm90/softmax.cuh"
#include "cuda/decode/sm90/tile_loader.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90 {

template <int N>
__device__ __forceinline__ void wgmma_scores_t(float (&d)[N / 2], std::uint64_t k, std::uint64_t q,
                                               bool accumulate) {
  if constexpr (N == 16) {
    hopper::wgmma_m64n16k16_ss(d, k, q, accumulate);
  } else {
    static_assert(N == 32);
    hopper::wgmma_m64n32k16_ss(d, k, q, accumulate);
  }
}
template <int N>
__device__ __forceinline__ void wgmma_values_t(float (&d)[N / 2], std::uint64_t v,
                                               std::uint64_t p) {
  if constexpr (N == 16) {
    hopper::wgmma_m64n16k16_ss_ta(d, v, p, true);
  } else {
    static_assert(N == 32);
    hopper::wgmma_m64n32k16_ss_ta(d, v, p, true);
  }
}

// Scratch of the scores warpgroup in rows 32-63 of the Q tile, which N <= 32 pairs never read:
// the fp32 P of a tile ([32 pairs][64 keys], keys of pair r rotated by 8 ((r >> 1) & 3) against
// bank conflicts) in the upper halves of chunks 0 and 1, the per-warp maxima ([2][4][32]) in
// chunk 2's.
struct NarrowScratch {
  unsigned char* q_bytes;
  __device__ __forceinline__ float* p32(int pair, int key) const {
    const int k = key ^ (8 * ((pair >> 1) & 3));
    return reinterpret_cast<float*>(q_bytes + (pair >> 4) * kChunkBytes + kChunkBytes / 2 +
                                    (pair & 15) * 256) +
           k;
  }
  __device__ __forceinline__ float* maxima(int buffer) const {
    return reinterpret_cast<float*>(q_bytes + 2 * kChunkBytes + kChunkBytes / 2) + buffer * 128;
  }
};

template <Cache C, bool Bulk, int N>
__device__ __forceinline__ void narrow_tile(const DecodeParams& p, const DecodeTile& tile,
                                            const BlockSmem& sm, int n) {
  static_assert(N == 16 || N == 32);
  constexpr int kAcc = N / 2;  // registers of an m64nN fragment
  // Pairs a thread holds in a fragment: its column jj is pair 8 (jj / 2) + 2 quad + jj % 2.
  constexpr int kCols = N / 4;
  const int tid = threadIdx.x, wg = warp_uniform_warpgroup(), wt = tid & 127;
  const int lane = tid & 31, warp = wt >> 5, quad = lane & 3;
  auto pair_of = [&](int jj) { return 8 * (jj >> 1) + 2 * quad + (jj & 1); };
  const NarrowScratch scratch{sm.q_bytes};
  float o[4][kAcc];  // output warpgroups: O^T of chunk 4 og + c, o[c][4 j + 2 r + e] = dim
                     // 16 warp + lane / 4 + 8 r of the chunk, pair 8 j + 2 quad + e
#pragma unroll
  for (int c = 0; c < 4; ++c) {
#pragma unroll
    for (int k = 0; k < kAcc; ++k) o[c][k] = 0.0f;
  }

  if (wg == 0) {
    // ---- scores warpgroup --------------------------------------------------------------------
    const float scale_log2 = score_scale_log2(p);
    const int key0 = 16 * warp + (lane >> 2);  // the thread's keys: key0 and key0 + 8 of a tile
    int lim[kCols];
    int lim_min = INT32_MAX;
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) {
      lim[jj] = pair_key_limit(p, tile, pair_of(jj));
      lim_min = min(lim_min, lim[jj]);
    }
    const std::uint64_t desc_q = hopper::smem_descriptor(sm.q, 16, 1024);
    float m[kCols];  // running max of score * scale_log2 of the thread's pairs
#pragma unroll
    for (int jj = 0; jj < kCols; ++jj) m[jj] = -INFINITY;
    // The exp-sum of pair wt / 4 over keys 8 j + 2 (wt % 4) + {0, 1} (what lane quad wt % 4 of
    // the wide form holds).
    const int sum_pair = wt >> 2, sum_quad = wt & 3;
    float l = 0.0f;

    auto issue_scores = [&](float(&acc)[kAcc], int tile_index) {
      const std::uint64_t desc_k = hopper::smem_descriptor(sm.stage(tile_index), 16, 1024);
      issue_scores_as_chunks_land(sm, tile_index, [&](int ks, std::uint32_t off) {
        wgmma_scores_t<N>(acc, desc_k + off, desc_q + off, ks > 0);
      });
    };
    float s[kAcc];  // s[4 j + 2 r + e]: key key0 + 8 r, pair 8 j + 2 quad + e
    if (n > 0) {
      issue_scores(s, 0);
      hopper::wgmma_wait<0>();
      hopper::pin_registers(s);
    }
    for (int i = 0; i < n; ++i) {
      const int t0 = tile.kv_begin + i * kKeys;
      // A -inf score the mask keeps poisons its pair, as in the wide form.
      const bool masked = t0 + kKeys > lim_min;
      if (masked) {
#pragma unroll
        for (int k = 0; k < kAcc; ++k) {
          const int key = t0 + key0 + 8 * ((k >> 1) & 1);
          s[k] = key >= lim[2 * (k >> 2) + (k & 1)] ? -INFINITY : read_score(s[k]);
        }
      }
      // Max over the tile's keys: the 8 lanes of a quad position, then the four warps.
      float mx[kCols];
      bool minus_inf[kCols];
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        const int j = jj >> 1, e = jj & 1;
        minus_inf[jj] = !masked && fminf(s[4 * j + e], s[4 * j + 2 + e]) == -INFINITY;
        mx[jj] = fmaxf(s[4 * j + e], s[4 * j + 2 + e]);
        mx[jj] = fmaxf(mx[jj], __shfl_xor_sync(0xffffffffu, mx[jj], 4));
        mx[jj] = fmaxf(mx[jj], __shfl_xor_sync(0xffffffffu, mx[jj], 8));
        mx[jj] = fmaxf(mx[jj], __shfl_xor_sync(0xffffffffu, mx[jj], 16));
      }
      float* maxima = scratch.maxima(i & 1);  // [4 warps][32 pairs]
      if (lane < 4) {
#pragma unroll
        for (int jj = 0; jj < kCols; ++jj) maxima[32 * warp + pair_of(jj)] = mx[jj];
      }
      named_barrier_sync(kScoresReduce, 128);
      float factor[kCols], m_use[kCols];
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        const int c = pair_of(jj);
        mx[jj] = fmaxf(fmaxf(maxima[c], maxima[32 + c]), fmaxf(maxima[64 + c], maxima[96 + c]));
        const float m_new = running_max(m[jj], mx[jj] * scale_log2);
        factor[jj] = m_new == -INFINITY ? 1.0f : exp2f(m[jj] - m_new);
        m[jj] = m_new;
        m_use[jj] = m_new == -INFINITY ? 0.0f : m_new;
        if (minus_inf[jj]) m_use[jj] = NAN;
      }
      // P = exp2(S * scale_log2 - m) as the wide form computes it; fp32 into the scratch for the
      // exp-sum, bf16 into P.
      std::uint32_t packed[kAcc / 2];  // (pair c, c + 1) of key key0 + 8 r
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float p0 = softmax_p(s[4 * j + 2 * r], scale_log2, m_use[2 * j]);
          const float p1 = softmax_p(s[4 * j + 2 * r + 1], scale_log2, m_use[2 * j + 1]);
          const int c = 8 * j + 2 * quad, key = key0 + 8 * r;
          *scratch.p32(c, key) = p0;
          *scratch.p32(c + 1, key) = p1;
          packed[2 * j + r] = pack_bf16x2(p0, p1);
        }
      }
      if (i >= 1) named_barrier_sync(kPFree, kThreads);  // P.V of tile i - 1 is done
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int c = 8 * j + 2 * quad, key = key0 + 8 * r;
          const std::uint32_t unit = std::uint32_t(key >> 3), byte = 2u * std::uint32_t(key & 7);
          st_shared2(sm.p + hopper::swizzled_offset(c, unit) + byte,
                     std::uint16_t(packed[2 * j + r]));
          st_shared2(sm.p + hopper::swizzled_offset(c + 1, unit) + byte,
                     std::uint16_t(packed[2 * j + r] >> 16));
        }
      }
      if (warp == 0 && lane < 4) {
#pragma unroll
        for (int jj = 0; jj < kCols; ++jj) sm.factors[pair_of(jj)] = factor[jj];
      }
      hopper::fence_proxy_async_shared();
      named_barrier_arrive(kPReady, kThreads);
      // This tile's exp-sum, while S of the next tile runs (issue and wait in one branch: a
      // branch between them makes ptxas serialise the kernel's wgmmas).
      auto add_exp_sum = [&] {
        named_barrier_sync(kScoresReduce, 128);  // the fp32 P and the factors are written
        float sum = 0.0f;  // every thread: pairs past N read unused scratch rows
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float2 v =
              *reinterpret_cast<const float2*>(scratch.p32(sum_pair, 8 * j + 2 * sum_quad));
          sum += v.x + v.y;
        }
        l = rescaled_sum(l, sm.factors[sum_pair], sum);
      };
      if (i + 1 < n) {
        issue_scores(s, i + 1);
        add_exp_sum();
        hopper::wgmma_wait<0>();
        hopper::pin_registers(s);
      } else {
        add_exp_sum();
      }
    }
    l = quad_sum(l);
    if (sum_pair < N && sum_quad == 0) sm.final_l[sum_pair] = l;
    if (warp == 0 && lane < 4) {
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) sm.final_m[pair_of(jj)] = m[jj];
    }
  } else {
    // ---- output warpgroups -------------------------------------------------------------------
    const int og = wg - 1;
    const OutputLoader<C> ld(wt, og, kLoaded + og);
    OutputRefill<C, Bulk, /*WidenEarly=*/false> refill(p, tile, sm, ld, n);
    const std::uint64_t desc_p = hopper::smem_descriptor(sm.p, 16, 1024);
    for (int i = 0; i < n; ++i) {
      refill.read_ahead(i);
      refill.before_p(i);
      named_barrier_sync(kPReady, kThreads);
      float f[kCols];
      bool rescale = false;
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        f[jj] = sm.factors[pair_of(jj)];
        rescale |= f[jj] != 1.0f;
      }
      if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
#pragma unroll
          for (int k = 0; k < kAcc; ++k) o[c][k] *= f[2 * (k >> 2) + (k & 1)];
        }
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) hopper::pin_registers(o[c]);
      hopper::wgmma_fence();
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const std::uint64_t desc_v =
            hopper::smem_descriptor(sm.stage(i) + (4 * og + c) * kChunkBytes, kChunkBytes, 1024);
#pragma unroll
        for (int ks = 0; ks < kKeys / 16; ++ks) {
          wgmma_values_t<N>(o[c], desc_v + ks * (16 * 128 >> 4), desc_p + ks * 2);
        }
      }
      hopper::wgmma_commit();
      refill.while_pv(i);
      hopper::wgmma_wait<0>();
#pragma unroll
      for (int c = 0; c < 4; ++c) hopper::pin_registers(o[c]);
      if (i + 1 < n) named_barrier_arrive(kPFree, kThreads);
      refill.after_pv(i);
    }
  }
  __syncthreads();  // the final m and l of every pair are written

  const std::int64_t first = first_output_item(p, tile);
  const bool partial = tile.partial_row >= 0;
  const bool packed = !partial && p.final_rows.group_heads != 0;
  if (wg == 0) {
    if (wt >= tile.num_pairs) return;
    const float lse = pair_lse(sm.final_m[wt], sm.final_l[wt]);
    const std::int64_t item = first + wt;
    store_lse(p, partial, packed, item, lse);
    return;
  }
  const int og = wg - 1;
#pragma unroll
  for (int jj = 0; jj < kCols; ++jj) {
    const int c = pair_of(jj);
    if (c >= tile.num_pairs) continue;
    const float scale = output_scale(p, sm.final_l[c]);
    const std::int64_t item = first + c;
    const std::int64_t base =
        packed ? output_offset(p.final_rows, item, p.num_heads) : item * kLatentDim;
#pragma unroll
    for (int k4 = 0; k4 < 4; ++k4) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int dim = 256 * og + 64 * k4 + 16 * warp + (lane >> 2) + 8 * r;
        const float v = o[k4][4 * (jj >> 1) + 2 * r + (jj & 1)] * scale;
        if (partial) {
          p.partial_out[base + dim] = v;
        } else {
          store1(p.final_rows.out, p.final_rows.bf16, base + dim, v);
        }
      }
    }
  }
}

// A tile of at most 16 pairs by a whole block from its start, in the narrow form (the round decode
// hands its bf16 tiles of at most 16 pairs to it).
template <Cache C, bool Bulk>
__device__ __forceinline__ void narrow_block(const DecodeParams& p, const DecodeTile& tile,
                                             const BlockSmem& sm, int tid, int wg, int wt, int n) {
  start_block<C, Bulk>(p, tile, sm, tid, wg, wt, n);
  narrow_tile<C, Bulk, 16>(p, tile, sm, n);
}

}  // namespace dcpmla::cuda::sm90
