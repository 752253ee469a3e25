// The sm90 decode: a warp-specialised tensor-core decode for a bf16 query and a bf16 or fp8
// cache (design and measurements: docs/design/decode-kernel.md).
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
// and the tensor cores see the two streams interleaved. Hand-offs between the warpgroups use named
// barriers, each used by all 384 threads (one side arrives, the other waits) unless noted:
//   kPReady       scores -> output  P(i) and the factors of tile i are in shared memory
//   kPFree        output -> scores  P.V of tile i is done: P may be overwritten
//   kOIssued      output -> scores  P.V of tile i is issued (o_first tiles, >= 48 pairs: S of
//                                   tile i + 1 waits; such fp8 tiles: warpgroups 0 and 1 only)
//   kPvFirstDone  1 -> 2            o_first fp8 tiles, warpgroups 1 and 2 only: warpgroup 1's P.V
//                                   of tile i is done (warpgroup 2 then issues its own)
// The loads of a stage are tracked by two mbarriers, one per output warpgroup (count 1), which
// the scores warpgroup waits on directly, chunk set by chunk set (tile_loader.cuh: bulk tensor
// copies for bf16 tiles inside the visible range, the threads' copies otherwise).
//
// Tiles of at most kNarrowPairs pairs (config.h) run the same warpgroups transposed
// (narrow_tile.cuh): the MMAs then cost what the tile's pairs need, not 64 rows.
//
// Shared memory (128-byte swizzled, hopper/wgmma.cuh): Q 72 KiB, KV 2 x 72 KiB, P 8 KiB, 64
// rescale factors, the final m and l of each row, and the four mbarriers (smem_layout.cuh). Each
// pair's result depends only on its own query, bound and the KV tiles, so the flattened and native
// forms give the same bits.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/block_start.cuh"
#include "cuda/decode/sm90/block_times.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/epilogue.cuh"
#include "cuda/decode/sm90/narrow_tile.cuh"
#include "cuda/decode/sm90/output_half.cuh"
#include "cuda/decode/sm90/refill.cuh"
#include "cuda/decode/sm90/smem_layout.cuh"
#include "cuda/decode/sm90/softmax.cuh"
#include "cuda/decode/sm90/tile_loader.cuh"
#include "cuda/decode/sm90/wide_softmax.cuh"
#include "cuda/hopper/mbarrier.cuh"
#include "cuda/hopper/tma.cuh"

namespace dcpmla::cuda {
namespace sm90 {

// Bulk: bf16 tiles that lie inside the visible range come by bulk tensor copies (p.kv_map);
// the others (and every fp8 tile) by the threads' copies.
template <Cache C, bool Bulk>
__global__ void __launch_bounds__(kThreads, 1)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  DCPMLA_DYNAMIC_SMEM(smem_raw);
  const BlockSmem sm(aligned_smem(smem_raw));

  // Launched for the plan buffer's capacity under a CUDA graph: blocks past the plan exit.
  if (p.header != nullptr && std::int64_t(blockIdx.x) >= p.header->num_items) return;
  const DecodeTile tile = p.tiles[blockIdx.x];
  // Wide fp8 tiles keep the plain warpgroup index (the uniform one ran them slower).
  const int tid = threadIdx.x, wt = tid & 127;
  const int wg = C == Cache::bf16 ? warp_uniform_warpgroup() : tid >> 7;
  const int lane = tid & 31, warp = wt >> 5, quad = lane & 3;
  const int n = (tile.kv_visible_end - tile.kv_begin + kKeys - 1) / kKeys;
  mark_block(BlockMark::start, n);
  // Tiles of at least three quarters of kPairs (compute-bound work: full tiles, and the equal
  // halves of rules::tile_step): the scores warpgroup issues S of tile i + 1 only once P.V of
  // tile i is issued, so the tensor cores take P.V first and the stage it frees refills sooner
  // (smaller tiles, memory-bound, do better without the wait).
  const bool o_first = 4 * tile.num_pairs >= 3 * kPairs;
  const bool in_turn = kPvInTurn && C == Cache::fp8 && o_first;
  // kOIssued: the second output warpgroup (og 1) arrives too unless it waits for og 0's P.V.
  const int o_issued_threads = in_turn ? 256 : kThreads;
  // The thread's two accumulator rows (the same in S and in O).
  const int rows[2] = {16 * warp + (lane >> 2), 16 * warp + (lane >> 2) + 8};

  start_block<C, Bulk>(p, tile, sm, tid, wg, wt, n);
  mark_block(BlockMark::q_loaded, n);
  if constexpr (kNarrowPairs >= 16) {
    if (tile.num_pairs <= 16) return narrow_tile<C, Bulk, 16>(p, tile, sm, n);
  }
  if constexpr (kNarrowPairs >= 32) {
    if (tile.num_pairs <= 32) return narrow_tile<C, Bulk, 32>(p, tile, sm, n);
  }

  float
      o[128];  // output warpgroups: O_L or O_R, rows[r] in o[4 j + 2 r + {0, 1}], dim 8 j + 2 quad
#pragma unroll
  for (int k = 0; k < 128; ++k) o[k] = 0.0f;
  if (wg == 0) {
    // ---- scores warpgroup --------------------------------------------------------------------
    const float scale_log2 = score_scale_log2(p);
    const int lim[2] = {pair_key_limit(p, tile, rows[0]), pair_key_limit(p, tile, rows[1])};
    const std::uint64_t desc_q = hopper::smem_descriptor(sm.q, 16, 1024);
    float m[2] = {-INFINITY, -INFINITY};  // running max of score * scale_log2
    float l[2] = {0.0f, 0.0f};            // this thread's share of the running exp-sum
    auto issue_scores = [&](float(&acc)[32], int tile_index) {
      const std::uint64_t desc_k = hopper::smem_descriptor(sm.stage(tile_index), 16, 1024);
      issue_scores_as_chunks_land(sm, tile_index, [&](int ks, std::uint32_t off) {
        hopper::wgmma_m64n64k16_ss(acc, desc_q + off, desc_k + off, ks > 0);
      });
    };
    float s[32];
    if (n > 0) {
      issue_scores(s, 0);
      hopper::wgmma_wait<0>();
      hopper::pin_registers(s);
    }
    mark_block(BlockMark::first_s, n);
    for (int i = 0; i < n; ++i) {
      const int t0 = tile.kv_begin + i * kKeys;
      float factor[2];
      std::uint32_t packed[8][2];
      wide_tile_softmax(s, t0, lim, quad, scale_log2, m, l, factor, packed);

      if (i >= 1) named_barrier_sync(kPFree, kThreads);  // P.V of tile i - 1 is done
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          st_shared4(sm.p + hopper::swizzled_offset(rows[r], j) + 4 * quad, packed[j][r]);
        }
      }
      if (quad == 0) {
        sm.factors[rows[0]] = factor[0];
        sm.factors[rows[1]] = factor[1];
      }
      hopper::fence_proxy_async_shared();
      named_barrier_arrive(kPReady, kThreads);
      // S of the next tile.
      if (i + 1 < n) {
        if (o_first) named_barrier_sync(kOIssued, o_issued_threads);
        issue_scores(s, i + 1);
        hopper::wgmma_wait<0>();
        hopper::pin_registers(s);
      }
    }
    mark_block(BlockMark::walked, n);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] = quad_sum(l[r]);
      if (quad == 0) {
        sm.final_m[rows[r]] = m[r];
        sm.final_l[rows[r]] = l[r];
      }
    }
  } else {
    // ---- output warpgroups -------------------------------------------------------------------
    const int og = wg - 1;
    const OutputLoader<C> ld(wt, og, kLoaded + og);
    OutputRefill<C, Bulk, /*WidenEarly=*/true> refill(p, tile, sm, ld, n);
    for (int i = 0; i < n; ++i) {
      const int stage = i & 1;
      refill.read_ahead(i);
      refill.before_p(i);
      named_barrier_sync(kPReady, kThreads);
      if (in_turn && og == 1) named_barrier_sync(kPvFirstDone, 256);
      rescale_o(o, sm.factors[rows[0]], sm.factors[rows[1]]);
      issue_pv(o, sm.p, sm.stage(stage), og);
      if (o_first && i + 1 < n && !(in_turn && og == 1)) {
        named_barrier_arrive(kOIssued, o_issued_threads);
      }
      refill.while_pv(i);
      hopper::wgmma_wait<0>();
      hopper::pin_registers(o);
      if (in_turn && og == 0) named_barrier_arrive(kPvFirstDone, 256);
      if (i + 1 < n) named_barrier_arrive(kPFree, kThreads);
      refill.after_pv(i);
    }
  }
  __syncthreads();  // the final m and l of every row are written
  mark_block(BlockMark::rows_ready, n);

  const bool partial = tile.partial_row >= 0;
  const bool packed = !partial && p.final_rows.group_heads != 0;
  const std::int64_t first = first_output_item(p, tile);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= tile.num_pairs) continue;
    const float total = sm.final_l[rows[r]];
    const std::int64_t item = first + rows[r];
    if (wg == 0) {
      const float lse = pair_lse(sm.final_m[rows[r]], total);
      if (quad == 0) store_lse(p, partial, packed, item, lse);
      continue;
    }
    const float scale = output_scale(p, total);
    const int col = 256 * (wg - 1) + 2 * quad;
    if (packed) {
      store_packed_row(p, output_offset(p.final_rows, item, p.num_heads) + col, o, r, scale);
    } else {
      store_output_row(p, partial, item * kLatentDim + col, o, r, scale);
    }
  }
  mark_block(BlockMark::end, n);
}

}  // namespace sm90
}  // namespace dcpmla::cuda
