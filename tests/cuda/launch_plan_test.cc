// The host side of the CUDA decode launch (no GPU needed): a plan's work items are the decode's
// thread blocks. Every (row, head) pair of every request split is in exactly one tile of at most
// kTilePairs pairs, tiles carry the right visible KV end and come in launch order, merge rows
// match the splits, and the schedule image holds exactly those arrays.
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

#include "core/plan_rules.h"
#include "core/schedule_layout.h"
#include "cuda/decode/launch_plan.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "dcpmla/schedule.h"
#include "dcpmla/testing/scenario.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using cuda::DecodeTile;
using cuda::kTilePairs;

// What the CUDA backend plans for on a machine without a GPU (the H200's), and no split.
constexpr DeviceModel kH200{132, kTilePairs, 256};
constexpr DeviceModel kNoSplit{0, kTilePairs, 256};

PlanConfig config_of(Sharding sh, int H, int bs, std::int64_t num_blocks, DeviceModel model,
                     int kv_chunk_blocks = 0) {
  PlanConfig c;
  c.sharding = sh;
  c.num_heads = H;
  c.block_size = bs;
  c.num_blocks = num_blocks;
  c.model = model;
  c.kv_chunk_blocks = kv_chunk_blocks;
  return c;
}

// Everything the decode kernels need of plan.work and plan.merges, checked by brute force.
void check_tiles(const Batch& batch, const Plan& plan, int tile_pairs) {
  const int H = plan.config.num_heads;
  // (request, kv_begin, partial_row): one request split -> pairs seen
  std::map<std::tuple<int, int, int>, std::vector<int>> seen;
  std::map<std::tuple<int, int, int>, int> kv_end_of;
  for (const DecodeTile& t : plan.work) {
    ASSERT_GE(t.request, 0);
    ASSERT_LT(t.request, batch.num_requests());
    ASSERT_GE(t.num_pairs, 1);
    ASSERT_LE(t.num_pairs, tile_pairs);
    ASSERT_EQ(t.row_begin, batch.query_start_loc[t.request]);
    const int Q = batch.q_len(t.request);
    // Tiles of tile_pairs, or two equal halves (rules::tile_step).
    const std::int32_t step =
        rules::tile_step(Q * H, rules::tiles_per_split(Q, H, tile_pairs), tile_pairs);
    ASSERT_LE(step, tile_pairs);
    ASSERT_EQ(t.pair_begin % step, 0);
    ASSERT_LE(t.pair_begin + t.num_pairs, Q * H);
    ASSERT_EQ(t.kv_begin % plan.config.block_size, 0);
    ASSERT_LE(t.kv_begin, t.kv_end);
    ASSERT_LE(t.kv_end, plan.request_local_len[t.request]);
    const std::tuple<int, int, int> key{t.request, t.kv_begin, t.partial_row};
    const auto [it, fresh] = kv_end_of.emplace(key, t.kv_end);
    ASSERT_EQ(it->second, t.kv_end) << "one split of request " << t.request << ", two KV ends";
    auto& pairs = seen[key];
    std::int32_t visible = t.kv_begin;
    for (int p = t.pair_begin; p < t.pair_begin + t.num_pairs; ++p) {
      pairs.push_back(p);
      const int row = t.row_begin + p / H;
      visible = std::max(visible, std::min(plan.row_local_bound[row], t.kv_end));
    }
    ASSERT_EQ(t.kv_visible_end, visible);
  }
  // Every pair of every split exactly once; the splits of a request cover its local KV.
  std::map<int, std::vector<std::pair<int, int>>> splits;  // request -> (kv_begin, partial_row)
  for (auto& [key, pairs] : seen) {
    const auto [request, kv_begin, partial_row] = key;
    std::sort(pairs.begin(), pairs.end());
    ASSERT_EQ(int(pairs.size()), batch.q_len(request) * H) << "request " << request;
    for (int p = 0; p < int(pairs.size()); ++p) ASSERT_EQ(pairs[p], p);
    splits[request].push_back({kv_begin, partial_row});
  }
  ASSERT_EQ(int(splits.size()), batch.num_requests()) << "a request without a work item";
  std::size_t merge_rows = 0;
  for (auto& [request, parts] : splits) {
    std::sort(parts.begin(), parts.end());
    const int Q = batch.q_len(request);
    int end = 0;
    for (const auto& [kv_begin, partial_row] : parts) {
      ASSERT_EQ(kv_begin, end) << "request " << request;
      end = kv_end_of[{request, kv_begin, partial_row}];
    }
    ASSERT_EQ(end, plan.request_local_len[request]) << "request " << request;
    if (parts.size() == 1) {
      ASSERT_EQ(parts[0].second, -1) << "an unsplit request writes the final rows";
      continue;
    }
    for (std::size_t k = 0; k < parts.size(); ++k) {
      ASSERT_EQ(parts[k].second, parts[0].second + int(k) * Q) << "request " << request;
    }
    // One merge row per row of the split request, in request order.
    for (int j = 0; j < Q; ++j) {
      ASSERT_LT(merge_rows, plan.merges.size());
      const MergeRow& r = plan.merges[merge_rows];
      ASSERT_EQ(r.out_row, batch.query_start_loc[request] + j);
      ASSERT_EQ(r.first_partial_row, parts[0].second + j);
      ASSERT_EQ(r.num_splits, int(parts.size()));
      ASSERT_EQ(r.split_stride_rows, Q);
      ++merge_rows;
    }
  }
  ASSERT_EQ(merge_rows, plan.merges.size());
  // A split's tiles are adjacent, and splits come longest KV walk (64-token tiles) first.
  std::set<std::tuple<int, int, int>> done;
  std::int64_t last_walk = std::numeric_limits<std::int64_t>::max();
  const auto& tiles = plan.work;
  for (std::size_t i = 0; i < tiles.size();) {
    const DecodeTile& first = tiles[i];
    const std::tuple<int, int, int> key{first.request, first.kv_begin, first.partial_row};
    ASSERT_TRUE(done.insert(key).second) << "the tiles of request " << first.request << " at KV "
                                         << first.kv_begin << " are not adjacent";
    std::int64_t walk = 0;
    for (; i < tiles.size() && tiles[i].request == first.request &&
           tiles[i].kv_begin == first.kv_begin && tiles[i].partial_row == first.partial_row;
         ++i) {
      const DecodeTile& t = tiles[i];
      walk = std::max<std::int64_t>(
          walk, (t.kv_visible_end - t.kv_begin + cuda::kTileKeys - 1) / cuda::kTileKeys);
    }
    ASSERT_LE(walk, last_walk) << "work items are not longest first";
    last_walk = walk;
  }
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
    DeviceModel model = kNoSplit;
    int chunk = 0;
    switch (rng() % 3) {
      case 0:
        break;
      case 1:
        chunk = 1 + int(rng() % 3);
        break;
      default:
        model.workers = 1 + int(rng() % 64);
        model.min_split_tokens = spec.block_size;
        break;
    }
    for (int rank = 0; rank < spec.world; ++rank) {
      SCOPED_TRACE(testing::describe(spec) + " rank " + std::to_string(rank));
      // The kernels' tiles, and narrow ones (the planner cuts any tile width alike).
      for (int tile_pairs : {kTilePairs, 5}) {
        model.tile_pairs = tile_pairs;
        const Plan plan =
            make_plan(sc.batch, config_of({spec.world, rank, spec.interleave}, spec.heads,
                                          spec.block_size, sc.num_blocks, model, chunk));
        check_tiles(sc.batch, plan, tile_pairs);
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
  const Plan plan = make_plan(batch, config_of({2, 1, 1}, 16, 64, 4, kNoSplit));
  ASSERT_EQ(plan.work.size(), 3u);
  std::vector<DecodeTile> tiles(plan.work.begin(), plan.work.end());
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
  check_tiles(batch, plan, kTilePairs);
}

// The benchmark's (64, 4096, 128, 8): the 8 causal rows of a request see 4089..4096 tokens, one
// walk of 64 tiles, so each request's 16 thread blocks stay together and the requests keep their
// order; sorting by the exact visible KV would put each row's blocks in a different wave. (The
// H200's model does not split this batch.)
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
  const Plan plan = make_plan(batch, config_of({1, 0, 1}, H, 64, 1, kH200));
  const auto& tiles = plan.work;
  const int per_request = Q * H / kTilePairs;
  ASSERT_EQ(int(tiles.size()), B * per_request);
  for (int i = 0; i < int(tiles.size()); ++i) {
    EXPECT_EQ(tiles[i].request, i / per_request) << "tile " << i;
    EXPECT_EQ(tiles[i].pair_begin, (i % per_request) * kTilePairs) << "tile " << i;
  }
  EXPECT_EQ(tiles[0].kv_visible_end, T - Q + 1);
  EXPECT_EQ(tiles[per_request - 1].kv_visible_end, T);
  check_tiles(batch, plan, kTilePairs);
}

// The schedule image (what Schedule::update copies to the device and the kernels read): the
// header's counts and padding rows, and the row bounds, merge rows and tiles as the plan has them.
TEST(CudaLaunchPlan, ScheduleImageHoldsTheArrays) {
  const testing::Scenario sc = testing::make_scenario({});
  const Plan plan = make_plan(sc.batch, config_of({sc.spec.world, 0, 1}, sc.spec.heads,
                                                  sc.spec.block_size, sc.num_blocks, kNoSplit, 1));
  ASSERT_FALSE(plan.merges.empty());
  const ScheduleCapacity cap = capacity_of(plan);
  auto image_of = [&](const ScheduleCapacity& c) {
    std::vector<std::byte> image(schedule_bytes(c));
    const std::size_t used = pack_schedule(plan, c, image.data());
    EXPECT_LE(used, image.size());
    image.resize(used);
    return image;
  };
  const std::vector<std::byte> packed = image_of(cap);
  const ScheduleLayout l = schedule_layout(cap);
  ScheduleHeader header;
  std::memcpy(&header, packed.data(), sizeof header);
  EXPECT_EQ(header.num_items, std::int64_t(plan.work.size()));
  EXPECT_EQ(header.num_merge_rows, std::int64_t(plan.merges.size()));
  EXPECT_EQ(header.padding_begin, plan.num_real_rows);
  EXPECT_EQ(header.padding_end, plan.num_rows);
  EXPECT_EQ(header.fault, kNoFault);
  EXPECT_EQ(header.num_partial_rows, plan.num_partial_rows);
  EXPECT_EQ(header.max_splits, plan.max_splits);
  EXPECT_EQ(l.items % 16, 0u);
  EXPECT_EQ(l.merge_rows % 16, 0u);
  EXPECT_EQ(l.row_bound % 16, 0u);
  EXPECT_EQ(l.bytes % 16, 0u);
  EXPECT_EQ(
      std::memcmp(packed.data() + l.items, plan.work.data(), plan.work.size() * sizeof(DecodeTile)),
      0);
  EXPECT_EQ(std::memcmp(packed.data() + l.merge_rows, plan.merges.data(),
                        plan.merges.size() * sizeof(MergeRow)),
            0);
  EXPECT_EQ(std::memcmp(packed.data() + l.row_bound, plan.row_local_bound.data(),
                        plan.row_local_bound.size() * 4),
            0);
  // Packing the same plan twice gives the same bytes.
  EXPECT_EQ(image_of(cap), packed);
  // A larger capacity keeps every array and moves the sections to fixed places.
  ScheduleCapacity big = cap;
  big.work_items += 100;
  big.merge_rows += 7;
  big.rows += 3;
  const std::vector<std::byte> roomy = image_of(big);
  const ScheduleLayout lb = schedule_layout(big);
  EXPECT_GT(roomy.size(), packed.size());
  EXPECT_EQ(
      std::memcmp(roomy.data() + lb.items, plan.work.data(), plan.work.size() * sizeof(DecodeTile)),
      0);
  EXPECT_EQ(lb.items - lb.merge_rows,
            (std::size_t(big.merge_rows) * sizeof(MergeRow) + 15) / 16 * 16);
  // A schedule writes the same image; a smaller capacity is refused.
  auto cpu = make_cpu_backend(1);
  Schedule sched(*cpu, plan.config, big);
  sched.update(plan, nullptr);
  cpu->synchronize(nullptr);
  // (Section by section: the alignment gaps between them hold anything.)
  const auto* mem = static_cast<const std::byte*>(sched.memory());
  EXPECT_EQ(std::memcmp(mem, roomy.data(), sizeof(ScheduleHeader)), 0);
  EXPECT_EQ(
      std::memcmp(mem + lb.row_bound, roomy.data() + lb.row_bound, plan.row_local_bound.size() * 4),
      0);
  EXPECT_EQ(std::memcmp(mem + lb.merge_rows, roomy.data() + lb.merge_rows,
                        plan.merges.size() * sizeof(MergeRow)),
            0);
  EXPECT_EQ(
      std::memcmp(mem + lb.items, roomy.data() + lb.items, plan.work.size() * sizeof(DecodeTile)),
      0);
  ScheduleCapacity small = cap;
  small.work_items -= 1;
  Schedule tight(*cpu, plan.config, small);
  EXPECT_THROW(tight.update(plan, nullptr), Error);
}

TEST(CudaLaunchPlan, HeadCountsAndQueryLengths) {
  for (int H : {1, 3, 16, 96, 128}) {
    for (int Q : {1, 5, 16}) {
      Batch batch;
      batch.query_start_loc = {0, Q};
      batch.total_len = {Q + 10};
      batch.max_blocks = 1;
      batch.block_table = {0};
      const Plan plan = make_plan(batch, config_of({1, 0, 1}, H, 64, 1, kH200));
      EXPECT_EQ(int(plan.work.size()), (Q * H + kTilePairs - 1) / kTilePairs) << H << " " << Q;
      check_tiles(batch, plan, kTilePairs);
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
  return make_plan(batch, config_of({1, 0, 1}, H, 64, max_blocks, kNoSplit));
}

// Whether most KV tokens are read by several thread blocks (the bulk copies then keep the KV in
// L2): what a schedule's host view tells the decode after an update.
bool kv_mostly_shared(const Plan& plan) {
  auto cpu = make_cpu_backend(1);
  Schedule sched(*cpu, plan.config, capacity_of(plan));
  sched.update(plan, nullptr);
  return sched.host_view().kv_shared;
}

TEST(CudaLaunchPlan, KvSharedWhenMostTokensHaveSeveralRowTiles) {
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
  const Plan plan = make_plan(batch, config_of({4, 2, 1}, 8, 16, 1, kH200));
  ASSERT_EQ(plan.work.size(), 1u);
  EXPECT_EQ(plan.work[0].kv_begin, 0);
  EXPECT_EQ(plan.work[0].kv_end, 0);
  EXPECT_EQ(plan.work[0].kv_visible_end, 0);
}

// B requests of Q rows and T tokens (block ids are not read by the planner).
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

// The KV chunk (in blocks) of each request of an H200 plan: 0 where the request is not split.
std::vector<int> chunks_of(const Batch& batch, Sharding sh, int H, int bs) {
  const Plan plan = make_plan(batch, config_of(sh, H, bs, 1, kH200));
  std::vector<int> chunks(std::size_t(batch.num_requests()), 0);
  for (const WorkItem& w : plan.work) {
    if (w.partial_row >= 0 && w.kv_begin == 0) chunks[std::size_t(w.request)] = w.kv_end / bs;
  }
  return chunks;
}
std::vector<int> all(int B, int chunk) {
  return std::vector<int>(std::size_t(B), chunk);
}

TEST(CudaLaunchPlan, H200ModelMinimisesWavesTimesChunk) {
  const auto uniform = uniform_batch;
  const Sharding one{1, 0, 1};
  // H = 128, Q = 8: 16 thread blocks per request, 1024 in all: no split.
  EXPECT_EQ(chunks_of(uniform(64, 8, 4096), one, 128, 64), all(64, 0));
  // One request, H = 128: 2 blocks, 66 splits of 1024 blocks -> chunks of 16 blocks.
  EXPECT_EQ(chunks_of(uniform(1, 1, 65536), one, 128, 64), all(1, 16));
  // Block size 16: 4096 blocks in 64 chunks (66 would save only 1.4 %); never under 256 tokens.
  EXPECT_EQ(chunks_of(uniform(1, 1, 65536), one, 128, 16), all(1, 64));
  EXPECT_EQ(chunks_of(uniform(1, 1, 1000), one, 128, 16), all(1, 16));
  // DCP: the local length on the rank (W = 8: 4096 of 32768 tokens), 32 x 2 blocks at H = 96.
  EXPECT_EQ(chunks_of(uniform(32, 1, 32768), Sharding{8, 3, 1}, 96, 64), all(32, 32));
  // 96 thread blocks for 132 SMs (half the requests need two): 4 splits make 3 full waves of a
  // quarter of the work each, better than one wave at 73 % occupancy.
  Batch mix = uniform(64, 1, 32768);
  for (int b = 0; b < 64; ++b)
    mix.query_start_loc[b + 1] = mix.query_start_loc[b] + (b % 2 ? 8 : 1);
  EXPECT_EQ(chunks_of(mix, one, 16, 64), all(64, 128));
  // The benchmark's ragged mix (Q 1..8, 285 rows) at H 128, L 4K: 570 thread blocks, 4.3 waves.
  // Cut in 2, the waves shrink by 7 % but 2 x 36480 pairs' partials are written and merged
  // (measured: 642 + 215 us against 678 us unsplit): no batch-wide chunk (only the last wave's
  // requests may be cut, the test below).
  const int mix_q[64] = {6, 1, 2, 3, 3, 2, 5, 6, 1, 5, 2, 2, 8, 4, 5, 2, 4, 7, 4, 5, 4, 5,
                         8, 2, 6, 5, 3, 2, 1, 8, 4, 8, 1, 7, 7, 4, 6, 2, 2, 3, 4, 6, 6, 6,
                         4, 2, 4, 1, 5, 6, 7, 8, 5, 8, 8, 2, 6, 2, 4, 7, 7, 2, 2, 8};
  Batch bench_mix = uniform(64, 1, 4096);
  for (int b = 0; b < 64; ++b)
    bench_mix.query_start_loc[b + 1] = bench_mix.query_start_loc[b] + mix_q[b];
  const std::vector<int> bench_chunks = chunks_of(bench_mix, one, 128, 64);
  int bench_cut = 0, tail_blocks = 570 - 4 * 132;
  for (int c : bench_chunks) bench_cut += c > 0;
  EXPECT_LE(bench_cut, tail_blocks) << ::testing::PrintToString(bench_chunks);
}

// Unsplit batches whose last wave of thread blocks is partly filled: only the requests that
// would start in it are cut, into chunks that spread them over the SMs.
TEST(CudaLaunchPlan, H200ModelCutsOnlyTheLastWavesRequests) {
  const Sharding one{1, 0, 1};
  // 136 requests of 4 thread blocks (H 128, Q 2) on 132 SMs: 544 blocks, 4 waves and 16
  // blocks; the last 4 requests are cut, the others not.
  const std::vector<int> cut = chunks_of(uniform_batch(136, 2, 4096), one, 128, 64);
  for (int b = 0; b < 136; ++b) {
    if (b < 132) {
      EXPECT_EQ(cut[std::size_t(b)], 0) << b;
    } else {
      EXPECT_GT(cut[std::size_t(b)], 0) << b;
      EXPECT_LT(cut[std::size_t(b)], 64) << b;
    }
  }
  // Full waves (132 requests of 4 blocks): nothing to cut.
  EXPECT_EQ(chunks_of(uniform_batch(132, 2, 4096), one, 128, 64), all(132, 0));
  // A last wave nearly full (1024 blocks: 7 waves and 100 blocks): cutting does not pay.
  EXPECT_EQ(chunks_of(uniform_batch(64, 8, 4096), one, 128, 64), all(64, 0));
  // The merge covers exactly the cut requests' rows.
  const Plan plan = make_plan(uniform_batch(136, 2, 4096), config_of(one, 128, 64, 1, kH200));
  ASSERT_EQ(plan.merges.size(), 4u * 2);
  for (const MergeRow& m : plan.merges) EXPECT_GE(m.out_row, 132 * 2);
}

}  // namespace
}  // namespace dcpmla
