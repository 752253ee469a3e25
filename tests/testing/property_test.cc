// The property test: thousands of random DCP + speculative-decoding batches
// (testing/property_cases.h), each run as a W-rank DCP step on the CPU backend and compared with
// the double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/plan.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "testing/property_cases.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using testing::draw_case;
using testing::kBaseSeed;
using testing::kCasesPerShard;
using testing::kFullSizeCases;
using testing::kSmallShards;
using testing::PropertyCase;
using testing::repro;

// Runs one case; returns whether rank 0's plan split some request (to check coverage).
bool run_case(std::uint64_t index, bool full_size) {
  const PropertyCase c = draw_case(kBaseSeed + index, full_size);
  const testing::Scenario sc = testing::make_scenario(c.spec);
  const auto got = testing::run_dcp(sc, testing::cpu1(), c.options);
  const auto want = testing::run_reference(sc);
  const auto cmp = testing::compare(sc, got, want, testing::tolerance_for(c.spec, c.options));
  EXPECT_TRUE(cmp.pass) << repro(index, c) << "\n"
                        << testing::describe_batch(sc.batch) << "\n"
                        << testing::describe(cmp);
  EXPECT_EQ(got.out.size(), std::size_t(sc.batch.rows()) * c.spec.heads * kLatentDim);
  const Batch b = c.options.flatten ? flatten(sc.batch) : sc.batch;
  const Plan p0 = make_plan(b, {{c.spec.world, 0, c.spec.interleave},
                                c.spec.heads,
                                c.spec.block_size,
                                sc.num_blocks,
                                c.options.model.value_or(make_cpu_backend(1)->device_model()),
                                c.options.kv_chunk_blocks});
  return !p0.merges.empty();
}

class SmallBatches : public ::testing::TestWithParam<int> {};

TEST_P(SmallBatches, DcpMatchesReference) {
  const int shard = GetParam();
  int split_cases = 0;
  for (int i = 0; i < kCasesPerShard; ++i) {
    const std::uint64_t index = std::uint64_t(shard) * kCasesPerShard + i;
    split_cases += run_case(index, false);
    if (HasFailure()) return;  // one reproducible failure is enough
  }
  // split-KV merges are exercised in every shard, not by luck in a few
  EXPECT_GE(split_cases, 10) << "shard " << shard;
}

INSTANTIATE_TEST_SUITE_P(Property, SmallBatches, ::testing::Range(0, kSmallShards));

class FullSizeBatches : public ::testing::TestWithParam<int> {};

TEST_P(FullSizeBatches, DcpMatchesReference) {
  run_case(1000000 + std::uint64_t(GetParam()), true);
}

INSTANTIATE_TEST_SUITE_P(Property, FullSizeBatches, ::testing::Range(0, kFullSizeCases));

// The generator covers what the suite promises (cheap: draws specs only, runs nothing).
TEST(PropertyCoverage, EveryKnobIsDrawn) {
  std::map<int, int> worlds, heads, block_sizes, interleaves;
  std::map<std::pair<int, int>, int> world_heads;
  std::set<DType> kv, q;
  int full_masks = 0, mixed_masks = 0, padded = 0, a2a = 0, flat = 0, chunked = 0, modelled = 0;
  int device_planned = 0;
  int big_q = 0;
  for (int i = 0; i < kSmallShards * kCasesPerShard; ++i) {
    const auto c = draw_case(kBaseSeed + i, false);
    const auto& s = c.spec;
    ASSERT_EQ(s.heads % s.world, 0);
    ASSERT_EQ(s.block_size % s.interleave, 0);
    ASSERT_LE(s.max_drafts, 7);
    ASSERT_LE(s.max_context, 300);
    worlds[s.world]++;
    heads[s.heads]++;
    block_sizes[s.block_size]++;
    interleaves[s.interleave]++;
    world_heads[{s.world, s.heads}]++;
    kv.insert(s.kv_dtype);
    q.insert(s.q_dtype);
    full_masks += s.full_mask_fraction == 1.0;
    mixed_masks += s.full_mask_fraction > 0 && s.full_mask_fraction < 1;
    padded += s.padding_rows > 0;
    a2a += c.options.combine == Combine::a2a;
    flat += c.options.flatten;
    chunked += c.options.kv_chunk_blocks > 0;
    modelled += c.options.model.has_value();
    device_planned += c.options.device_plan;
    big_q += s.max_drafts == 7;
  }
  for (int w : {1, 2, 3, 4, 8}) EXPECT_GE(worlds[w], 10) << "W = " << w;
  for (int h : {1, 16, 96, 128}) EXPECT_GE(heads[h], 20) << "H = " << h;
  for (int bs : {1, 16, 64}) EXPECT_GE(block_sizes[bs], 100) << "block size " << bs;
  for (int i : {1, 2, 4}) EXPECT_GE(interleaves[i], 100) << "I = " << i;
  EXPECT_GE((world_heads[{3, 96}]), 5);
  EXPECT_GE((world_heads[{8, 128}]), 5);
  EXPECT_EQ(kv.size(), 3u);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_GE(full_masks, 100);
  EXPECT_GE(mixed_masks, 300);
  EXPECT_GE(padded, 300);
  EXPECT_GE(a2a, 500);
  EXPECT_GE(flat, 50);
  EXPECT_GE(chunked, 500);
  EXPECT_GE(modelled, 500);
  EXPECT_GE(device_planned, 200);
  EXPECT_GE(big_q, 100);
  for (int i = 0; i < kFullSizeCases; ++i) {
    const auto c = draw_case(kBaseSeed + 1000000 + i, true);
    EXPECT_EQ(c.spec.heads, 128);
    EXPECT_GE(c.spec.max_context, 4000);
    EXPECT_EQ(c.spec.max_drafts, 7);
  }
}

// Same seed, same case: the test is reproducible.
TEST(PropertyCoverage, DrawIsDeterministic) {
  for (int i = 0; i < 50; ++i) {
    const auto a = draw_case(kBaseSeed + i, false), b = draw_case(kBaseSeed + i, false);
    EXPECT_EQ(testing::describe(a.spec), testing::describe(b.spec));
    EXPECT_EQ(testing::describe(a.options), testing::describe(b.options));
    const auto sa = testing::make_scenario(a.spec), sb = testing::make_scenario(b.spec);
    EXPECT_EQ(sa.batch.total_len, sb.batch.total_len);
    EXPECT_EQ(sa.batch.block_table, sb.batch.block_table);
    EXPECT_EQ(sa.q, sb.q);
  }
}

}  // namespace
}  // namespace dcpmla
