// The round decode: the sm90 decode of tiles whose KV comes by 64-row boxes (block size a
// multiple of 64; an fp8 cache's e4m3 bytes widened to f16 by the producer warpgroup), in rounds
// of two KV tiles on two consumer warpgroups, so that one warpgroup's softmax runs beside the
// other's MMAs (docs/design/decode-kernel.md, "The round decode"). A bf16 tile of at most 16
// pairs goes to the warp-specialised form's narrow tile instead.
//
// A thread block of 384 threads per DecodeTile (64 (row, head) pairs of one work item) walks the
// item's KV in 64-token tiles through 2 stages; round j takes tiles A = 2 j (stage 0) and
// B = 2 j + 1 (stage 1):
//
//   C0 (warpgroup 0): S and the softmax of every A, and O_L (V dims 0-255, 64 x 256 fp32)
//   C1 (warpgroup 1): S and the softmax of every B, and O_R (V dims 256-511)
//   producer (warpgroup 2): thread 0 issues the boxes of every tile (round_loads.cuh); for an
//       fp8 cache warps 1-3 widen each chunk before it counts as landed (round_widening.cuh)
//
//   C0: free A{8}; softmax A; P_A -> pbuf0, m, l [A_READY]; O_L *= f_A; P_A V_L; wait;
//       free A{0-3}; |B_READY| |AR_ISSUED| O_L *= f_B; P_B V_L [BL_ISSUED]; wait; free B{0-3};
//       S(A'); wait
//   C1: free B{8}; |A_READY| softmax B; P_B -> pbuf1, m, l [B_READY]; O_R *= f_A; P_A V_R
//       [AR_ISSUED]; wait; free A{4-7}; O_R *= f_B; |BL_ISSUED| P_B V_R; wait; free B{4-7};
//       S(B'); wait
//
// (A' = A + 2, B' = B + 2; "free" arrives on the group's empty barrier, after which the producer
// refills it with the tile two ahead.) The arithmetic is the warp-specialised form's (kernel.cuh),
// pair for pair: m and l are handed on in tile order through shared memory, each half of O is
// rescaled and multiplied by P in tile order, S runs in the k-order 0-3, 8, 4-7, and the other
// warpgroup's factor is recomputed from the two maxima with the same operations. So the bits are
// those of kernel.cuh and of the narrow form.
//
// Each chunk of a stage has its own mbarrier, and a chunk group is freed by its last reader after
// its own wait: chunk 8 after S, chunks 0-3 after P.V of O_L, chunks 4-7 after P.V of O_R.
// No P lives in a KV stage: P_A has its own buffer, P_B takes Q's rope chunk, which S reads from
// registers (RS wgmma). A P buffer or the m / l slots are rewritten only after a chain of
// landings whose boxes were issued after their readers' waits, so neither needs a barrier of
// its own.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/block_times.cuh"
#include "cuda/decode/sm90/epilogue.cuh"
#include "cuda/decode/sm90/narrow_tile.cuh"
#include "cuda/decode/sm90/output_half.cuh"
#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/decode/sm90/round_loads.cuh"
#include "cuda/decode/sm90/round_query.cuh"
#include "cuda/decode/sm90/round_scores.cuh"
#include "cuda/decode/sm90/round_softmax.cuh"
#include "cuda/decode/sm90/round_widening.cuh"
#include "cuda/decode/sm90/smem_layout.cuh"
#include "cuda/hopper/registers.cuh"

namespace dcpmla::cuda {
namespace sm90::rounds {

// A block that hands its tile to the narrow form runs in that form's layout.
static_assert(kSmemBytes >= sm90::kSmemBytes && kThreads == sm90::kThreads);
// The staged output rows fit the two KV stages.
static_assert(kStagedOutputBytes<4> <= 2 * kTileBytes);

// Internal linkage: the host emulation compiles this source as a function of its own test,
// beside the CUDA library's kernel of the same name.
template <Cache C>
static __global__ void __launch_bounds__(kThreads, 1)
    round_decode_kernel(const __grid_constant__ DecodeParams p) {
  DCPMLA_DYNAMIC_SMEM(smem_raw);
  const RoundSmem sm(aligned_smem(smem_raw));

  // Launched for the plan buffer's capacity under a CUDA graph: blocks past the plan exit.
  if (p.header != nullptr && std::int64_t(blockIdx.x) >= p.header->num_items) return;
  const DecodeTile tile = p.tiles[blockIdx.x];
  const int tid = threadIdx.x, wt = tid & 127;
  const int wg = warp_uniform_warpgroup();
  const int lane = tid & 31, warp = wt >> 5, quad = lane & 3;
  const int n = (tile.kv_visible_end - tile.kv_begin + kKeys - 1) / kKeys;
  mark_block(BlockMark::start, n);
  // bf16 tiles of at most 16 pairs run the warp-specialised form's narrow tiles, in that form's
  // block layout (a 64-row MMA would be 3/4 padding; its bulk copies read these pages as ours
  // do). fp8 runs them wide here, where its widening is off the consumers' path.
  if constexpr (C == Cache::bf16 && kNarrowPairs >= 16) {
    if (tile.num_pairs <= 16) {
      return narrow_block<C, true>(p, tile, BlockSmem(aligned_smem(smem_raw)), tid, wg, wt, n);
    }
  }
  // The thread's two accumulator rows (the same in S and in O).
  const int rows[2] = {16 * warp + (lane >> 2), 16 * warp + (lane >> 2) + 8};
  auto t0_of = [&](int index) { return tile.kv_begin + index * kKeys; };

  if (tid == 0) {
    for (int i = 0; i < 2 * kChunks; ++i) hopper::mbarrier_init(sm.full + 8u * i, 1);
    for (int i = 0; i < 2 * kGroups; ++i) hopper::mbarrier_init(sm.empty + 8u * i, 1);
    for (int i = 0; i < 2 * kChunks; ++i) hopper::mbarrier_init(sm.staged + 8u * i, 1);
    hopper::mbarrier_init(sm.q_full, 1);
  }
  __syncthreads();
  if (wg == 2) {
    hopper::release_registers<kProducerRegisters<C>>();
    if (wt == 0) {
      produce_tiles<C>(p, sm, tile, n);
    } else if (C == Cache::fp8 && wt >= 32) {
      widen_tiles(sm, tile, n, wt - 32);
    }
    return;
  }
  hopper::claim_registers<kConsumerRegisters<C>>();
  // An fp8 cache's tiles are widened to f16, so its MMAs take f16: Q too, scaled by 2^q_exponent.
  constexpr bool kF16 = C == Cache::fp8;
  // The key limits' loads run while the query lands.
  const int lim[2] = {pair_key_limit(p, tile, rows[0]), pair_key_limit(p, tile, rows[1])};
  int q_exponent = 0;
  if (n > 0) {
    if (query_by_boxes(p, tile)) {
      hopper::mbarrier_wait(sm.q_full, 0);
    } else {
      load_q<kConsumerThreads>(p, tile, sm.q, tid);
      hopper::cp_async_wait_all();
    }
    if constexpr (kF16) q_exponent = query_to_f16(sm, tid, tile.num_pairs);
    hopper::fence_proxy_async_shared();
  }
  named_barrier_sync(kQLoaded, kConsumerThreads);
  mark_block(BlockMark::q_loaded, n);

  RopeFragment rope;
  load_rope_fragment(sm, warp, lane, rope);
  const float scale_log2 = score_scale_log2(p) * pow2(-q_exponent);
  RowState st;
  float o[128];
#pragma unroll
  for (int k = 0; k < 128; ++k) o[k] = 0.0f;
  float s[32];
  // S of the warpgroup's tile of round 0 (S of later rounds is issued at the end of the round
  // before, each warpgroup its own).
  auto scores = [&](int index) {
    // A bf16 tile's tail zeros; an fp8 tile's wideners write its own.
    if (C == Cache::bf16 && partial_tile(tile, index)) zero_tail(sm, tile, index, wt, wg);
    issue_scores<kF16>(sm, index, rope, s);
    hopper::wgmma_wait<0>();
    hopper::pin_registers(s);
  };
  if (wg < n) scores(wg);
  mark_block(BlockMark::first_s, n);

  for (int a = 0; a < n; a += 2) {
    const int b = a + 1;
    const bool has_b = b < n;
    const bool next_a = a + 2 < n, next_b = b + 2 < n;
    // Group g of tile t's stage is free for the producer (which refills it with tile t + 2).
    auto free_group = [&](int t, ChunkGroup g) {
      if (wt == 0) hopper::mbarrier_arrive(sm.empty_bar(t & 1, g));
    };
    if (wg == 0) {
      // ---- C0: tile A, then O_L through tile B ----------------------------------------------
      if (next_a) free_group(a, kRopeGroup);
      float f_a[2];
      std::uint32_t packed[8][2];
      wide_tile_softmax<kF16>(s, t0_of(a), lim, quad, scale_log2, st.m, st.l, f_a, packed);
      store_p(sm.p0, rows, quad, packed);
      publish_rows(sm, rows, quad, st);
      hopper::fence_proxy_async_shared();
      named_barrier_arrive(kAReady, kConsumerThreads);
      rescale_o(o, f_a[0], f_a[1]);
      issue_pv<kF16>(o, sm.p0, sm.stage(a), 0);
      hopper::wgmma_wait<0>();
      hopper::pin_registers(o);
      if (next_a) free_group(a, kLowGroup);
      if (has_b) {
        named_barrier_sync(kBReady, kConsumerThreads);
        const float m_a[2] = {st.m[0], st.m[1]};
        read_rows(sm, rows, quad, st);
        const float f_b[2] = {factor_between(m_a[0], st.m[0]), factor_between(m_a[1], st.m[1])};
        rescale_o(o, f_b[0], f_b[1]);
        named_barrier_sync(kArIssued, kConsumerThreads);
        issue_pv<kF16>(o, sm.p1, sm.stage(b), 0);
        named_barrier_arrive(kBlIssued, kConsumerThreads);
        hopper::wgmma_wait<0>();
        hopper::pin_registers(o);
        if (next_b) free_group(b, kLowGroup);
      }
      if (next_a) scores(a + 2);
    } else {
      // ---- C1: tile B, and O_R through tiles A and B ----------------------------------------
      if (next_b) free_group(b, kRopeGroup);
      named_barrier_sync(kAReady, kConsumerThreads);
      const float m_before_a[2] = {st.m[0], st.m[1]};
      read_rows(sm, rows, quad, st);
      const float f_a[2] = {factor_between(m_before_a[0], st.m[0]),
                            factor_between(m_before_a[1], st.m[1])};
      float f_b[2] = {1.0f, 1.0f};
      if (has_b) {
        std::uint32_t packed[8][2];
        wide_tile_softmax<kF16>(s, t0_of(b), lim, quad, scale_log2, st.m, st.l, f_b, packed);
        store_p(sm.p1, rows, quad, packed);
        publish_rows(sm, rows, quad, st);
        hopper::fence_proxy_async_shared();
        named_barrier_arrive(kBReady, kConsumerThreads);
      }
      rescale_o(o, f_a[0], f_a[1]);
      issue_pv<kF16>(o, sm.p0, sm.stage(a), 1);
      if (has_b) named_barrier_arrive(kArIssued, kConsumerThreads);
      hopper::wgmma_wait<0>();
      hopper::pin_registers(o);
      if (next_a) free_group(a, kHighGroup);
      if (has_b) {
        rescale_o(o, f_b[0], f_b[1]);
        named_barrier_sync(kBlIssued, kConsumerThreads);
        issue_pv<kF16>(o, sm.p1, sm.stage(b), 1);
        hopper::wgmma_wait<0>();
        hopper::pin_registers(o);
        if (next_b) free_group(b, kHighGroup);
        if (next_b) scores(b + 2);
      }
    }
  }
  mark_block(BlockMark::walked, n);
  named_barrier_sync(kFinalRows, kConsumerThreads);  // the last tile's m and l are in place
  mark_block(BlockMark::rows_ready, n);

  const bool partial = tile.partial_row >= 0;
  const bool packed = !partial && p.final_rows.group_heads != 0;
  // Rows in the plain layout go out through the KV stages, which no box writes any more: bf16
  // rows, or fp32 ones (the partials, as the DCP step's ag_rs combine takes them).
  const bool bf16_rows = !partial && p.final_rows.bf16;
  const std::int64_t first = first_output_item(p, tile);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_final = n > 0 ? sm.m[rows[r]] : -INFINITY;
    const float total = quad_sum(n > 0 ? sm.l[4 * rows[r] + quad] : 0.0f);
    if (rows[r] >= tile.num_pairs) continue;
    const std::int64_t item = first + rows[r];
    if (wg == 0 && quad == 0) store_lse(p, partial, packed, item, pair_lse(m_final, total));
    const float scale = output_scale(p, total);
    const int col = 256 * wg + 2 * quad;
    if (packed) {
      store_packed_row(p, output_offset(p.final_rows, item, p.num_heads) + col, o, r, scale);
    } else if (bf16_rows) {
      stage_output_row<2>(sm.stage(0), rows[r], col, o, r, scale);
    } else {
      stage_output_row<4>(sm.stage(0), rows[r], col, o, r, scale);
    }
  }
  // A warp stages and copies out its own rows' half (its 16 rows, its warpgroup's 256 columns),
  // so only the warp's own lanes need to be ordered.
  if (!packed && 16 * warp < tile.num_pairs) {
    __syncwarp();
    void* out = partial ? static_cast<void*>(p.partial_out) : p.final_rows.out;
    if (bf16_rows) {
      copy_staged_half_rows<2>(out, sm.stage(0), first, 16 * warp, tile.num_pairs, wg, lane);
    } else {
      copy_staged_half_rows<4>(out, sm.stage(0), first, 16 * warp, tile.num_pairs, wg, lane);
    }
  }
  mark_block(BlockMark::end, n);
}

}  // namespace sm90::rounds
}  // namespace dcpmla::cuda
