// The host side of the CUDA decode launch (no GPU needed): every (row, head) pair of every work
// item is in exactly one tile, tiles carry the right visible KV end, merge rows and padding match
// the plan, and the packed device image holds exactly those arrays.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/decode/launch_plan.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "dcpmla/testing/scenario.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using cuda::build_launch_plan;
using cuda::DecodeTile;
using cuda::kTilePairs;
using cuda::LaunchPlan;

// Everything build_launch_plan promises, checked by brute force.
void check_launch_plan(const Plan& plan, const LaunchPlan& lp, int tile_pairs) {
  const int H = plan.config.num_heads;
  // (work item index by (request, kv_begin)) -> pairs seen
  std::map<std::tuple<int, int, int>, std::vector<int>> seen;
  for (const DecodeTile& t : lp.tiles) {
    ASSERT_GE(t.num_pairs, 1);
    ASSERT_LE(t.num_pairs, tile_pairs);
    const auto it = std::find_if(plan.work.begin(), plan.work.end(), [&](const WorkItem& w) {
      return w.request == t.request && w.kv_begin == t.kv_begin && w.kv_end == t.kv_end &&
             w.partial_row == t.partial_row;
    });
    ASSERT_NE(it, plan.work.end()) << "tile of request " << t.request << " matches no work item";
    const WorkItem& w = *it;
    ASSERT_EQ(t.row_begin, w.row_begin);
    ASSERT_EQ(t.pair_begin % tile_pairs, 0);
    ASSERT_LE(t.pair_begin + t.num_pairs, w.num_rows * H);
    auto& pairs = seen[{w.request, w.kv_begin, w.partial_row}];
    std::int32_t visible = w.kv_begin;
    for (int p = t.pair_begin; p < t.pair_begin + t.num_pairs; ++p) {
      pairs.push_back(p);
      const int row = w.row_begin + p / H;
      visible = std::max(visible, std::min(plan.row_local_bound[row], w.kv_end));
    }
    ASSERT_EQ(t.kv_visible_end, visible);
  }
  ASSERT_EQ(seen.size(), plan.work.size());
  for (const WorkItem& w : plan.work) {
    auto pairs = seen[{w.request, w.kv_begin, w.partial_row}];
    std::sort(pairs.begin(), pairs.end());
    ASSERT_EQ(int(pairs.size()), w.num_rows * H) << "request " << w.request;
    for (int p = 0; p < int(pairs.size()); ++p) ASSERT_EQ(pairs[p], p);
  }
  // A work item's tiles are adjacent, and items come longest KV walk (64-token tiles) first.
  std::set<std::tuple<int, int, int>> done;
  std::int64_t last_walk = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i < lp.tiles.size();) {
    const DecodeTile& first = lp.tiles[i];
    const std::tuple<int, int, int> key{first.request, first.kv_begin, first.partial_row};
    ASSERT_TRUE(done.insert(key).second) << "the tiles of request " << first.request << " at KV "
                                         << first.kv_begin << " are not adjacent";
    std::int64_t walk = 0;
    for (; i < lp.tiles.size() && lp.tiles[i].request == first.request &&
           lp.tiles[i].kv_begin == first.kv_begin && lp.tiles[i].partial_row == first.partial_row;
         ++i) {
      const DecodeTile& t = lp.tiles[i];
      walk = std::max<std::int64_t>(
          walk, (t.kv_visible_end - t.kv_begin + cuda::kTileKeys - 1) / cuda::kTileKeys);
    }
    ASSERT_LE(walk, last_walk) << "work items are not longest first";
    last_walk = walk;
  }
  std::size_t merge_rows = 0;
  for (const SplitMerge& m : plan.merges) {
    for (int j = 0; j < m.num_rows; ++j) {
      const auto& r = lp.merge_rows.at(merge_rows++);
      ASSERT_EQ(r.out_row, m.row_begin + j);
      ASSERT_EQ(r.first_partial_row, m.first_partial_row + j);
      ASSERT_EQ(r.num_splits, m.num_splits);
      ASSERT_EQ(r.split_stride_rows, m.num_rows);
    }
  }
  ASSERT_EQ(merge_rows, lp.merge_rows.size());
  ASSERT_EQ(lp.padding_begin, plan.num_real_rows);
  ASSERT_EQ(lp.padding_end, plan.num_rows);
}

TEST(CudaLaunchPlan, RandomPlansAreCoveredExactlyOnce) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 150; ++iter) {
    testing::ScenarioSpec spec;
    const int worlds[] = {1, 2, 4, 8};
    const int heads[] = {1, 2, 3, 7, 16, 64, 96, 128};
    const int sizes[] = {1, 16, 32, 64};
    spec.world = worlds[rng() % 4];
    do {
      spec.heads = heads[rng() % 8];
    } while (spec.heads % spec.world != 0);
    spec.block_size = sizes[rng() % 4];
    spec.interleave = spec.block_size % 4 == 0 ? 1 << (rng() % 3) : 1;
    spec.requests = 1 + int(rng() % 6);
    spec.max_drafts = int(rng() % 16);
    spec.max_context = spec.max_drafts + 1 + std::int64_t(rng() % 700);
    spec.padding_rows = int(rng() % 4);
    spec.full_mask_fraction = 0.3;
    spec.seed = iter;
    const testing::Scenario sc = testing::make_scenario(spec);
    PlanLimits limits;
    switch (rng() % 3) {
      case 0:
        break;
      case 1:
        limits.kv_chunk_blocks = 1 + int(rng() % 3);
        break;
      default:
        limits.target_work_items = 1 + int(rng() % 64);
        break;
    }
    for (int rank = 0; rank < spec.world; ++rank) {
      SCOPED_TRACE(testing::describe(spec) + " rank " + std::to_string(rank));
      const Plan plan = make_plan(sc.batch, {{spec.world, rank, spec.interleave},
                                             spec.heads,
                                             spec.block_size,
                                             sc.num_blocks,
                                             limits});
      for (int tile_pairs : {kTilePairs, 5}) {
        const LaunchPlan lp = build_launch_plan(plan, tile_pairs);
        check_launch_plan(plan, lp, tile_pairs);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// SPEC ragged (8, 2), T = [100, 40], W = 2, H = 16: request 0 has 8 x 16 = 128 pairs in two
// tiles (rows 0-3 and 4-7), request 1 has 2 x 16 = 32 pairs in one tile.
TEST(CudaLaunchPlan, SpecRaggedBatchTiles) {
  Batch batch;
  batch.query_start_loc = {0, 8, 10};
  batch.total_len = {100, 40};
  batch.max_blocks = 2;
  batch.block_table = {0, 1, 2, 3};
  const Plan plan = make_plan(batch, {{2, 1, 1}, 16, 64, 4, {}});
  const LaunchPlan lp = build_launch_plan(plan);
  ASSERT_EQ(lp.tiles.size(), 3u);
  std::vector<DecodeTile> tiles = lp.tiles;
  std::sort(tiles.begin(), tiles.end(), [](const DecodeTile& a, const DecodeTile& b) {
    return std::tie(a.request, a.pair_begin) < std::tie(b.request, b.pair_begin);
  });
  // Rank 1 local bounds: rows 0..7 of request 0 have global bounds 93..100 -> local 46..50.
  EXPECT_EQ(tiles[0].num_pairs, 64);
  EXPECT_EQ(tiles[0].kv_visible_end, plan.row_local_bound[3]);
  EXPECT_EQ(tiles[1].pair_begin, 64);
  EXPECT_EQ(tiles[1].kv_visible_end, plan.row_local_bound[7]);
  EXPECT_EQ(tiles[1].kv_visible_end, 50);
  EXPECT_EQ(tiles[2].request, 1);
  EXPECT_EQ(tiles[2].row_begin, 8);
  EXPECT_EQ(tiles[2].num_pairs, 32);
  EXPECT_EQ(tiles[2].kv_visible_end, 20);  // local_len(1, 40) on W = 2
  check_launch_plan(plan, lp, kTilePairs);
}

// The benchmark's (64, 4096, 128, 8): the 8 causal rows of a request see 4089..4096 tokens, one
// walk of 64 tiles, so each request's 16 thread blocks stay together and the requests keep their
// order; sorting by the exact visible KV would put each row's blocks in a different wave.
TEST(CudaLaunchPlan, CausalRowsOfOneRequestRunTogether) {
  const int B = 64, Q = 8, T = 4096, H = 128;
  Batch batch;
  batch.query_start_loc.push_back(0);
  for (int b = 0; b < B; ++b) {
    batch.query_start_loc.push_back(batch.query_start_loc.back() + Q);
    batch.total_len.push_back(T);
  }
  batch.max_blocks = T / 64;
  batch.block_table.assign(std::size_t(B) * batch.max_blocks, 0);
  const Plan plan = make_plan(batch, {{1, 0, 1}, H, 64, 1, {}});
  const LaunchPlan lp = build_launch_plan(plan);
  const int per_request = Q * H / kTilePairs;
  ASSERT_EQ(int(lp.tiles.size()), B * per_request);
  for (int i = 0; i < int(lp.tiles.size()); ++i) {
    EXPECT_EQ(lp.tiles[i].request, i / per_request) << "tile " << i;
    EXPECT_EQ(lp.tiles[i].pair_begin, (i % per_request) * kTilePairs) << "tile " << i;
  }
  EXPECT_EQ(lp.tiles[0].kv_visible_end, T - Q + 1);
  EXPECT_EQ(lp.tiles[per_request - 1].kv_visible_end, T);
  check_launch_plan(plan, lp, kTilePairs);
}

TEST(CudaLaunchPlan, PackedImageHoldsTheArrays) {
  const testing::Scenario sc = testing::make_scenario({});
  PlanLimits limits;
  limits.kv_chunk_blocks = 1;
  const Plan plan = make_plan(
      sc.batch, {{sc.spec.world, 0, 1}, sc.spec.heads, sc.spec.block_size, sc.num_blocks, limits});
  const LaunchPlan lp = build_launch_plan(plan);
  ASSERT_FALSE(lp.merge_rows.empty());
  cuda::PackedLaunchPlan packed;
  const cuda::LaunchCapacity cap = cuda::capacity_of(lp, plan);
  cuda::pack_launch_plan(lp, plan, cap, packed);
  cuda::PlanHeader header;
  std::memcpy(&header, packed.bytes.data() + packed.header_offset, sizeof header);
  EXPECT_EQ(header.num_tiles, std::int64_t(lp.tiles.size()));
  EXPECT_EQ(header.num_merge_rows, std::int64_t(lp.merge_rows.size()));
  EXPECT_EQ(header.padding_begin, lp.padding_begin);
  EXPECT_EQ(header.padding_end, lp.padding_end);
  EXPECT_EQ(packed.tiles_offset % 16, 0u);
  EXPECT_EQ(packed.merge_rows_offset % 16, 0u);
  EXPECT_EQ(packed.row_bound_offset % 16, 0u);
  EXPECT_EQ(packed.bytes.size() % 16, 0u);
  EXPECT_EQ(std::memcmp(packed.bytes.data() + packed.tiles_offset, lp.tiles.data(),
                        lp.tiles.size() * sizeof(DecodeTile)),
            0);
  EXPECT_EQ(std::memcmp(packed.bytes.data() + packed.merge_rows_offset, lp.merge_rows.data(),
                        lp.merge_rows.size() * sizeof(cuda::MergeRow)),
            0);
  EXPECT_EQ(std::memcmp(packed.bytes.data() + packed.row_bound_offset, plan.row_local_bound.data(),
                        plan.row_local_bound.size() * 4),
            0);
  // Packing the same plan twice gives the same bytes (the backend skips unchanged uploads).
  cuda::PackedLaunchPlan again;
  cuda::pack_launch_plan(build_launch_plan(plan), plan, cap, again);
  EXPECT_EQ(again.bytes, packed.bytes);
  // A larger capacity keeps every array and moves the sections to fixed places; a smaller one
  // is refused.
  cuda::PackedLaunchPlan roomy;
  const cuda::LaunchCapacity big{cap.tiles + 100, cap.merge_rows + 7, cap.rows + 3};
  cuda::pack_launch_plan(lp, plan, big, roomy);
  EXPECT_GT(roomy.bytes.size(), packed.bytes.size());
  EXPECT_EQ(std::memcmp(roomy.bytes.data() + roomy.tiles_offset, lp.tiles.data(),
                        lp.tiles.size() * sizeof(DecodeTile)),
            0);
  EXPECT_EQ(roomy.row_bound_offset - roomy.merge_rows_offset,
            (std::size_t(big.merge_rows) * sizeof(cuda::MergeRow) + 15) / 16 * 16);
  cuda::LaunchCapacity small = cap;
  small.tiles -= 1;
  EXPECT_THROW(cuda::pack_launch_plan(lp, plan, small, again), Error);
}

TEST(CudaLaunchPlan, HeadCountsAndQueryLengths) {
  for (int H : {1, 3, 16, 96, 128}) {
    for (int Q : {1, 5, 16}) {
      Batch batch;
      batch.query_start_loc = {0, Q};
      batch.total_len = {Q + 10};
      batch.max_blocks = 1;
      batch.block_table = {0};
      const Plan plan = make_plan(batch, {{1, 0, 1}, H, 64, 1, {}});
      const LaunchPlan lp = build_launch_plan(plan);
      EXPECT_EQ(int(lp.tiles.size()), (Q * H + kTilePairs - 1) / kTilePairs) << H << " " << Q;
      check_launch_plan(plan, lp, kTilePairs);
    }
  }
}

// Requests of (Q, total length) at H heads, one block table row each, unsplit.
Plan plan_of(int H, const std::vector<std::pair<int, int>>& requests) {
  Batch batch;
  batch.query_start_loc = {0};
  int max_blocks = 1;
  for (const auto& [q, len] : requests) max_blocks = std::max(max_blocks, (len + 63) / 64);
  batch.max_blocks = max_blocks;
  for (const auto& [q, len] : requests) {
    batch.query_start_loc.push_back(batch.query_start_loc.back() + q);
    batch.total_len.push_back(len);
    for (int j = 0; j < max_blocks; ++j) batch.block_table.push_back(j);
  }
  return make_plan(batch, {{1, 0, 1}, H, 64, max_blocks, {}});
}

TEST(CudaLaunchPlan, KvSharedWhenMostTokensHaveSeveralRowTiles) {
  using cuda::kv_mostly_shared;
  EXPECT_FALSE(kv_mostly_shared(plan_of(16, {{1, 8192}, {1, 8192}})));  // 16 pairs: one tile
  EXPECT_FALSE(kv_mostly_shared(plan_of(64, {{1, 4096}})));             // 64 pairs: one tile
  EXPECT_TRUE(kv_mostly_shared(plan_of(128, {{1, 4096}})));             // two row tiles
  EXPECT_TRUE(kv_mostly_shared(plan_of(16, {{8, 4096}})));              // 128 pairs
  // By tokens, not by items: one long shared request outweighs two short single-tile ones.
  EXPECT_TRUE(kv_mostly_shared(plan_of(16, {{5, 8192}, {1, 2048}, {2, 2048}})));
  EXPECT_FALSE(kv_mostly_shared(plan_of(16, {{5, 2048}, {1, 8192}, {4, 2048}})));
  EXPECT_FALSE(kv_mostly_shared(plan_of(16, {})));  // no work
}

TEST(CudaLaunchPlan, EmptyRankHasEmptyTiles) {
  // T = 1 on W = 4: ranks 1..3 hold nothing; their tiles have no visible KV.
  Batch batch;
  batch.query_start_loc = {0, 1};
  batch.total_len = {1};
  batch.max_blocks = 1;
  batch.block_table = {0};
  const Plan plan = make_plan(batch, {{4, 2, 1}, 8, 16, 1, {}});
  const LaunchPlan lp = build_launch_plan(plan);
  ASSERT_EQ(lp.tiles.size(), 1u);
  EXPECT_EQ(lp.tiles[0].kv_begin, 0);
  EXPECT_EQ(lp.tiles[0].kv_end, 0);
  EXPECT_EQ(lp.tiles[0].kv_visible_end, 0);
}

// B requests of Q rows and T tokens (one block-table column: gpu_plan_limits reads no ids).
Batch uniform_batch(int B, int Q, int T) {
  Batch b;
  b.query_start_loc.push_back(0);
  for (int i = 0; i < B; ++i) {
    b.query_start_loc.push_back(b.query_start_loc.back() + Q);
    b.total_len.push_back(T);
  }
  b.max_blocks = 1;
  b.block_table.assign(std::size_t(B), 0);
  return b;
}

TEST(CudaLaunchPlan, GpuPlanLimitsMinimiseWavesTimesChunk) {
  const auto uniform = uniform_batch;
  const Sharding one{1, 0, 1};
  // H = 128, Q = 8: 16 thread blocks per request, 1024 in all: no split.
  PlanLimits lim = cuda::gpu_plan_limits(uniform(64, 8, 4096), one, 128, 64, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 0);
  EXPECT_EQ(lim.target_work_items, 0);
  // One request, H = 128: 2 blocks, 66 splits of 1024 blocks -> chunks of 16 blocks.
  lim = cuda::gpu_plan_limits(uniform(1, 1, 65536), one, 128, 64, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 16);
  // Block size 16: 4096 blocks in 64 chunks (66 would save only 1.4 %); never under 256 tokens.
  lim = cuda::gpu_plan_limits(uniform(1, 1, 65536), one, 128, 16, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 64);
  lim = cuda::gpu_plan_limits(uniform(1, 1, 1000), one, 128, 16, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 16);
  // DCP: the local length on the rank (W = 8: 4096 of 32768 tokens), 32 x 2 blocks at H = 96.
  lim = cuda::gpu_plan_limits(uniform(32, 1, 32768), Sharding{8, 3, 1}, 96, 64, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 32);
  // 96 thread blocks for 132 SMs (half the requests need two): 4 splits make 3 full waves of a
  // quarter of the work each, better than one wave at 73 % occupancy.
  Batch mix = uniform(64, 1, 32768);
  for (int b = 0; b < 64; ++b)
    mix.query_start_loc[b + 1] = mix.query_start_loc[b] + (b % 2 ? 8 : 1);
  lim = cuda::gpu_plan_limits(mix, one, 16, 64, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 128);
  // The benchmark's ragged mix (Q 1..8, 285 rows) at H 128, L 4K: 570 thread blocks, 4.3 waves.
  // Cut in 2, the waves shrink by 7 % but 2 x 36480 pairs' partials are written and merged
  // (measured: 642 + 215 us against 678 us unsplit): no split.
  const int mix_q[64] = {6, 1, 2, 3, 3, 2, 5, 6, 1, 5, 2, 2, 8, 4, 5, 2, 4, 7, 4, 5, 4, 5,
                         8, 2, 6, 5, 3, 2, 1, 8, 4, 8, 1, 7, 7, 4, 6, 2, 2, 3, 4, 6, 6, 6,
                         4, 2, 4, 1, 5, 6, 7, 8, 5, 8, 8, 2, 6, 2, 4, 7, 7, 2, 2, 8};
  Batch bench_mix = uniform(64, 1, 4096);
  for (int b = 0; b < 64; ++b)
    bench_mix.query_start_loc[b + 1] = bench_mix.query_start_loc[b] + mix_q[b];
  lim = cuda::gpu_plan_limits(bench_mix, one, 128, 64, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 0);
  Batch ragged = uniform(2, 1, 100);
  ragged.query_start_loc = {0, 1, 4};
  EXPECT_THROW(cuda::gpu_plan_limits(ragged, one, 0, 64, 132), Error);
  EXPECT_THROW(cuda::gpu_plan_limits(ragged, one, 64, 64, 0), Error);
}

// Unsplit batches whose last wave of thread blocks is partly filled: only the requests that
// would start in it are cut, into chunks that spread them over the SMs.
TEST(CudaLaunchPlan, GpuPlanLimitsCutOnlyTheLastWavesRequests) {
  const Sharding one{1, 0, 1};
  // 136 requests of 4 thread blocks (H 128, Q 2) on 132 SMs: 544 blocks, 4 waves and 16
  // blocks; the last 4 requests are cut, the others not.
  PlanLimits lim = cuda::gpu_plan_limits(uniform_batch(136, 2, 4096), one, 128, 64, 132);
  EXPECT_EQ(lim.kv_chunk_blocks, 0);
  ASSERT_EQ(lim.request_chunk_blocks.size(), 136u);
  for (int b = 0; b < 136; ++b) {
    if (b < 132) {
      EXPECT_EQ(lim.request_chunk_blocks[b], 0) << b;
    } else {
      EXPECT_GT(lim.request_chunk_blocks[b], 0) << b;
      EXPECT_LT(lim.request_chunk_blocks[b], 64) << b;
    }
  }
  // Full waves (132 requests of 4 blocks): nothing to cut.
  lim = cuda::gpu_plan_limits(uniform_batch(132, 2, 4096), one, 128, 64, 132);
  EXPECT_TRUE(lim.request_chunk_blocks.empty());
  // A last wave nearly full (1024 blocks: 7 waves and 100 blocks): cutting does not pay.
  lim = cuda::gpu_plan_limits(uniform_batch(64, 8, 4096), one, 128, 64, 132);
  EXPECT_TRUE(lim.request_chunk_blocks.empty());
  // The plan cuts exactly those requests (and the merge covers them).
  Batch b = uniform_batch(136, 2, 4096);
  b.max_blocks = 64;
  b.block_table.assign(std::size_t(136) * 64, 0);
  PlanConfig cfg;
  cfg.sharding = one;
  cfg.num_heads = 128;
  cfg.block_size = 64;
  cfg.num_blocks = 1;
  cfg.limits = cuda::gpu_plan_limits(b, one, 128, 64, 132);
  const Plan plan = make_plan(b, cfg);
  ASSERT_EQ(plan.merges.size(), 4u);
  for (const SplitMerge& m : plan.merges) EXPECT_GE(m.request, 132);
}

}  // namespace
}  // namespace dcpmla
