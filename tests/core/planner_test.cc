// The planner: row bounds, uniform classification, the device model's choice of splits (batch
// chunk and last-wave cut), and the cut of every request's local KV and pairs into work items in
// launch order, and merge rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dcpmla/error.h"
#include "dcpmla/plan.h"

namespace dcpmla {
namespace {

struct RandomProblem {
  Batch batch;
  PlanConfig config;
};

// A random batch and rank config with a block table large enough for rank 0 (the fullest).
RandomProblem random_problem(std::mt19937_64& rng) {
  RandomProblem p;
  const int W = 1 + int(rng() % 8);
  const int I = 1 << int(rng() % 3);
  const int bs_choices[] = {1, 2, 4, 16, 64};
  int bs = bs_choices[rng() % 5];
  if (bs % I) bs = I;
  p.config.sharding = {W, int(rng() % W), I};
  p.config.num_heads = 1 + int(rng() % 16);
  p.config.block_size = bs;
  Batch& b = p.batch;
  const int B = 1 + int(rng() % 6);
  b.query_start_loc = {0};
  std::int64_t max_blocks = 0;
  const Sharding r0{W, 0, I};
  const bool same_q = rng() % 3 == 0;
  const int fixed_q = 1 + int(rng() % 8);
  for (int r = 0; r < B; ++r) {
    const int Q = same_q ? fixed_q : 1 + int(rng() % 8);
    b.query_start_loc.push_back(b.query_start_loc.back() + Q);
    const std::int64_t T = Q + std::int64_t(rng() % (rng() % 2 ? 40 : 3000));
    b.total_len.push_back(T);
    b.mask.push_back(rng() % 4 == 0 ? Mask::full : Mask::causal);
    max_blocks = std::max(max_blocks, (r0.local_len(T) + bs - 1) / bs);
  }
  b.max_blocks = std::int32_t(max_blocks + rng() % 2);
  std::int64_t next = 0;
  b.block_table.assign(std::size_t(B) * b.max_blocks, -1);
  for (auto& id : b.block_table) id = std::int32_t(next++);
  p.config.num_blocks = std::max<std::int64_t>(1, next);
  b.num_tokens = rng() % 3 == 0 ? b.real_tokens() + 1 + std::int64_t(rng() % 4) : -1;
  // A device model of a few workers and short splits (contexts here are < 3000 tokens), so the
  // cost model splits often; tiles of 0 (all pairs), a few, or more pairs than a request has.
  DeviceModel model{1 + int(rng() % 32), 0, 1 + int(rng() % 300)};
  const int tile_choices[] = {0, 1, 3, 16, 64};
  model.tile_pairs = tile_choices[rng() % 5];
  switch (rng() % 4) {
    case 0:
      p.config.model = {.tile_pairs = model.tile_pairs};  // workers = 0: never split
      break;
    case 1:
      p.config.model = {.tile_pairs = model.tile_pairs};
      p.config.kv_chunk_blocks = 1 + int(rng() % 4);
      break;
    case 2:
      p.config.model = model;
      break;
    default:
      p.config.model = model;
      p.config.kv_chunk_blocks = 1 + int(rng() % 4);
      break;
  }
  if (rng() % 4 == 0) {  // a capacity's limits
    p.config.max_work_items = std::int64_t(rng() % 40);
    p.config.max_partial_rows = std::int64_t(rng() % 60);
  }
  return p;
}

// One request split of a plan: its work items (consecutive in the plan) and what they share.
struct Split {
  std::int32_t request, kv_begin, kv_end, partial_row;
  std::int64_t walk;  // tiles of 64 keys up to the furthest visible end of its items
};

// The ceiling of a / b for positive b.
std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

void check_plan_invariants(const Batch& b, const PlanConfig& c, const Plan& plan) {
  const auto& sh = c.sharding;
  const int B = b.num_requests();
  const int H = c.num_heads;
  const int bs = c.block_size;
  ASSERT_EQ(plan.num_requests, B);
  ASSERT_EQ(plan.num_rows, b.rows());
  ASSERT_EQ(plan.num_real_rows, b.real_tokens());
  ASSERT_EQ(plan.row_local_bound.size(), std::size_t(b.rows()));
  ASSERT_EQ(plan.request_local_len.size(), std::size_t(B));

  // Row bounds: the batch's row requests and global bounds (batch.h), and the plan's local bound
  // of each row by brute force over the positions this rank owns.
  const auto row_request = row_requests(b);
  const auto row_bound = row_global_bounds(b);
  ASSERT_EQ(row_request.size(), std::size_t(b.rows()));
  ASSERT_EQ(row_bound.size(), std::size_t(b.rows()));
  for (int r = 0; r < B; ++r) {
    const int Q = b.q_len(r);
    const std::int64_t T = b.total_len[r];
    ASSERT_EQ(plan.request_local_len[r], sh.local_len(T));
    for (int j = 0; j < Q; ++j) {
      const int i = b.query_start_loc[r] + j;
      ASSERT_EQ(row_request[i], r);
      const std::int64_t bound = b.mask_of(r) == Mask::full ? T : T - (Q - 1 - j);
      ASSERT_EQ(row_bound[i], bound);
      std::int64_t visible = 0;
      for (std::int64_t g = 0; g < bound; ++g) visible += sh.owner(g) == sh.rank;
      ASSERT_EQ(plan.row_local_bound[i], visible) << "request " << r << " row " << j;
    }
  }
  for (std::int64_t i = b.real_tokens(); i < b.rows(); ++i) {
    ASSERT_EQ(row_request[i], -1) << "padding row " << i;
    ASSERT_EQ(row_bound[i], 0);
    ASSERT_EQ(plan.row_local_bound[i], 0);
  }

  // Work items: the items of one request split are consecutive and cover its Q x H pairs exactly
  // once in order, each at most tile_pairs wide (all pairs when tile_pairs = 0), with the visible
  // end of its own rows.
  std::vector<Split> splits;
  for (std::size_t i = 0; i < plan.work.size();) {
    const WorkItem& head = plan.work[i];
    ASSERT_GE(head.request, 0);
    ASSERT_LT(head.request, B);
    const std::int64_t pairs = std::int64_t(b.q_len(head.request)) * H;
    Split split{head.request, head.kv_begin, head.kv_end, head.partial_row, 0};
    std::int32_t furthest = head.kv_begin;
    std::int64_t next_pair = 0;
    for (; i < plan.work.size() && plan.work[i].request == head.request &&
           plan.work[i].kv_begin == head.kv_begin && next_pair < pairs;
         ++i) {
      const WorkItem& w = plan.work[i];
      SCOPED_TRACE(::testing::Message() << "work item " << i << " of request " << w.request);
      ASSERT_EQ(w.row_begin, b.query_start_loc[w.request]);
      ASSERT_EQ(w.kv_end, head.kv_end);
      ASSERT_EQ(w.partial_row, head.partial_row);
      ASSERT_EQ(w.pair_begin, next_pair) << "pairs out of order, missed or computed twice";
      ASSERT_GE(w.num_pairs, 1);
      ASSERT_LE(next_pair + w.num_pairs, pairs);
      if (c.model.tile_pairs > 0) {
        ASSERT_LE(w.num_pairs, c.model.tile_pairs);
      } else {
        ASSERT_EQ(w.num_pairs, pairs);
      }
      std::int32_t visible = w.kv_begin;
      for (std::int64_t j = w.pair_begin / H; j <= (w.pair_begin + w.num_pairs - 1) / H; ++j) {
        visible = std::max(visible, std::min(plan.row_local_bound[w.row_begin + j], w.kv_end));
      }
      ASSERT_EQ(w.kv_visible_end, visible);
      furthest = std::max(furthest, w.kv_visible_end);
      next_pair += w.num_pairs;
    }
    ASSERT_EQ(next_pair, pairs) << "request " << head.request << " split at " << head.kv_begin;
    split.walk = ceil_div(furthest - head.kv_begin, 64);
    splits.push_back(split);
  }
  // Launch order: the longest walk first; equal walks in request order, then KV order.
  for (std::size_t k = 1; k < splits.size(); ++k) {
    const Split& a = splits[k - 1];
    const Split& s = splits[k];
    ASSERT_TRUE(a.walk > s.walk || (a.walk == s.walk && std::tie(a.request, a.kv_begin) <
                                                            std::tie(s.request, s.kv_begin)))
        << "split " << k << " (request " << s.request << ", walk " << s.walk
        << ") launches after request " << a.request << " (walk " << a.walk << ")";
  }

  // Splits: every request has >= 1; they tile [0, local_len) at chunk-aligned block
  // boundaries; a split request's splits write partial rows merged by one MergeRow per row.
  std::map<int, std::vector<Split>> by_request;
  for (const Split& s : splits) by_request[s.request].push_back(s);
  ASSERT_EQ(int(by_request.size()), B);
  std::map<std::int32_t, MergeRow> merges;
  for (const auto& m : plan.merges) {
    ASSERT_TRUE(merges.emplace(m.out_row, m).second) << "two merges for row " << m.out_row;
  }
  std::vector<int> partial_use(std::size_t(plan.num_partial_rows), 0);
  const std::int64_t min_chunk = ceil_div(c.model.min_split_tokens, bs);
  std::int64_t merge_rows = 0;
  std::int32_t max_splits = 1;
  for (int r = 0; r < B; ++r) {
    auto& its = by_request[r];
    std::sort(its.begin(), its.end(),
              [](const Split& x, const Split& y) { return x.kv_begin < y.kv_begin; });
    const std::int64_t local = plan.request_local_len[r];
    const int Q = b.q_len(r);
    std::int64_t expect_begin = 0;
    const std::int64_t chunk = its.size() > 1 ? its[0].kv_end - its[0].kv_begin : 0;
    for (std::size_t s = 0; s < its.size(); ++s) {
      const auto& w = its[s];
      ASSERT_EQ(w.kv_begin, expect_begin);
      ASSERT_EQ(w.kv_begin % bs, 0);
      ASSERT_LE(w.kv_begin, w.kv_end);
      if (its.size() > 1) {
        ASSERT_LT(w.kv_begin, w.kv_end) << "empty chunk in a split request";
        // equal chunk lengths (a multiple of the block size) except the last
        ASSERT_EQ(w.kv_begin % chunk, 0);
        if (s + 1 < its.size()) {
          ASSERT_EQ(w.kv_end - w.kv_begin, chunk);
        }
      }
      expect_begin = w.kv_end;
    }
    ASSERT_EQ(expect_begin, local) << "splits of request " << r << " do not cover [0, local_len)";
    const int row_begin = b.query_start_loc[r];
    if (its.size() == 1) {
      ASSERT_EQ(its[0].partial_row, -1);
      for (int j = 0; j < Q; ++j) ASSERT_EQ(merges.count(row_begin + j), 0u);
      continue;
    }
    ASSERT_EQ(chunk % bs, 0);
    if (c.kv_chunk_blocks > 0) {
      ASSERT_EQ(chunk, std::int64_t(c.kv_chunk_blocks) * bs);
    } else {
      ASSERT_GT(c.model.workers, 0) << "a model of no workers split request " << r;
      ASSERT_GE(chunk, min_chunk * bs) << "a split under min_split_tokens";
      // The batch chunk splits at most 2 x workers times, the last-wave cut at most 8.
      ASSERT_LE(std::int64_t(its.size()), std::max<std::int64_t>(2 * c.model.workers, 8));
    }
    max_splits = std::max(max_splits, std::int32_t(its.size()));
    merge_rows += Q;
    for (int j = 0; j < Q; ++j) {
      ASSERT_EQ(merges.count(row_begin + j), 1u) << "row " << j << " of request " << r;
      const MergeRow& m = merges[row_begin + j];
      ASSERT_EQ(m.num_splits, int(its.size()));
      ASSERT_EQ(m.split_stride_rows, Q);
      ASSERT_EQ(m.first_partial_row, its[0].partial_row + j);
    }
    for (std::size_t s = 0; s < its.size(); ++s) {
      ASSERT_EQ(its[s].partial_row, its[0].partial_row + int(s) * Q);
      for (int j = 0; j < Q; ++j) {
        const std::int64_t pr = its[s].partial_row + j;
        ASSERT_GE(pr, 0);
        ASSERT_LT(pr, plan.num_partial_rows);
        ++partial_use[pr];
      }
    }
  }
  ASSERT_EQ(std::int64_t(plan.merges.size()), merge_rows);
  ASSERT_EQ(plan.max_splits, max_splits);
  for (int u : partial_use) ASSERT_EQ(u, 1) << "partial rows must be used exactly once";
  ASSERT_EQ(decode_workspace_bytes(plan),
            std::size_t(plan.num_partial_rows) * c.num_heads * (kLatentDim + 1) * sizeof(float));
  ASSERT_EQ(decode_workspace_bytes(plan), decode_workspace_bytes(plan.num_partial_rows, H));
  // A split the model chose keeps to the config's limits.
  if (c.kv_chunk_blocks == 0 && !plan.merges.empty()) {
    if (c.max_work_items >= 0) {
      ASSERT_LE(std::int64_t(plan.work.size()), c.max_work_items);
    }
    if (c.max_partial_rows >= 0) {
      ASSERT_LE(plan.num_partial_rows, c.max_partial_rows);
    }
  }
}

TEST(Planner, RandomBatchesSatisfyInvariants) {
  std::mt19937_64 rng(2024);
  int split = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const auto p = random_problem(rng);
    if (p.batch.rows() != p.batch.real_tokens()) continue;  // padded: the test below
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    Plan plan;
    ASSERT_NO_THROW(plan = make_plan(p.batch, p.config));
    check_plan_invariants(p.batch, p.config, plan);
    split += !plan.merges.empty() && p.config.kv_chunk_blocks == 0;
  }
  EXPECT_GT(split, 20) << "the cost model split too few batches to check its splits";
}

TEST(Planner, RandomPaddedBatchesSatisfyInvariants) {
  std::mt19937_64 rng(77);
  int checked = 0;
  for (int iter = 0; iter < 400; ++iter) {
    auto p = random_problem(rng);
    if (p.batch.rows() == p.batch.real_tokens()) continue;
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    const Plan plan = make_plan(p.batch, p.config);
    check_plan_invariants(p.batch, p.config, plan);
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// SPEC section 4: uniform iff num_tokens == B * max_Q (is_uniform, batch.h).
TEST(Planner, UniformClassification) {
  auto batch_of = [](std::vector<int> qs, std::int64_t T) {
    Batch b;
    b.query_start_loc = {0};
    for (int q : qs) {
      b.query_start_loc.push_back(b.query_start_loc.back() + q);
      b.total_len.push_back(T);
    }
    b.max_blocks = 4;
    b.block_table.resize(qs.size() * 4);
    for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i);
    return b;
  };
  EXPECT_TRUE(is_uniform(batch_of({4, 4, 4}, 50)));
  EXPECT_TRUE(is_uniform(batch_of({1, 1}, 50)));
  EXPECT_TRUE(is_uniform(batch_of({3}, 50)));
  // 8 + 2: 10 tokens, 2 requests; divisible, but not uniform
  EXPECT_FALSE(is_uniform(batch_of({8, 2}, 50)));
  EXPECT_FALSE(is_uniform(batch_of({8, 1}, 50)));
  EXPECT_FALSE(is_uniform(batch_of({2, 4, 6}, 50)));
  EXPECT_FALSE(is_uniform(batch_of({3, 3, 2, 4}, 50)));
}

// SPEC section 4: "A batch is uniform iff num_tokens == B * max_Q". Padding rows make a batch
// non-uniform.
TEST(Planner, UniformWithPadding) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 2;
  c.block_size = 16;
  c.num_blocks = 10;
  Batch b;
  b.query_start_loc = {0, 2, 4};
  b.total_len = {20, 30};
  b.max_blocks = 2;
  b.block_table = {0, 1, 2, 3};
  b.num_tokens = 6;  // 4 real rows + 2 padding rows
  const Plan plan = make_plan(b, c);
  EXPECT_EQ(plan.num_rows, 6);
  EXPECT_EQ(plan.num_real_rows, 4);
  EXPECT_FALSE(is_uniform(b)) << "6 rows (2 padding) != B * max_Q = 4";
  b.num_tokens = 4;  // explicit count without padding stays uniform
  EXPECT_TRUE(is_uniform(b));
}

TEST(Planner, FixedChunkCutsEveryRequestAtTheSamePlaces) {
  PlanConfig c;
  c.sharding = {2, 1, 2};
  c.num_heads = 3;
  c.block_size = 4;
  c.num_blocks = 1000;
  c.kv_chunk_blocks = 3;  // 12 local tokens per chunk
  Batch b;
  b.query_start_loc = {0, 2, 3, 7};
  b.total_len = {100, 10, 4};  // rank 1 of W=2, I=2 owns 2,3,6,7,10,11,...: 50, 4, 2
  b.max_blocks = 13;
  b.block_table.resize(3 * 13);
  for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i);
  const Plan plan = make_plan(b, c);
  check_plan_invariants(b, c, plan);
  ASSERT_EQ(plan.request_local_len, (std::vector<std::int32_t>{50, 4, 2}));
  std::vector<std::pair<int, int>> r0;
  for (const auto& w : plan.work) {
    if (w.request == 0) r0.emplace_back(w.kv_begin, w.kv_end);
  }
  std::sort(r0.begin(), r0.end());
  EXPECT_EQ(r0,
            (std::vector<std::pair<int, int>>{{0, 12}, {12, 24}, {24, 36}, {36, 48}, {48, 50}}));
  // One merge row per query row of request 0 (Q = 2), each over its 5 splits.
  ASSERT_EQ(plan.merges.size(), 2u);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(plan.merges[j].out_row, j);
    EXPECT_EQ(plan.merges[j].first_partial_row, j);
    EXPECT_EQ(plan.merges[j].num_splits, 5);
    EXPECT_EQ(plan.merges[j].split_stride_rows, 2);
  }
  EXPECT_EQ(plan.max_splits, 5);
  EXPECT_EQ(plan.num_partial_rows, 5 * 2);
  EXPECT_EQ(plan.work.size(), 7u);
}

// The model's splits stay within its bounds: none with workers = 0, never shorter than
// min_split_tokens, at most max(2 x workers, 8) a request (split_policy.cc), and within the
// config's limits.
TEST(Planner, ModelSplitsStayWithinItsBounds) {
  std::mt19937_64 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    auto p = random_problem(rng);
    p.config.kv_chunk_blocks = 0;
    p.config.model.workers = 1 + int(rng() % 64);
    p.config.model.min_split_tokens = 1 + int(rng() % 512);
    const Plan plan = make_plan(p.batch, p.config);
    check_plan_invariants(p.batch, p.config, plan);
    if (HasFatalFailure()) return;
    p.config.model.workers = 0;  // no split
    const Plan whole = make_plan(p.batch, p.config);
    EXPECT_EQ(whole.max_splits, 1);
    EXPECT_TRUE(whole.merges.empty());
    EXPECT_EQ(whole.num_partial_rows, 0);
    EXPECT_EQ(decode_workspace_bytes(whole), 0u);
    std::int64_t items = 0;  // one item per tile of each request
    for (int r = 0; r < p.batch.num_requests(); ++r) {
      const std::int64_t pairs = std::int64_t(p.batch.q_len(r)) * p.config.num_heads;
      items += p.config.model.tile_pairs > 0 ? ceil_div(pairs, p.config.model.tile_pairs) : 1;
    }
    EXPECT_EQ(std::int64_t(whole.work.size()), items);
  }
}

// Q = 3 rows of 5 heads (15 pairs) in tiles of 4 pairs, cut in chunks of 4 blocks (64 tokens):
// each split's items cover pairs [0, 4), [4, 8), [8, 12), [12, 15) in order, each seeing the
// bounds of its own rows (98, 99, 100 for a causal T = 100).
TEST(Planner, WorkItemsRespectTilePairs) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 5;
  c.block_size = 16;
  c.num_blocks = 7;
  c.model.tile_pairs = 4;
  c.kv_chunk_blocks = 4;
  Batch b;
  b.query_start_loc = {0, 3};
  b.total_len = {100};
  b.max_blocks = 7;
  b.block_table = {0, 1, 2, 3, 4, 5, 6};
  const Plan plan = make_plan(b, c);
  check_plan_invariants(b, c, plan);
  using Item = std::tuple<int, int, int, int, int, int, int, int>;
  std::vector<Item> got;
  for (const WorkItem& w : plan.work) {
    got.emplace_back(w.request, w.row_begin, w.pair_begin, w.num_pairs, w.kv_begin, w.kv_end,
                     w.kv_visible_end, w.partial_row);
  }
  // Both splits walk one tile of 64 keys: request order, then KV order. Pairs 4..7 are rows 0
  // and 1 (visible 99), 8..11 rows 1 and 2 (100); in the first split every row sees all 64.
  EXPECT_EQ(got, (std::vector<Item>{{0, 0, 0, 4, 0, 64, 64, 0},
                                    {0, 0, 4, 4, 0, 64, 64, 0},
                                    {0, 0, 8, 4, 0, 64, 64, 0},
                                    {0, 0, 12, 3, 0, 64, 64, 0},
                                    {0, 0, 0, 4, 64, 100, 98, 3},
                                    {0, 0, 4, 4, 64, 100, 99, 3},
                                    {0, 0, 8, 4, 64, 100, 100, 3},
                                    {0, 0, 12, 3, 64, 100, 100, 3}}));
  ASSERT_EQ(plan.merges.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(plan.merges[j].out_row, j);
    EXPECT_EQ(plan.merges[j].first_partial_row, j);
    EXPECT_EQ(plan.merges[j].num_splits, 2);
    EXPECT_EQ(plan.merges[j].split_stride_rows, 3);
  }
  EXPECT_EQ(plan.num_partial_rows, 6);
  // tile_pairs = 0: one item a split, with all 15 pairs.
  c.model.tile_pairs = 0;
  const Plan wide = make_plan(b, c);
  ASSERT_EQ(wide.work.size(), 2u);
  for (const WorkItem& w : wide.work) {
    EXPECT_EQ(w.pair_begin, 0);
    EXPECT_EQ(w.num_pairs, 15);
  }
  EXPECT_EQ(wide.work[1].kv_visible_end, 100);
}

// Launch order: the longest walk (in tiles of 64 keys) first, ties in request order. Walks:
// T = 100 -> 2 tiles, 1000 -> 16, 300 -> 5, 1000 -> 16, so requests 1, 3, 2, 0; request 1's two
// items (tiles of one row: 2 pairs of 2 heads) stay together, row 0 first.
TEST(Planner, WorkItemsAreInLaunchOrder) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 2;
  c.block_size = 16;
  c.num_blocks = 256;
  c.model.tile_pairs = 2;
  Batch b;
  b.query_start_loc = {0, 1, 3, 4, 5};
  b.total_len = {100, 1000, 300, 1000};
  b.max_blocks = 64;
  b.block_table.resize(4 * 64);
  for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i);
  const Plan plan = make_plan(b, c);
  check_plan_invariants(b, c, plan);
  using Item = std::tuple<int, int, int, int>;  // request, row_begin, pair_begin, visible end
  std::vector<Item> got;
  for (const WorkItem& w : plan.work) {
    got.emplace_back(w.request, w.row_begin, w.pair_begin, w.kv_visible_end);
  }
  EXPECT_EQ(got,
            (std::vector<Item>{
                {1, 1, 0, 999}, {1, 1, 2, 1000}, {3, 4, 0, 1000}, {2, 3, 0, 300}, {0, 0, 0, 100}}));
}

// The batch-wide chunk of split_policy.cc, computed by hand. W = 1, block size 16, H = 1, Q = 1,
// workers 4, min_split_tokens 256 (16 blocks); requests of 1024 and 4096 tokens (64 and 256
// blocks). Candidates: s = 1..8 (2 x workers) splits of the longest, chunk max(16, ceil(256 / s)):
// 256, 128, 86, 64, 52, 43, 37, 32 blocks. Cost (thousandths of a token): ceil(items / 4) waves
// x (chunk x 16 + 128) x 1000 + 37 per split pair:
//   256: 2 items, 1 wave  x 4224 = 4,224,000
//   128: 3 items, 1 wave  x 2176 + 2 x 37 = 2,176,074
//    86: 4 items, 1 wave  x 1504 + 3 x 37 = 1,504,111   <- best
//    64: 5 items, 2 waves x 1152 + 4 x 37 = 2,304,148   (64 blocks is not split by 64)
//    52: 7 items, 2 waves x  960 + 7 x 37 = 1,920,259
//    43: 8 items, 2 waves x  816 + 8 x 37 = 1,632,296
//    37: 9 items, 3 waves x  720 + 9 x 37 = 2,160,333
//    32: 10 items, 3 waves x 640 + 10 x 37 = 1,920,370
// The first within 2 % of the best is 86 blocks (1376 tokens): request 1 splits at 1376 and 2752,
// request 0 (64 blocks) stays whole. Walks: 1376 / 64 -> 22, 22, (4096 - 2752) / 64 -> 21 tiles,
// request 0 1024 / 64 = 16: request 1's splits launch first.
TEST(Planner, BatchChunkOnAHandComputedBatch) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 1;
  c.block_size = 16;
  c.num_blocks = 320;
  c.model = {4, 0, 256};
  Batch b;
  b.query_start_loc = {0, 1, 2};
  b.total_len = {1024, 4096};
  b.max_blocks = 256;
  b.block_table.resize(2 * 256);
  for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i % 320);
  const Plan plan = make_plan(b, c);
  check_plan_invariants(b, c, plan);
  using Range = std::tuple<int, int, int, int>;  // request, kv_begin, kv_end, partial_row
  std::vector<Range> got;
  for (const WorkItem& w : plan.work)
    got.emplace_back(w.request, w.kv_begin, w.kv_end, w.partial_row);
  EXPECT_EQ(got, (std::vector<Range>{
                     {1, 0, 1376, 0}, {1, 1376, 2752, 1}, {1, 2752, 4096, 2}, {0, 0, 1024, -1}}));
  ASSERT_EQ(plan.merges.size(), 1u);
  EXPECT_EQ(plan.merges[0].out_row, 1);
  EXPECT_EQ(plan.merges[0].first_partial_row, 0);
  EXPECT_EQ(plan.merges[0].num_splits, 3);
  EXPECT_EQ(plan.merges[0].split_stride_rows, 1);
  EXPECT_EQ(plan.max_splits, 3);
  EXPECT_EQ(plan.num_partial_rows, 3);

  // At most 3 work items: only 256 and 128 stay candidates (4,224,000 and 2,176,074), so request 1
  // splits in two chunks of 128 blocks (2048 tokens).
  c.max_work_items = 3;
  const Plan capped = make_plan(b, c);
  check_plan_invariants(b, c, capped);
  got.clear();
  for (const WorkItem& w : capped.work) {
    got.emplace_back(w.request, w.kv_begin, w.kv_end, w.partial_row);
  }
  EXPECT_EQ(got, (std::vector<Range>{{1, 0, 2048, 0}, {1, 2048, 4096, 1}, {0, 0, 1024, -1}}));
  // No partial rows: no split is allowed, and the last-wave cut does not apply either (2 items
  // for 4 workers fill less than one wave).
  c.max_work_items = -1;
  c.max_partial_rows = 0;
  const Plan whole = make_plan(b, c);
  check_plan_invariants(b, c, whole);
  EXPECT_TRUE(whole.merges.empty());
  EXPECT_EQ(whole.work.size(), 2u);
}

// The last-wave cut of split_policy.cc, computed by hand. W = 1, block size 16, H = 1, Q = 1,
// 8 workers, min_split_tokens 16 (one block). Requests: 128 tokens (8 blocks), then eight of
// 256 (16 blocks).
// The batch chunk (s = 1..16: chunks 16, 8, 6, 4, 3, 2, 1 blocks) keeps the batch whole:
//   16: 9 items, 2 waves x (256 + 128) = 768,000 (best);  8: 17 items, 3 waves x 256 = 768,000 +
//   16 x 37; 6: 26 items, 4 waves x 224 = 896,000 + ...; smaller chunks cost more still.
// The cut: 9 items for 8 workers, 2 waves; launch order by KV descending puts requests 1..8 in
// the first wave and request 0 alone in the last. Estimate: 384 + 256 = 640 tokens. Parts:
// min(8, 8 workers / 1 tail item) = 8; request 0's chunk max(1, ceil(8 / 8)) = 1 block: 8 splits,
// 8 split pairs. After: (640 - 256 + (16 + 128)) x 1000 + 8 x 37 = 528,296 <= 98 % of 640,000:
// request 0 is cut in 8 chunks of 16 tokens, which launch last (1 tile each, after the 4 of the
// others).
TEST(Planner, LastWaveCutOnAHandComputedBatch) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 1;
  c.block_size = 16;
  c.num_blocks = 9 * 16;
  c.model = {8, 0, 16};
  Batch b;
  b.query_start_loc = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  b.total_len = {128, 256, 256, 256, 256, 256, 256, 256, 256};
  b.max_blocks = 16;
  b.block_table.resize(9 * 16);
  for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i);
  const Plan plan = make_plan(b, c);
  check_plan_invariants(b, c, plan);
  using Range = std::tuple<int, int, int, int>;  // request, kv_begin, kv_end, partial_row
  std::vector<Range> want;
  for (int r = 1; r < 9; ++r) want.emplace_back(r, 0, 256, -1);
  for (int s = 0; s < 8; ++s) want.emplace_back(0, 16 * s, 16 * (s + 1), s);
  std::vector<Range> got;
  for (const WorkItem& w : plan.work)
    got.emplace_back(w.request, w.kv_begin, w.kv_end, w.partial_row);
  EXPECT_EQ(got, want);
  ASSERT_EQ(plan.merges.size(), 1u);
  EXPECT_EQ(plan.merges[0].out_row, 0);
  EXPECT_EQ(plan.merges[0].num_splits, 8);
  EXPECT_EQ(plan.max_splits, 8);
  EXPECT_EQ(plan.num_partial_rows, 8);
}

// Batches the last-wave cut leaves whole, computed by hand (as above: block size 16, H = 1,
// Q = 1, 8 workers, min_split_tokens 16 unless said).
TEST(Planner, LastWaveCutNeedsRoomAndAGain) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 1;
  c.block_size = 16;
  c.num_blocks = 13 * 17;
  c.model = {8, 0, 16};
  auto batch_of = [](int requests, std::int64_t T) {
    Batch b;
    b.query_start_loc = {0};
    for (int r = 0; r < requests; ++r) {
      b.query_start_loc.push_back(r + 1);
      b.total_len.push_back(T);
    }
    b.max_blocks = 17;
    b.block_table.resize(std::size_t(requests) * 17);
    for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i);
    return b;
  };
  // 13 requests of 16 blocks: the batch chunk keeps them whole (16: 13 items, 2 waves x 384 =
  // 768,000; 8: 26 items, 4 waves x 256 = 1,024,000 + ...; smaller chunks cost more), and the
  // last wave holds 5 items: min(8, 8 / 5) = 1 part, no cut.
  {
    const Batch b = batch_of(13, 256);
    const Plan plan = make_plan(b, c);
    check_plan_invariants(b, c, plan);
    EXPECT_TRUE(plan.merges.empty());
    EXPECT_EQ(plan.work.size(), 13u);
  }
  // 9 requests of 17 blocks (272 tokens), min_split_tokens 256 (16 blocks): the candidates are
  // 17 (9 items, 2 waves x 400 = 800,000) and 16 (18 items, 3 waves x 384 = 1,152,000 + ...), so
  // no batch chunk. The cut: request 8 alone in the last wave, 8 parts but chunks of at least 16
  // blocks: 2 splits. After: (800 - 400 + 384) x 1000 + 2 x 37 = 784,074, over 98 % of 800,000
  // (784,000): the 2 % gain is not reached, no cut.
  {
    c.model.min_split_tokens = 256;
    const Batch b = batch_of(9, 272);
    const Plan plan = make_plan(b, c);
    check_plan_invariants(b, c, plan);
    EXPECT_TRUE(plan.merges.empty());
    EXPECT_EQ(plan.work.size(), 9u);
  }
}

TEST(Planner, RequestWithNoLocalKeysStillHasAnItem) {
  PlanConfig c;
  c.sharding = {8, 7, 1};
  c.num_heads = 8;
  c.block_size = 16;
  c.num_blocks = 4;
  c.kv_chunk_blocks = 1;
  Batch b;
  b.query_start_loc = {0, 3};
  b.total_len = {3};  // ranks 3..7 own nothing
  b.max_blocks = 1;
  b.block_table = {0};
  const Plan plan = make_plan(b, c);
  ASSERT_EQ(plan.work.size(), 1u);
  EXPECT_EQ(plan.work[0].kv_begin, 0);
  EXPECT_EQ(plan.work[0].kv_end, 0);
  EXPECT_EQ(plan.work[0].kv_visible_end, 0);
  EXPECT_EQ(plan.work[0].num_pairs, 3 * 8);
  EXPECT_EQ(plan.work[0].partial_row, -1);
  EXPECT_EQ(plan.row_local_bound, (std::vector<std::int32_t>{0, 0, 0}));
  EXPECT_EQ(plan.request_local_len, (std::vector<std::int32_t>{0}));
}

TEST(Planner, UnusedBlockTableColumnsAreNotValidated) {
  // -1 in columns past what the fullest rank needs is fine (engines pad rows with -1)
  PlanConfig c;
  c.sharding = {2, 1, 1};
  c.num_heads = 1;
  c.block_size = 4;
  c.num_blocks = 3;
  Batch b;
  b.query_start_loc = {0, 1};
  b.total_len = {9};  // rank 0: 5 local tokens -> 2 blocks; rank 1: 4 -> 1 block
  b.max_blocks = 3;
  b.block_table = {2, 0, -1};
  for (int rank : {0, 1}) {
    c.sharding.rank = rank;
    EXPECT_NO_THROW(make_plan(b, c)) << "rank " << rank;
    EXPECT_NO_THROW(validate_block_ids(b, c)) << "rank " << rank;
  }
}

// dcp.h: a bad argument throws on its rank instead of hanging the others "only if every rank
// gets the same bad input (the usual case for a shared batch description)". The block table is
// shared by all ranks, so a shared batch must be accepted or rejected by every rank alike;
// otherwise the ranks that accept it enter the first collective and wait forever for the ones
// that threw. make_plan does not read the table; validate_block_ids checks what rank 0 (the
// fullest) reads on every rank.
TEST(Planner, SharedBatchIsRejectedOnEveryRankOrOnNone) {
  struct Bad {
    const char* what;
    std::int64_t T;
    std::int32_t max_blocks;
    std::vector<std::int32_t> row;
  };
  // W = 2, block size 16, T = 97: rank 0 holds 49 tokens (4 blocks), rank 1 holds 48 (3 blocks)
  const std::vector<Bad> cases = {
      {"block table with 3 columns: too short for rank 0 only", 97, 3, {0, 1, 2}},
      {"block id out of range in the column only rank 0 reads", 97, 4, {0, 1, 2, 99}},
      {"-1 in the column only rank 0 reads", 97, 4, {0, 1, 2, -1}},
  };
  for (const auto& c : cases) {
    Batch b;
    b.query_start_loc = {0, 1};
    b.total_len = {c.T};
    b.max_blocks = c.max_blocks;
    b.block_table = c.row;
    int rejected = 0;
    for (int rank = 0; rank < 2; ++rank) {
      PlanConfig cfg;
      cfg.sharding = {2, rank, 1};
      cfg.num_heads = 2;
      cfg.block_size = 16;
      cfg.num_blocks = 8;
      EXPECT_NO_THROW(make_plan(b, cfg)) << c.what << ": make_plan reads no block id";
      try {
        validate_block_ids(b, cfg);
      } catch (const Error&) {
        ++rejected;
      }
    }
    EXPECT_EQ(rejected, 2) << c.what << ": rejected on " << rejected
                           << " of 2 ranks (a rank that accepts would enter dcp_step's first "
                           << "collective and hang)";
  }
}

TEST(Planner, PlanConfigValidation) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 1;
  c.block_size = 4;
  c.num_blocks = 3;
  Batch b;
  b.query_start_loc = {0, 1};
  b.total_len = {4};
  b.max_blocks = 1;
  b.block_table = {0};
  auto expect = [&](const std::function<void(PlanConfig&)>& edit, const std::string& arg) {
    PlanConfig cc = c;
    edit(cc);
    try {
      make_plan(b, cc);
      ADD_FAILURE() << "expected an error naming " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(e.argument(), arg);
    }
  };
  expect([](PlanConfig& x) { x.kv_chunk_blocks = -1; }, "kv_chunk_blocks");
  expect([](PlanConfig& x) { x.model.workers = -2; }, "model.workers");
  expect([](PlanConfig& x) { x.model.tile_pairs = -1; }, "model.tile_pairs");
  expect([](PlanConfig& x) { x.model.min_split_tokens = 0; }, "model.min_split_tokens");
  EXPECT_NO_THROW(make_plan(b, c));
}

TEST(Planner, EmptyBatch) {
  PlanConfig c;
  c.sharding = {2, 0, 1};
  c.num_heads = 2;
  c.block_size = 16;
  c.num_blocks = 1;
  c.model.workers = 8;
  Batch b;
  b.query_start_loc = {0};
  const Plan plan = make_plan(b, c);
  EXPECT_EQ(plan.num_rows, 0);
  EXPECT_TRUE(plan.work.empty());
  EXPECT_TRUE(plan.merges.empty());
  b.num_tokens = 3;  // a batch of padding only
  const Plan pad = make_plan(b, c);
  EXPECT_EQ(pad.num_rows, 3);
  EXPECT_TRUE(pad.work.empty());
  EXPECT_EQ(pad.row_local_bound, (std::vector<std::int32_t>{0, 0, 0}));
  EXPECT_EQ(row_requests(b), (std::vector<std::int32_t>{-1, -1, -1}));
}

// One request of Q rows and T tokens in blocks of one token on a single rank, cut into chunks of
// `chunk` blocks: Q * ceil(T / chunk) partial rows.
std::pair<Batch, PlanConfig> long_split_request(int Q, std::int64_t T, int chunk, int heads) {
  Batch b;
  b.query_start_loc = {0, Q};
  b.total_len = {T};
  b.max_blocks = std::int32_t(T);
  b.block_table.resize(std::size_t(T));
  for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = std::int32_t(i);
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = heads;
  c.block_size = 1;
  c.num_blocks = T;
  c.kv_chunk_blocks = chunk;
  return {b, c};
}

// Partial rows are int32 indices: a split needing more is refused, never wrapped to negative rows.
TEST(Planner, PartialRowsBeyondInt32AreRefused) {
  const auto [b, c] = long_split_request(65536, 165536, 3, 1);  // 55179 splits x 65536 rows
  try {
    make_plan(b, c);
    FAIL() << "a plan with more than 2^31 - 1 partial rows was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_range);
    EXPECT_EQ(e.argument(), "kv_chunk_blocks");
    EXPECT_NE(std::string(e.what()).find("55179 splits x 65536 rows"), std::string::npos)
        << e.what();
  }
  const auto [b2, c2] = long_split_request(65536, 165536, 6, 1);  // 27590 splits fit
  const Plan plan = make_plan(b2, c2);
  EXPECT_EQ(plan.num_partial_rows, std::int64_t(27590) * 65536);
  for (const auto& w : plan.work) EXPECT_GE(w.partial_row, 0);
}

// The workspace size is partial rows x heads x 2052 bytes: a product that would wrap is refused
// (a backend would otherwise allocate a few bytes and write far past them). A request's Q x H
// pairs must fit int32 (validate_batch), so with Q = 1 and H = 2^31 - 1 the product passes
// 2^64 - 1 from 4186128 splits on: floor(floor((2^64 - 1) / 2052) / 4186128) = 2147483632 < H,
// while 4186127 splits still fit (the quotient is 2147484145 >= H).
TEST(Planner, WorkspaceBytesThatWouldWrapAreRefused) {
  constexpr int kHeads = std::numeric_limits<std::int32_t>::max();
  const auto [b, c] = long_split_request(1, 4186128, 1, kHeads);
  try {
    make_plan(b, c);
    FAIL() << "a plan whose workspace size wraps was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_range);
    EXPECT_EQ(e.argument(), "num_heads");
  }
  const auto [b0, c0] = long_split_request(1, 4186127, 1, kHeads);
  const Plan largest = make_plan(b0, c0);
  EXPECT_EQ(decode_workspace_bytes(largest), std::size_t(4186127) * std::size_t(kHeads) * 513 * 4);
  const auto [b1, c1] = long_split_request(65536, 65536, 8, 128);
  const Plan plan = make_plan(b1, c1);
  EXPECT_EQ(decode_workspace_bytes(plan), std::size_t(8192) * 65536 * 128 * 513 * 4);
}

}  // namespace
}  // namespace dcpmla
