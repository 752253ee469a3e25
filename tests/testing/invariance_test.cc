// Things that must never change a single bit (flattened vs native with the same KV split,
// poisoned unused pages, renamed block ids) and the negative control that must fail.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using testing::cpu1;
using testing::describe;

// Small random specs covering every knob that matters for bit equality. H is drawn first and W
// as one of its divisors, because the head-split combine needs H % W == 0.
testing::ScenarioSpec random_small_spec(std::mt19937_64& rng, std::uint64_t seed) {
  testing::ScenarioSpec s;
  const int heads[] = {1, 2, 4, 6, 8, 12, 16};
  s.heads = heads[rng() % 7];
  std::vector<int> ws;
  for (int w : {1, 2, 3, 4, 8}) {
    if (s.heads % w == 0) ws.push_back(w);
  }
  s.world = ws[rng() % ws.size()];
  const int bss[] = {1, 16, 64};
  s.block_size = bss[rng() % 3];
  const int is[] = {1, 2, 4};
  s.interleave = is[rng() % 3];
  if (s.block_size % s.interleave) s.interleave = 1;
  s.requests = 1 + int(rng() % 4);
  s.max_drafts = int(rng() % 8);
  s.max_context = s.max_drafts + 1 + std::int64_t(rng() % 200);
  s.short_request = rng() % 2;
  s.full_mask_fraction = rng() % 3 == 0 ? 0.5 : 0.0;
  s.padding_rows = rng() % 3 == 0 ? 1 + int(rng() % 3) : 0;
  s.extra_blocks = int(rng() % 4);
  const DType kvs[] = {DType::f32, DType::bf16, DType::fp8_e4m3};
  s.kv_dtype = kvs[rng() % 3];
  s.q_dtype = rng() % 2 ? DType::bf16 : DType::f32;
  s.seed = seed;
  return s;
}

// SPEC section 4: the flattened and native forms with the same KV split are bit-identical.
TEST(Invariance, FlattenedEqualsNativeBitForBit) {
  std::mt19937_64 rng(501);
  for (int iter = 0; iter < 60; ++iter) {
    const auto spec = random_small_spec(rng, 5000 + iter);
    const auto sc = testing::make_scenario(spec);
    testing::RunOptions native;
    native.combine = rng() % 2 ? Combine::a2a : Combine::ag_rs;
    native.kv_chunk_blocks = 1 + int(rng() % 4);
    testing::RunOptions flat = native;
    flat.flatten = true;
    const auto a = testing::run_dcp(sc, cpu1(), native);
    const auto b = testing::run_dcp(sc, cpu1(), flat);
    const auto agree = testing::agreement(a, b);
    ASSERT_TRUE(agree.bit_identical)
        << describe(spec) << " " << describe(native) << " " << testing::describe_batch(sc.batch)
        << " max|dO| " << agree.max_out_diff << " max|dLSE| " << agree.max_lse_diff;
  }
}

TEST(Invariance, FlattenedEqualsNativeWithoutSplits) {
  std::mt19937_64 rng(502);
  for (int iter = 0; iter < 20; ++iter) {
    const auto spec = random_small_spec(rng, 6000 + iter);
    const auto sc = testing::make_scenario(spec);
    testing::RunOptions native;
    native.model = DeviceModel{};  // workers = 0: no split at all
    testing::RunOptions flat = native;
    flat.flatten = true;
    ASSERT_TRUE(
        testing::agreement(testing::run_dcp(sc, cpu1(), native), testing::run_dcp(sc, cpu1(), flat))
            .bit_identical)
        << describe(spec);
  }
}

// Unused pages full of NaN versus zeros: not one bit changes.
TEST(Invariance, PoisonedUnusedPagesNeverChangeResults) {
  std::mt19937_64 rng(503);
  for (int iter = 0; iter < 40; ++iter) {
    auto spec = random_small_spec(rng, 7000 + iter);
    spec.extra_blocks = 1 + int(rng() % 4);
    const auto sc = testing::make_scenario(spec);
    testing::RunOptions o;
    o.combine = rng() % 2 ? Combine::a2a : Combine::ag_rs;
    o.kv_chunk_blocks = int(rng() % 3);
    o.flatten = rng() % 4 == 0;
    o.poison = true;
    testing::RunOptions clean = o;
    clean.poison = false;
    const auto poisoned = testing::run_dcp(sc, cpu1(), o);
    const auto agree = testing::agreement(poisoned, testing::run_dcp(sc, cpu1(), clean));
    ASSERT_TRUE(agree.bit_identical) << describe(spec) << " " << describe(o);
    for (float l : poisoned.lse) ASSERT_FALSE(std::isnan(l)) << describe(spec);
    for (float x : poisoned.out) ASSERT_FALSE(std::isnan(x)) << describe(spec);
  }
}

// The same KV and query behind a different block-id permutation: bit-identical.
TEST(Invariance, PermutedBlockTablesNeverChangeResults) {
  std::mt19937_64 rng(504);
  for (int iter = 0; iter < 40; ++iter) {
    const auto spec = random_small_spec(rng, 8000 + iter);
    const auto sc = testing::make_scenario(spec);
    testing::RunOptions o;
    o.combine = rng() % 2 ? Combine::a2a : Combine::ag_rs;
    o.kv_chunk_blocks = int(rng() % 3);
    const auto base = testing::run_dcp(sc, cpu1(), o);
    for (std::uint64_t p = 1; p <= 2; ++p) {
      const auto permuted = testing::permute_block_ids(sc, spec.seed * 31 + p);
      ASSERT_EQ(permuted.num_blocks, sc.num_blocks);
      ASSERT_EQ(permuted.batch.max_blocks, sc.batch.max_blocks);
      if (sc.num_blocks > 1) {
        // every used id moved
        for (std::size_t i = 0; i < sc.batch.block_table.size(); ++i) {
          if (sc.batch.block_table[i] >= 0) {
            ASSERT_NE(permuted.batch.block_table[i], sc.batch.block_table[i]);
          }
        }
      }
      ASSERT_TRUE(testing::agreement(base, testing::run_dcp(permuted, cpu1(), o)).bit_identical)
          << describe(spec) << " " << describe(o) << " permutation " << p;
    }
  }
}

// SPEC section 6: bounding every row at T (seeing the future drafts) must miss the reference by
// far more than the tolerance on batches with drafts.
TEST(NegativeControl, SeeingFutureDraftsFailsByFar) {
  std::mt19937_64 rng(505);
  int runs = 0;
  for (int iter = 0; runs < 30 && iter < 200; ++iter) {
    auto spec = random_small_spec(rng, 9000 + iter);
    // batches with real drafts (some request has Q >= 3) and contexts short enough that seeing
    // Q - 1 extra keys moves the output visibly (SPEC: typically 0.05-0.3 max abs)
    spec.heads = 16;
    spec.world = 1 << int(rng() % 4);
    spec.full_mask_fraction = 0.0;
    spec.max_drafts = 3 + int(rng() % 5);
    spec.max_context = 16 + std::int64_t(rng() % 85);
    const auto sc = testing::make_scenario(spec);
    bool has_drafts = false;
    for (int b = 0; b < sc.batch.num_requests(); ++b) has_drafts |= sc.batch.q_len(b) >= 3;
    if (!has_drafts) continue;
    ++runs;
    testing::RunOptions o;
    o.combine = rng() % 2 ? Combine::a2a : Combine::ag_rs;
    const auto want = testing::run_reference(sc);
    const auto tol = testing::tolerance_for(spec);
    const auto good = testing::compare(sc, testing::run_dcp(sc, cpu1(), o), want, tol);
    ASSERT_TRUE(good.pass) << describe(spec) << "\n" << testing::describe(good);
    o.see_future = true;
    const auto bad = testing::compare(sc, testing::run_dcp(sc, cpu1(), o), want, tol);
    EXPECT_FALSE(bad.pass) << describe(spec);
    EXPECT_GT(bad.max_out_error, 0.05)
        << describe(spec) << " " << testing::describe_batch(sc.batch);
    // requests without drafts are unaffected by the control
    for (int b = 0; b < sc.batch.num_requests(); ++b) {
      if (sc.batch.q_len(b) == 1) {
        EXPECT_TRUE(bad.requests[b].pass) << "request " << b << " has no drafts";
      }
    }
  }
  EXPECT_EQ(runs, 30);
}

// SPEC section 3 end to end: short requests (T < W + Q) with rows that see nothing on some ranks,
// and requests no rank but a few own any key of, merged correctly; padding exactly empty.
TEST(EmptyRows, ShortRequestsAndEmptyRanksMergeCorrectly) {
  struct Case {
    int W;
    std::vector<int> q;
    std::vector<std::int64_t> T;
  };
  const std::vector<Case> cases = {
      {4, {3, 2}, {4, 30}},  // rank 3 sees nothing for rows 0, 1 of request 0
      {8, {3}, {3}},         // ranks 3..7 see nothing at all
      {8, {8, 1}, {8, 1}},   // every query row is its own only key on some rank
      {2, {1, 1, 1}, {1, 2, 1}},
      {4, {5, 1, 2}, {6, 1, 3}},
  };
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    for (int pad : {0, 3}) {
      for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
        for (int chunk : {0, 1}) {
          for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
            testing::ScenarioSpec spec;
            spec.world = c.W;
            spec.heads = 2 * c.W;
            spec.block_size = 16;
            spec.kv_dtype = kv;
            spec.seed = seed++;
            const auto sc = testing::custom_scenario(spec, c.q, c.T, {}, pad);
            testing::RunOptions o;
            o.combine = combine;
            o.kv_chunk_blocks = chunk;
            const auto got = testing::run_dcp(sc, cpu1(), o);
            const auto cmp = testing::compare(sc, got, testing::run_reference(sc),
                                              testing::tolerance_for(sc.spec));
            EXPECT_TRUE(cmp.pass) << describe(sc.spec) << " " << describe(o) << "\n"
                                  << testing::describe(cmp);
            EXPECT_TRUE(cmp.padding_exact);
            for (std::int64_t row = sc.batch.real_tokens(); row < sc.batch.rows(); ++row) {
              for (int h = 0; h < spec.heads; ++h) {
                EXPECT_TRUE(testing::row_is_empty(got.out, got.lse, spec.heads, row, h));
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dcpmla
