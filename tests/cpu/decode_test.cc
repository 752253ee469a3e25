// The CPU decode of one rank, called directly (no collectives): per-rank partials against a
// brute-force per-rank oracle, empty rows, padding, splits, dtypes, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/plan.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using testing::custom_scenario;
using testing::decode_rank;
using testing::local_reference;
using testing::PlanChoice;
using testing::row_is_empty;

// Every (row, head) partial of every rank against the per-rank oracle; rows that see no local
// key must be exactly O = 0, LSE = -inf, and so must padding rows. Each row's local bound in the
// plan is the count of the positions below its bound that the rank owns.
void check_all_ranks(const testing::Scenario& sc, const testing::PlanChoice& choice,
                     double out_tol = 1e-4, double lse_tol = 2e-4) {
  const auto& spec = sc.spec;
  const Batch& batch = sc.batch;
  for (int rank = 0; rank < spec.world; ++rank) {
    SCOPED_TRACE(::testing::Message() << "rank " << rank << " " << testing::describe(spec) << " "
                                      << testing::describe_batch(batch));
    const auto got = decode_rank(sc, rank, choice);
    testing::expect_rank_matches_reference(sc, rank, got.out, got.lse, out_tol, lse_tol);
    if (::testing::Test::HasFatalFailure()) return;
    for (int b = 0; b < batch.num_requests(); ++b) {
      const int Q = batch.q_len(b);
      const std::int64_t T = batch.total_len[b];
      for (int j = 0; j < Q; ++j) {
        const std::int64_t bound = batch.mask_of(b) == Mask::full ? T : T - Q + 1 + j;
        std::int64_t owned = 0;
        for (std::int64_t g = 0; g < bound; ++g) {
          owned += (g / spec.interleave) % spec.world == rank;
        }
        ASSERT_EQ(got.plan.row_local_bound[batch.query_start_loc[b] + j], owned)
            << "request " << b << " row " << j;
      }
    }
  }
}

testing::ScenarioSpec small_spec(int W, int I, int bs, DType kv, std::uint64_t seed) {
  testing::ScenarioSpec s;
  s.world = W;
  s.interleave = I;
  s.heads = 3;  // no head split in a single-rank decode: any count works
  s.block_size = bs;
  s.kv_dtype = kv;
  s.q_dtype = DType::f32;
  s.seed = seed;
  return s;
}

TEST(CpuDecode, RandomScenariosMatchPerRankOracle) {
  std::mt19937_64 rng(314);
  const int bss[] = {1, 4, 16, 64};
  const DType kvs[] = {DType::f32, DType::bf16, DType::fp8_e4m3};
  for (int iter = 0; iter < 24; ++iter) {
    const int W = 1 + int(rng() % 4);
    const int bs = bss[rng() % 4];
    int I = 1 << int(rng() % 3);
    if (bs % I) I = 1;
    auto spec = small_spec(W, I, bs, kvs[rng() % 3], 1000 + iter);
    spec.heads = W * (1 + int(rng() % 2));  // make_scenario wants a multiple of W
    spec.requests = 1 + int(rng() % 4);
    spec.max_drafts = int(rng() % 8);
    spec.max_context = spec.max_drafts + 1 + std::int64_t(rng() % 150);
    spec.full_mask_fraction = rng() % 3 == 0 ? 0.5 : 0.0;
    spec.padding_rows = int(rng() % 3);
    const auto sc = testing::make_scenario(spec);
    testing::PlanChoice lim;
    if (rng() % 2) lim.kv_chunk_blocks = 1 + int(rng() % 3);
    check_all_ranks(sc, lim);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// SPEC section 3: a request with T < W + Q has rows that see zero keys on some ranks; the
// per-row (not per-request) partial is exactly O = 0, LSE = -inf.
TEST(CpuDecode, RowsWithNoLocalKeysAreExactlyEmpty) {
  auto spec = small_spec(4, 1, 16, DType::bf16, 7);
  // Q = 3, T = 4: bounds 2, 3, 4. Rank 3 owns only position 3: rows 0 and 1 see nothing there,
  // row 2 sees one key. Rank 2: row 0 sees nothing. The second request is ordinary.
  const auto sc = custom_scenario(spec, {3, 2}, {4, 30});
  for (const PlanChoice& lim : {PlanChoice{}, PlanChoice{.kv_chunk_blocks = 1}}) {
    const auto r3 = decode_rank(sc, 3, lim);
    EXPECT_EQ(r3.plan.row_local_bound[0], 0);
    EXPECT_EQ(r3.plan.row_local_bound[1], 0);
    EXPECT_EQ(r3.plan.row_local_bound[2], 1);
    for (int h = 0; h < spec.heads; ++h) {
      EXPECT_TRUE(row_is_empty(r3.out, r3.lse, spec.heads, 0, h));
      EXPECT_TRUE(row_is_empty(r3.out, r3.lse, spec.heads, 1, h));
      EXPECT_FALSE(row_is_empty(r3.out, r3.lse, spec.heads, 2, h));
      EXPECT_TRUE(std::isfinite(r3.lse[2 * spec.heads + h]));
    }
    const auto r2 = decode_rank(sc, 2, lim);
    EXPECT_EQ(r2.plan.row_local_bound, (std::vector<std::int32_t>{0, 1, 1, 7, 7}));
    for (int h = 0; h < spec.heads; ++h) {
      EXPECT_TRUE(row_is_empty(r2.out, r2.lse, spec.heads, 0, h));
      EXPECT_FALSE(row_is_empty(r2.out, r2.lse, spec.heads, 1, h));
    }
    check_all_ranks(sc, lim);
  }
}

TEST(CpuDecode, RanksWithNoKeysAtAllAreExactlyEmpty) {
  // W = 8, T = Q = 3: ranks 3..7 own nothing of request 0, every row there is empty
  auto spec = small_spec(8, 1, 16, DType::f32, 9);
  const auto sc = custom_scenario(spec, {3}, {3});
  for (int rank = 3; rank < 8; ++rank) {
    const auto r = decode_rank(sc, rank, {.kv_chunk_blocks = 1});
    EXPECT_EQ(r.plan.request_local_len, (std::vector<std::int32_t>{0}));
    for (int row = 0; row < 3; ++row) {
      for (int h = 0; h < spec.heads; ++h) {
        EXPECT_TRUE(row_is_empty(r.out, r.lse, spec.heads, row, h)) << rank << " " << row;
      }
    }
  }
  check_all_ranks(sc, {});
}

TEST(CpuDecode, PaddingRowsAreExactlyEmpty) {
  auto spec = small_spec(2, 1, 16, DType::bf16, 10);
  const auto sc = custom_scenario(spec, {2, 1}, {50, 20}, {}, 5);
  for (int rank = 0; rank < 2; ++rank) {
    for (const PlanChoice& lim : {PlanChoice{}, PlanChoice{.kv_chunk_blocks = 1}}) {
      const auto r = decode_rank(sc, rank, lim);
      ASSERT_EQ(r.plan.num_rows, 8);
      // No work item computes a padding row: each covers rows of its own request only.
      for (const WorkItem& w : r.plan.work) {
        EXPECT_LT(w.row_begin + (w.pair_begin + w.num_pairs - 1) / spec.heads, 3);
      }
      const auto row_request = row_requests(sc.batch);
      for (int row = 3; row < 8; ++row) {
        EXPECT_EQ(row_request[row], -1);
        EXPECT_EQ(r.plan.row_local_bound[row], 0);
        for (int h = 0; h < spec.heads; ++h) {
          EXPECT_TRUE(row_is_empty(r.out, r.lse, spec.heads, row, h)) << "padding row " << row;
        }
      }
    }
  }
}

TEST(CpuDecode, SplitAndUnsplitAgree) {
  auto spec = small_spec(2, 2, 16, DType::bf16, 11);
  const auto sc =
      custom_scenario(spec, {4, 1, 7}, {300, 33, 200}, {Mask::causal, Mask::causal, Mask::full});
  for (int rank = 0; rank < 2; ++rank) {
    const auto whole = decode_rank(sc, rank, {});
    EXPECT_TRUE(whole.plan.merges.empty());
    for (int k : {1, 2, 3, 7}) {
      const auto split = decode_rank(sc, rank, {.kv_chunk_blocks = k});
      EXPECT_FALSE(split.plan.merges.empty());
      for (std::size_t i = 0; i < whole.lse.size(); ++i) {
        ASSERT_NEAR(split.lse[i], whole.lse[i], 1e-5) << i;
      }
      for (std::size_t i = 0; i < whole.out.size(); ++i) {
        ASSERT_NEAR(split.out[i], whole.out[i], 1e-5) << i;
      }
    }
  }
}

TEST(CpuDecode, DeterministicAcrossRunsAndThreadCounts) {
  auto spec = small_spec(2, 1, 16, DType::bf16, 12);
  const auto sc = custom_scenario(spec, {8, 1, 3}, {100, 40, 77});
  const Sharding sh{2, 1, 1};
  const Plan plan = make_plan(sc.batch, {sh, spec.heads, spec.block_size, sc.num_blocks,
                                         /*model=*/{}, /*kv_chunk_blocks=*/1});
  HostKvCache cache(spec.kv_dtype, sc.num_blocks, spec.block_size);
  cache.poison();
  std::vector<float> lat;
  std::vector<std::int64_t> slots;
  for (int b = 0; b < sc.batch.num_requests(); ++b) {
    for (std::int64_t p = 0; p < sc.batch.total_len[b]; ++p) {
      lat.insert(lat.end(), sc.kv[b].begin() + p * kHeadDim, sc.kv[b].begin() + (p + 1) * kHeadDim);
      slots.push_back(sh.slot(p, sc.batch.block_row(b), spec.block_size));
    }
  }
  auto be1 = make_cpu_backend(1);
  be1->write_kv({TensorRef(lat.data(), DType::f32, {std::int64_t(slots.size()), kHeadDim}),
                 TensorRef(slots.data(), DType::i64, {std::int64_t(slots.size())}), cache.ref()},
                nullptr);
  const std::int64_t rows = plan.num_rows;
  auto run = [&](int threads) {
    auto be = make_cpu_backend(threads);
    std::vector<float> out(std::size_t(rows) * spec.heads * kLatentDim),
        lse(std::size_t(rows) * spec.heads);
    std::vector<std::uint8_t> ws(decode_workspace_bytes(plan));
    DecodeArgs a{&plan,
                 /*schedule=*/nullptr,
                 TensorRef(sc.q.data(), DType::f32, {rows, spec.heads, kHeadDim}),
                 cache.ref(),
                 TensorRef(sc.batch.block_table.data(), DType::i32,
                           {sc.batch.num_requests(), sc.batch.max_blocks}),
                 TensorRef(out.data(), DType::f32, {rows, spec.heads, kLatentDim}),
                 TensorRef(lse.data(), DType::f32, {rows, spec.heads}),
                 spec.softmax_scale,
                 1.0f,
                 TensorRef(ws.data(), DType::fp8_e4m3, {std::int64_t(ws.size())}),
                 /*send_world=*/0,
                 /*send=*/{}};
    be->decode(a, nullptr);
    be->decode(a, nullptr);  // a second run over the same buffers changes nothing
    return std::make_pair(out, lse);
  };
  const auto ref = run(1);
  for (int threads : {1, 2, 3, 5}) {
    const auto got = run(threads);
    EXPECT_EQ(std::memcmp(got.first.data(), ref.first.data(), ref.first.size() * 4), 0) << threads;
    EXPECT_EQ(std::memcmp(got.second.data(), ref.second.data(), ref.second.size() * 4), 0)
        << threads;
  }
}

// Runs one rank's decode of `sc` with the given q/out dtypes and scales.
struct DtypeRun {
  std::vector<std::uint8_t> out;
  std::vector<float> lse;
};
DtypeRun decode_with(const testing::Scenario& sc, DType q_dtype, DType out_dtype,
                     float softmax_scale, float q_scale) {
  const auto& spec = sc.spec;
  const Sharding sh{spec.world, 0, spec.interleave};
  HostKvCache cache = testing::rank_cache(sc, 0);
  auto be = make_cpu_backend(1);
  const Plan plan = make_plan(sc.batch, {sh, spec.heads, spec.block_size, sc.num_blocks, {}});
  const std::int64_t rows = plan.num_rows;
  const std::size_t nq = std::size_t(rows) * spec.heads * kHeadDim;
  std::vector<std::uint8_t> q(nq * dtype_size(q_dtype));
  for (std::size_t i = 0; i < nq; ++i) {
    if (q_dtype == DType::bf16) {
      const std::uint16_t h = float_to_bf16(sc.q[i]);
      std::memcpy(&q[i * 2], &h, 2);
    } else {
      std::memcpy(&q[i * 4], &sc.q[i], 4);
    }
  }
  DtypeRun r;
  r.out.resize(std::size_t(rows) * spec.heads * kLatentDim * dtype_size(out_dtype));
  r.lse.resize(std::size_t(rows) * spec.heads);
  DecodeArgs a;
  a.plan = &plan;
  a.q = TensorRef(q.data(), q_dtype, {rows, spec.heads, kHeadDim});
  a.cache = cache.ref();
  a.block_table = TensorRef(sc.batch.block_table.data(), DType::i32,
                            {sc.batch.num_requests(), sc.batch.max_blocks});
  a.out = TensorRef(r.out.data(), out_dtype, {rows, spec.heads, kLatentDim});
  a.lse = TensorRef(r.lse.data(), DType::f32, {rows, spec.heads});
  a.softmax_scale = softmax_scale;
  a.q_scale = q_scale;
  be->decode(a, nullptr);
  return r;
}

TEST(CpuDecode, Bf16OutputIsTheRoundedFp32Output) {
  auto spec = small_spec(2, 1, 16, DType::bf16, 13);
  spec.q_dtype = DType::bf16;
  const auto sc = custom_scenario(spec, {3, 1}, {31, 35});
  const auto f32 = decode_with(sc, DType::bf16, DType::f32, spec.softmax_scale, 1.0f);
  const auto b16 = decode_with(sc, DType::bf16, DType::bf16, spec.softmax_scale, 1.0f);
  EXPECT_EQ(f32.lse, b16.lse);
  const std::size_t n = f32.out.size() / 4;
  for (std::size_t i = 0; i < n; ++i) {
    float x;
    std::uint16_t h;
    std::memcpy(&x, &f32.out[i * 4], 4);
    std::memcpy(&h, &b16.out[i * 2], 2);
    ASSERT_EQ(h, float_to_bf16(x)) << i;
  }
  // a bf16 query holding the same values as the fp32 one gives the same result
  const auto q32 = decode_with(sc, DType::f32, DType::f32, spec.softmax_scale, 1.0f);
  EXPECT_EQ(q32.out, f32.out);
  EXPECT_EQ(q32.lse, f32.lse);
}

TEST(CpuDecode, ScoreScaleIsSoftmaxScaleTimesQScale) {
  auto spec = small_spec(1, 1, 16, DType::fp8_e4m3, 14);
  const auto sc = custom_scenario(spec, {4}, {70});
  const auto base = decode_with(sc, DType::f32, DType::f32, spec.softmax_scale, 1.0f);
  // powers of two move exactly between the two factors
  const auto moved = decode_with(sc, DType::f32, DType::f32, spec.softmax_scale / 4, 4.0f);
  EXPECT_EQ(base.out, moved.out);
  EXPECT_EQ(base.lse, moved.lse);
  // a different product changes the result
  const auto other = decode_with(sc, DType::f32, DType::f32, spec.softmax_scale, 1.5f);
  EXPECT_NE(base.lse, other.lse);
  // ... and matches the oracle at the full scale
  testing::Scenario scaled = sc;
  scaled.spec.softmax_scale = spec.softmax_scale * 1.5f;
  const auto want = local_reference(scaled, 0, 0, 0, 0, 67);
  EXPECT_NEAR(other.lse[0], want.lse, 2e-4);
  float o0;
  std::memcpy(&o0, other.out.data(), 4);
  EXPECT_NEAR(o0, want.out[0], 1e-4);
}

}  // namespace
}  // namespace dcpmla
