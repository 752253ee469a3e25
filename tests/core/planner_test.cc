// The planner: row bounds, uniform classification, and the split of every request's local KV
// into work items and merges.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
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
  switch (rng() % 4) {
    case 0:
      p.config.limits = {};
      break;
    case 1:
      p.config.limits.kv_chunk_blocks = 1 + int(rng() % 4);
      break;
    case 2:
      p.config.limits.target_work_items = 1 + int(rng() % 32);
      p.config.limits.min_chunk_blocks = 1 + int(rng() % 3);
      break;
    default:
      p.config.limits.kv_chunk_blocks = 1 + int(rng() % 4);
      p.config.limits.target_work_items = 1 + int(rng() % 32);
      break;
  }
  if (rng() % 3 == 0) {  // some requests cut by their own chunk (0: the batch-wide one)
    p.config.limits.request_chunk_blocks.resize(std::size_t(B));
    for (auto& k : p.config.limits.request_chunk_blocks) k = std::int32_t(rng() % 5);
  }
  return p;
}

void check_plan_invariants(const Batch& b, const PlanConfig& c, const Plan& plan) {
  const auto& sh = c.sharding;
  const int B = b.num_requests();
  const int bs = c.block_size;
  ASSERT_EQ(plan.num_requests, B);
  ASSERT_EQ(plan.num_rows, b.rows());
  ASSERT_EQ(plan.num_real_rows, b.real_tokens());
  ASSERT_EQ(plan.row_request.size(), std::size_t(b.rows()));
  ASSERT_EQ(plan.row_global_bound.size(), std::size_t(b.rows()));
  ASSERT_EQ(plan.row_local_bound.size(), std::size_t(b.rows()));
  ASSERT_EQ(plan.request_local_len.size(), std::size_t(B));

  int max_q = 0;
  std::int32_t max_local = 0;
  for (int r = 0; r < B; ++r) {
    const int Q = b.q_len(r);
    max_q = std::max(max_q, Q);
    const std::int64_t T = b.total_len[r];
    ASSERT_EQ(plan.request_local_len[r], sh.local_len(T));
    max_local = std::max(max_local, plan.request_local_len[r]);
    for (int j = 0; j < Q; ++j) {
      const int i = b.query_start_loc[r] + j;
      ASSERT_EQ(plan.row_request[i], r);
      const std::int64_t bound = b.mask_of(r) == Mask::full ? T : T - (Q - 1 - j);
      ASSERT_EQ(plan.row_global_bound[i], bound);
      // brute force: positions < bound owned by this rank
      std::int64_t visible = 0;
      for (std::int64_t g = 0; g < bound; ++g) visible += sh.owner(g) == sh.rank;
      ASSERT_EQ(plan.row_local_bound[i], visible) << "request " << r << " row " << j;
    }
  }
  for (std::int64_t i = b.real_tokens(); i < b.rows(); ++i) {
    ASSERT_EQ(plan.row_request[i], -1) << "padding row " << i;
    ASSERT_EQ(plan.row_global_bound[i], 0);
    ASSERT_EQ(plan.row_local_bound[i], 0);
  }
  ASSERT_EQ(plan.max_q, max_q);
  ASSERT_EQ(plan.max_local_len, max_local);

  // Work items: every request has >= 1, they tile [0, local_len) in order at chunk-aligned
  // block boundaries; split requests write partial rows merged by exactly one SplitMerge.
  std::map<int, std::vector<WorkItem>> items;
  for (const auto& w : plan.work) items[w.request].push_back(w);
  ASSERT_EQ(int(items.size()), B);
  std::map<int, SplitMerge> merges;
  for (const auto& m : plan.merges) {
    ASSERT_TRUE(merges.emplace(m.request, m).second) << "two merges for request " << m.request;
  }
  std::vector<int> partial_use(std::size_t(plan.num_partial_rows), 0);
  for (int r = 0; r < B; ++r) {
    const auto& its = items[r];
    ASSERT_GE(its.size(), 1u);
    const std::int64_t local = plan.request_local_len[r];
    std::int64_t expect_begin = 0;
    const std::int64_t chunk = its.size() > 1 ? its[0].kv_end - its[0].kv_begin : 0;
    for (std::size_t s = 0; s < its.size(); ++s) {
      const auto& w = its[s];
      ASSERT_EQ(w.row_begin, b.query_start_loc[r]);
      ASSERT_EQ(w.num_rows, b.q_len(r));
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
    ASSERT_EQ(expect_begin, local) << "items of request " << r << " do not cover [0, local_len)";
    if (its.size() == 1) {
      ASSERT_EQ(its[0].partial_row, -1);
      ASSERT_EQ(merges.count(r), 0u);
      continue;
    }
    ASSERT_EQ(chunk % bs, 0);
    const auto& own = c.limits.request_chunk_blocks;
    if (!own.empty() && own[std::size_t(r)] > 0) {
      ASSERT_EQ(chunk, std::int64_t(own[std::size_t(r)]) * bs);
    } else if (c.limits.kv_chunk_blocks > 0) {
      ASSERT_EQ(chunk, std::int64_t(c.limits.kv_chunk_blocks) * bs);
    } else {
      ASSERT_GE(chunk, std::int64_t(c.limits.min_chunk_blocks) * bs);
    }
    ASSERT_EQ(merges.count(r), 1u);
    const auto& m = merges[r];
    ASSERT_EQ(m.row_begin, b.query_start_loc[r]);
    ASSERT_EQ(m.num_rows, b.q_len(r));
    ASSERT_EQ(m.num_splits, int(its.size()));
    for (std::size_t s = 0; s < its.size(); ++s) {
      ASSERT_EQ(its[s].partial_row, m.first_partial_row + int(s) * m.num_rows);
      for (int j = 0; j < m.num_rows; ++j) {
        const std::int64_t pr = its[s].partial_row + j;
        ASSERT_GE(pr, 0);
        ASSERT_LT(pr, plan.num_partial_rows);
        ++partial_use[pr];
      }
    }
  }
  for (int u : partial_use) ASSERT_EQ(u, 1) << "partial rows must be used exactly once";
  ASSERT_EQ(decode_workspace_bytes(plan),
            std::size_t(plan.num_partial_rows) * c.num_heads * (kLatentDim + 1) * sizeof(float));

  // uniform iff the real rows are B * max_Q and there is no padding (header + SPEC section 4)
  const bool uniform = b.real_tokens() == std::int64_t(B) * max_q && b.rows() == b.real_tokens();
  ASSERT_EQ(plan.uniform, uniform) << "rows " << b.rows() << " real " << b.real_tokens();
}

TEST(Planner, RandomBatchesSatisfyInvariants) {
  std::mt19937_64 rng(2024);
  for (int iter = 0; iter < 400; ++iter) {
    const auto p = random_problem(rng);
    // this test's own expectation on padding is checked separately (UniformWithPadding)
    if (p.batch.rows() != p.batch.real_tokens()) continue;
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    Plan plan;
    ASSERT_NO_THROW(plan = make_plan(p.batch, p.config));
    check_plan_invariants(p.batch, p.config, plan);
  }
}

TEST(Planner, RandomPaddedBatchesSatisfyInvariantsExceptUniform) {
  std::mt19937_64 rng(77);
  int checked = 0;
  for (int iter = 0; iter < 400; ++iter) {
    auto p = random_problem(rng);
    if (p.batch.rows() == p.batch.real_tokens()) continue;
    SCOPED_TRACE(::testing::Message() << "iteration " << iter);
    const Plan plan = make_plan(p.batch, p.config);
    // check everything but `uniform` on padded batches (see UniformWithPadding)
    Plan copy = plan;
    copy.uniform = false;
    check_plan_invariants(p.batch, p.config, copy);
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST(Planner, UniformClassification) {
  PlanConfig c;
  c.sharding = {2, 0, 1};
  c.num_heads = 4;
  c.block_size = 16;
  c.num_blocks = 100;
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
  EXPECT_TRUE(make_plan(batch_of({4, 4, 4}, 50), c).uniform);
  EXPECT_TRUE(make_plan(batch_of({1, 1}, 50), c).uniform);
  EXPECT_TRUE(make_plan(batch_of({3}, 50), c).uniform);
  // 8 + 2: 10 tokens, 2 requests; divisible, but not uniform
  EXPECT_FALSE(make_plan(batch_of({8, 2}, 50), c).uniform);
  EXPECT_FALSE(make_plan(batch_of({8, 1}, 50), c).uniform);
  EXPECT_FALSE(make_plan(batch_of({2, 4, 6}, 50), c).uniform);
  EXPECT_FALSE(make_plan(batch_of({3, 3, 2, 4}, 50), c).uniform);
}

// SPEC section 4: "A batch is uniform iff num_tokens == B * max_Q"; plan.h: "uniform:
// num_real_rows == B * max_q (and no padding rows)". Padding rows make a batch non-uniform.
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
  EXPECT_FALSE(plan.uniform) << "6 rows (2 padding) != B * max_Q = 4";
  b.num_tokens = 4;  // explicit count without padding stays uniform
  EXPECT_TRUE(make_plan(b, c).uniform);
}

TEST(Planner, FixedChunkCutsEveryRequestAtTheSamePlaces) {
  PlanConfig c;
  c.sharding = {2, 1, 2};
  c.num_heads = 3;
  c.block_size = 4;
  c.num_blocks = 1000;
  c.limits.kv_chunk_blocks = 3;  // 12 local tokens per chunk
  Batch b;
  b.query_start_loc = {0, 2, 3, 7};
  b.total_len = {100, 10, 4};  // rank 1 of W=2, I=2 owns 2,3,6,7,10,11,...: 50, 4, 2
  b.max_blocks = 13;
  b.block_table.resize(3 * 13);
  for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i);
  const Plan plan = make_plan(b, c);
  ASSERT_EQ(plan.request_local_len, (std::vector<std::int32_t>{50, 4, 2}));
  std::vector<std::pair<int, int>> r0;
  for (const auto& w : plan.work) {
    if (w.request == 0) r0.emplace_back(w.kv_begin, w.kv_end);
  }
  EXPECT_EQ(r0,
            (std::vector<std::pair<int, int>>{{0, 12}, {12, 24}, {24, 36}, {36, 48}, {48, 50}}));
  ASSERT_EQ(plan.merges.size(), 1u);
  EXPECT_EQ(plan.merges[0].num_splits, 5);
  EXPECT_EQ(plan.num_partial_rows, 5 * 2);
  EXPECT_EQ(plan.work.size(), 7u);
}

TEST(Planner, TargetWorkItemsBoundsTheItemCount) {
  std::mt19937_64 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    auto p = random_problem(rng);
    p.config.limits = {};
    p.config.limits.target_work_items = 1 + int(rng() % 64);
    p.config.limits.min_chunk_blocks = 1 + int(rng() % 4);
    const Plan plan = make_plan(p.batch, p.config);
    // chunks of ceil(total_blocks / target) blocks give at most target + B items
    EXPECT_LE(int(plan.work.size()), p.config.limits.target_work_items + p.batch.num_requests());
    p.config.limits.target_work_items = 0;  // no split
    const Plan whole = make_plan(p.batch, p.config);
    EXPECT_EQ(int(whole.work.size()), p.batch.num_requests());
    EXPECT_TRUE(whole.merges.empty());
    EXPECT_EQ(whole.num_partial_rows, 0);
    EXPECT_EQ(decode_workspace_bytes(whole), 0u);
  }
}

TEST(Planner, RequestWithNoLocalKeysStillHasAnItem) {
  PlanConfig c;
  c.sharding = {8, 7, 1};
  c.num_heads = 8;
  c.block_size = 16;
  c.num_blocks = 4;
  c.limits.kv_chunk_blocks = 1;
  Batch b;
  b.query_start_loc = {0, 3};
  b.total_len = {3};  // ranks 3..7 own nothing
  b.max_blocks = 1;
  b.block_table = {0};
  const Plan plan = make_plan(b, c);
  ASSERT_EQ(plan.work.size(), 1u);
  EXPECT_EQ(plan.work[0].kv_begin, 0);
  EXPECT_EQ(plan.work[0].kv_end, 0);
  EXPECT_EQ(plan.work[0].partial_row, -1);
  EXPECT_EQ(plan.row_local_bound, (std::vector<std::int32_t>{0, 0, 0}));
  EXPECT_EQ(plan.max_local_len, 0);
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
  }
}

// dcp.h: a bad argument throws on its rank instead of hanging the others "only if every rank
// gets the same bad input (the usual case for a shared batch description)". The block table is
// shared by all ranks, so a shared batch must be accepted or rejected by every rank alike;
// otherwise the ranks that accept it enter the first collective and wait forever for the ones
// that threw.
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
      try {
        make_plan(b, cfg);
      } catch (const Error&) {
        ++rejected;
      }
    }
    EXPECT_TRUE(rejected == 0 || rejected == 2)
        << c.what << ": rejected on " << rejected << " of 2 ranks (the other rank would enter "
        << "dcp_step's first collective and hang)";
  }
}

TEST(Planner, PlanLimitsValidation) {
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
  auto expect = [&](PlanLimits lim, const std::string& arg,
                    ErrorCode code = ErrorCode::invalid_argument) {
    PlanConfig cc = c;
    cc.limits = lim;
    try {
      make_plan(b, cc);
      ADD_FAILURE() << "expected an error naming " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code);
      EXPECT_EQ(e.argument(), arg);
    }
  };
  expect({.kv_chunk_blocks = -1}, "limits.kv_chunk_blocks");
  expect({.target_work_items = -2}, "limits.target_work_items");
  expect({.min_chunk_blocks = 0}, "limits.min_chunk_blocks");
  expect({.request_chunk_blocks = {-1}}, "limits.request_chunk_blocks[0]");
  // Two entries for one request.
  expect({.request_chunk_blocks = {1, 1}}, "limits.request_chunk_blocks",
         ErrorCode::shape_mismatch);
}

TEST(Planner, RequestChunkCutsOnlyItsRequest) {
  PlanConfig c;
  c.sharding = {1, 0, 1};
  c.num_heads = 2;
  c.block_size = 4;
  c.num_blocks = 100;
  c.limits.request_chunk_blocks = {0, 2, 0};  // request 1 in chunks of 8 tokens
  Batch b;
  b.query_start_loc = {0, 1, 3, 4};
  b.total_len = {40, 20, 40};
  b.max_blocks = 10;
  b.block_table.resize(30);
  for (std::size_t i = 0; i < b.block_table.size(); ++i) b.block_table[i] = int(i);
  const Plan plan = make_plan(b, c);
  std::vector<std::tuple<int, int, int>> items;
  for (const auto& w : plan.work) items.emplace_back(w.request, w.kv_begin, w.kv_end);
  EXPECT_EQ(items, (std::vector<std::tuple<int, int, int>>{
                       {0, 0, 40}, {1, 0, 8}, {1, 8, 16}, {1, 16, 20}, {2, 0, 40}}));
  ASSERT_EQ(plan.merges.size(), 1u);
  EXPECT_EQ(plan.merges[0].request, 1);
  EXPECT_EQ(plan.merges[0].num_splits, 3);
  EXPECT_EQ(plan.num_partial_rows, 3 * 2);
}

TEST(Planner, EmptyBatch) {
  PlanConfig c;
  c.sharding = {2, 0, 1};
  c.num_heads = 2;
  c.block_size = 16;
  c.num_blocks = 1;
  Batch b;
  b.query_start_loc = {0};
  const Plan plan = make_plan(b, c);
  EXPECT_EQ(plan.num_rows, 0);
  EXPECT_TRUE(plan.work.empty());
  b.num_tokens = 3;  // a batch of padding only
  const Plan pad = make_plan(b, c);
  EXPECT_EQ(pad.num_rows, 3);
  EXPECT_EQ(pad.row_request, (std::vector<std::int32_t>{-1, -1, -1}));
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
  c.limits.kv_chunk_blocks = chunk;
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
    EXPECT_EQ(e.argument(), "limits");
    EXPECT_NE(std::string(e.what()).find("55179 splits x 65536 rows"), std::string::npos)
        << e.what();
  }
  const auto [b2, c2] = long_split_request(65536, 165536, 6, 1);  // 27590 splits fit
  const Plan plan = make_plan(b2, c2);
  EXPECT_EQ(plan.num_partial_rows, std::int64_t(27590) * 65536);
  for (const auto& w : plan.work) EXPECT_GE(w.partial_row, 0);
}

// The workspace size is partial rows x heads x 2052 bytes: a product that would wrap is refused
// (a backend would otherwise allocate a few bytes and write far past them).
TEST(Planner, WorkspaceBytesThatWouldWrapAreRefused) {
  const auto [b, c] = long_split_request(65536, 65536, 8, 1 << 30);  // 8192 splits x 65536 rows
  try {
    make_plan(b, c);
    FAIL() << "a plan whose workspace size wraps was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_range);
    EXPECT_EQ(e.argument(), "num_heads");
  }
  const auto [b1, c1] = long_split_request(65536, 65536, 8, 128);
  const Plan plan = make_plan(b1, c1);
  EXPECT_EQ(decode_workspace_bytes(plan), std::size_t(8192) * 65536 * 128 * 513 * 4);
}

}  // namespace
}  // namespace dcpmla
