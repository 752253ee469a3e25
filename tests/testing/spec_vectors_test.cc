// Every test vector of SPEC section 6, and the SPEC's example batches end to end through the CPU
// backend against the double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "dcpmla/batch.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/merge.h"
#include "dcpmla/plan.h"
#include "dcpmla/sharding.h"
#include "dcpmla/testing/runner.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using testing::custom_scenario;

// A batch with the given Q and T per request and a block table generous enough for any rank.
Batch make_batch(const std::vector<int>& q, const std::vector<std::int64_t>& T,
                 std::vector<Mask> mask = {}) {
  Batch b;
  b.query_start_loc = {0};
  for (int x : q) b.query_start_loc.push_back(b.query_start_loc.back() + x);
  b.total_len = T;
  b.mask = std::move(mask);
  b.max_blocks = 16;
  b.block_table.resize(q.size() * 16);
  std::iota(b.block_table.begin(), b.block_table.end(), 0);
  return b;
}

Plan plan_for(const Batch& b, int W, int rank, int I = 1, int bs = 16) {
  return make_plan(b, {{W, rank, I}, 4, bs, std::int64_t(b.block_table.size()), {}});
}

std::vector<std::int64_t> iota_vec(std::int64_t from, std::int64_t to) {  // [from, to]
  std::vector<std::int64_t> v;
  for (auto x = from; x <= to; ++x) v.push_back(x);
  return v;
}

TEST(SpecVectors, LocalLen) {
  std::vector<std::int64_t> got;
  for (int r = 0; r < 4; ++r) got.push_back(Sharding{4, r, 1}.local_len(10));
  EXPECT_EQ(got, (std::vector<std::int64_t>{3, 3, 2, 2}));
  got.clear();
  for (int r = 0; r < 2; ++r) got.push_back(Sharding{2, r, 4}.local_len(10));
  EXPECT_EQ(got, (std::vector<std::int64_t>{6, 4}));
}

TEST(SpecVectors, VisibleCountsViaThePlan) {
  const Batch b = make_batch({3}, {10});
  const Plan r0 = plan_for(b, 2, 0), r1 = plan_for(b, 2, 1);
  EXPECT_EQ(row_global_bounds(b), (std::vector<std::int64_t>{8, 9, 10}));
  EXPECT_EQ(r0.row_local_bound, (std::vector<std::int32_t>{4, 5, 5}));
  EXPECT_EQ(r1.row_local_bound, (std::vector<std::int32_t>{4, 4, 5}));
  // the wrong "local minus offset" rule gives [3, 4, 5] on both ranks, which differs
  for (const Plan* p : {&r0, &r1}) {
    std::vector<std::int32_t> wrong;
    for (int j = 0; j < 3; ++j) wrong.push_back(p->request_local_len[0] - (3 - 1 - j));
    EXPECT_EQ(wrong, (std::vector<std::int32_t>{3, 4, 5}));
    EXPECT_NE(p->row_local_bound, wrong);
  }
}

TEST(SpecVectors, Row0OfRank1SeesSixtyTwoKeys) {
  const Batch b = make_batch({4}, {128});
  const Plan p = plan_for(b, 2, 1);
  EXPECT_EQ(row_global_bounds(b)[0], 125);
  EXPECT_EQ(p.row_local_bound[0], 62);
  EXPECT_NE(p.request_local_len[0] - 3, 62);  // local minus offset would say 61
}

TEST(SpecVectors, Slot) {
  const std::vector<std::int32_t> bt = {7, 3, 9};
  const Sharding r0{8, 0, 1};
  EXPECT_EQ(r0.owner(1000), 0);
  EXPECT_EQ(r0.slot(1000, bt, 64), 253);
  for (int r = 1; r < 8; ++r) EXPECT_EQ((Sharding{8, r, 1}.slot(1000, bt, 64)), -1);
}

TEST(SpecVectors, Ragged3Plus1) {
  const Batch b = make_batch({3, 1}, {31, 35});
  const Plan p = plan_for(b, 2, 0);
  EXPECT_EQ(row_requests(b), (std::vector<std::int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(row_global_bounds(b), (std::vector<std::int64_t>{29, 30, 31, 35}));
  EXPECT_FALSE(is_uniform(b));
  // rank 0 of W = 2 owns the even positions: local bounds ceil(bound / 2)
  EXPECT_EQ(p.row_local_bound, (std::vector<std::int32_t>{15, 15, 16, 18}));
  const Batch full = make_batch({3, 1}, {31, 35}, {Mask::full, Mask::full});
  EXPECT_EQ(row_global_bounds(full), (std::vector<std::int64_t>{31, 31, 31, 35}));
  EXPECT_EQ(plan_for(full, 2, 0).row_local_bound, (std::vector<std::int32_t>{16, 16, 16, 18}));
  const Batch full0 = make_batch({3, 1}, {31, 35}, {Mask::full, Mask::causal});
  EXPECT_EQ(row_global_bounds(full0), (std::vector<std::int64_t>{31, 31, 31, 35}));
  EXPECT_EQ(plan_for(full0, 2, 1).row_local_bound, (std::vector<std::int32_t>{15, 15, 15, 17}));
  // flattened rows carry the same bounds
  EXPECT_EQ(flatten(b).total_len, (std::vector<std::int64_t>{29, 30, 31, 35}));
  EXPECT_EQ(flatten(full).total_len, (std::vector<std::int64_t>{31, 31, 31, 35}));
}

TEST(SpecVectors, WarmUpBatch8Plus1) {
  const Batch b = make_batch({8, 1}, {100, 40});
  for (int rank = 0; rank < 2; ++rank) {
    const Plan p = plan_for(b, 2, rank);
    auto want = iota_vec(93, 100);
    want.push_back(40);
    EXPECT_EQ(row_global_bounds(b), want);
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(p.row_local_bound[i], (Sharding{2, rank, 1}.local_len(want[i]))) << "row " << i;
    }
    EXPECT_EQ(p.num_rows, 9);
    EXPECT_EQ(row_requests(b).size(), 9u);
    EXPECT_FALSE(is_uniform(b));
    // one work item per request (no split, tile_pairs = 0): all Q x H pairs of its rows
    ASSERT_EQ(p.work.size(), 2u);
    for (const WorkItem& w : p.work) {
      EXPECT_EQ(w.row_begin, w.request == 0 ? 0 : 8);
      EXPECT_EQ(w.num_pairs, (w.request == 0 ? 8 : 1) * 4);
    }
  }
  // the crash of SPEC section 7: a per-request array where per-token rows are expected
  const Plan p = plan_for(b, 2, 0);
  std::vector<float> q(std::size_t(9) * 4 * kHeadDim, 0.0f), out(std::size_t(9) * 4 * kLatentDim),
      lse(9 * 4);
  HostKvCache cache(DType::bf16, std::int64_t(b.block_table.size()), 16);
  DecodeArgs a;
  a.plan = &p;
  a.q = TensorRef(q.data(), DType::f32, {2, 4, kHeadDim});
  a.cache = cache.ref();
  a.block_table = TensorRef(b.block_table.data(), DType::i32, {2, b.max_blocks});
  a.out = TensorRef(out.data(), DType::f32, {9, 4, kLatentDim});
  a.lse = TensorRef(lse.data(), DType::f32, {9, 4});
  a.softmax_scale = 0.1352338f;
  try {
    make_cpu_backend(1)->decode(a, nullptr);
    FAIL() << "q with 2 rows for 9 tokens was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shape_mismatch);
    EXPECT_EQ(e.argument(), "q");
    EXPECT_EQ(e.actual(), "2 rows");
    EXPECT_NE(std::string(e.what()).find("9 rows"), std::string::npos) << e.what();
  }
}

TEST(SpecVectors, Ragged8Plus2IsNotFivePlusFive) {
  const Batch b = make_batch({8, 2}, {100, 40});
  auto want = iota_vec(93, 100);
  want.push_back(39);
  want.push_back(40);
  auto wrong = iota_vec(96, 100);
  const auto tail = iota_vec(36, 40);
  wrong.insert(wrong.end(), tail.begin(), tail.end());
  // the 5 + 5 view really produces the wrong bounds ...
  const Batch five = make_batch({5, 5}, {100, 40});
  EXPECT_EQ(row_global_bounds(five), wrong);
  EXPECT_TRUE(is_uniform(five));
  // ... and the explicit batch never does, flattened or not, nor does any rank's plan
  EXPECT_EQ(row_global_bounds(b), want);
  EXPECT_NE(row_global_bounds(b), wrong);
  EXPECT_FALSE(is_uniform(b)) << "10 tokens = 2 x 5, but the batch is 8 + 2";
  EXPECT_EQ(row_requests(b), (std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(row_global_bounds(flatten(b)), want);
  for (int W : {1, 2, 4}) {
    for (int rank = 0; rank < W; ++rank) {
      const Sharding sh{W, rank, 1};
      const Plan p = plan_for(b, W, rank);
      std::vector<std::int32_t> local_want, local_wrong;
      for (auto g : want) local_want.push_back(std::int32_t(sh.local_len(g)));
      for (auto g : wrong) local_wrong.push_back(std::int32_t(sh.local_len(g)));
      EXPECT_EQ(p.row_local_bound, local_want) << "W " << W << " rank " << rank;
      EXPECT_NE(p.row_local_bound, local_wrong) << "W " << W << " rank " << rank;
      const Plan f = plan_for(flatten(b), W, rank);
      EXPECT_EQ(f.row_local_bound, local_want) << "W " << W << " rank " << rank;
    }
  }
}

TEST(SpecVectors, MergeVectors) {
  auto id = [](float x) { return x; };
  {
    const float o[] = {1, 0, 0, 1}, l[] = {std::log(3.0f), 0.0f};
    float out[2];
    const float L = merge::merge_partials(2, o, 2, l, 1, 2, out, id);
    EXPECT_NEAR(out[0], 0.75f, 1e-6f);
    EXPECT_NEAR(out[1], 0.25f, 1e-6f);
    EXPECT_NEAR(L, std::log(4.0f), 1e-6f);
  }
  {
    const float o[] = {1, 0, 123, NAN}, l[] = {std::log(3.0f), -INFINITY};
    float out[2];
    const float L = merge::merge_partials(2, o, 2, l, 1, 2, out, id);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_FLOAT_EQ(L, std::log(3.0f));
  }
  {
    const float o[] = {NAN, NAN, 5, 6}, l[] = {-INFINITY, -INFINITY};
    float out[2] = {9, 9};
    const float L = merge::merge_partials(2, o, 2, l, 1, 2, out, id);
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_TRUE(std::isinf(L) && L < 0);
  }
  // The second partial read a NaN key: never hidden.
  for (float bad : {NAN, INFINITY}) {
    const float o[] = {1, 0, 0, 1}, l[] = {std::log(3.0f), bad};
    float out[2];
    const float L = merge::merge_partials(2, o, 2, l, 1, 2, out, id);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
    EXPECT_TRUE(std::isnan(L));
  }
}

// --- the SPEC batches end to end: W rank threads, CPU backend, collectives, vs the reference ---

struct EndToEnd {
  const char* name;
  int world;
  std::vector<int> q;
  std::vector<std::int64_t> T;
  std::vector<Mask> mask;
};

void PrintTo(const EndToEnd& e, std::ostream* os) {
  *os << e.name;
}

class SpecBatches : public ::testing::TestWithParam<EndToEnd> {};

TEST_P(SpecBatches, MatchReferenceForEveryDtypeCombineAndSplit) {
  const auto& e = GetParam();
  std::uint64_t seed = 1;
  for (DType kv : {DType::bf16, DType::fp8_e4m3, DType::f32}) {
    for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
      for (int chunk : {0, 1}) {
        for (bool flat : {false, true}) {
          testing::ScenarioSpec spec;
          spec.world = e.world;
          spec.heads = 16;
          spec.block_size = 16;
          spec.kv_dtype = kv;
          spec.q_dtype = kv == DType::f32 ? DType::f32 : DType::bf16;
          spec.seed = seed++;
          const auto sc = custom_scenario(spec, e.q, e.T, e.mask);
          testing::RunOptions o;
          o.combine = combine;
          o.kv_chunk_blocks = chunk;
          o.flatten = flat;
          const auto got = testing::run_dcp(sc, testing::cpu1(), o);
          const auto want = testing::run_reference(sc);
          const auto cmp = testing::compare(sc, got, want, testing::tolerance_for(spec));
          EXPECT_TRUE(cmp.pass) << e.name << " " << testing::describe(spec) << " "
                                << testing::describe(o) << "\n"
                                << testing::describe(cmp);
          // every row and head of every request is finite: nothing empty in these batches
          for (float l : got.lse) ASSERT_TRUE(std::isfinite(l));
        }
      }
    }
  }
}

class SpecBatchesWithDrafts : public ::testing::TestWithParam<EndToEnd> {};

TEST_P(SpecBatchesWithDrafts, SeeingTheFutureFailsByFar) {
  const auto& e = GetParam();
  testing::ScenarioSpec spec;
  spec.world = e.world;
  spec.heads = 16;
  spec.block_size = 16;
  spec.seed = 99;
  const auto sc = custom_scenario(spec, e.q, e.T, e.mask);
  testing::RunOptions o;
  o.see_future = true;
  const auto want = testing::run_reference(sc);
  const auto cmp = testing::compare(sc, testing::run_dcp(sc, testing::cpu1(), o), want,
                                    testing::tolerance_for(spec));
  EXPECT_FALSE(cmp.pass);
  EXPECT_GT(cmp.max_out_error, 0.05) << e.name;
  // the request with drafts fails, single-token requests are unaffected
  for (int b = 0; b < sc.batch.num_requests(); ++b) {
    EXPECT_EQ(cmp.requests[b].pass, sc.batch.q_len(b) == 1) << e.name << " request " << b;
  }
}

const EndToEnd kStartup{"startup_8_1_W2", 2, {8, 1}, {100, 40}, {}};
const EndToEnd kRagged31{"ragged_3_1_W2", 2, {3, 1}, {31, 35}, {}};
const EndToEnd kRagged31W4{"ragged_3_1_W4", 4, {3, 1}, {31, 35}, {}};
const EndToEnd kRagged82{"ragged_8_2_W2", 2, {8, 2}, {100, 40}, {}};
const EndToEnd kRagged82W4{"ragged_8_2_W4", 4, {8, 2}, {100, 40}, {}};
const EndToEnd kG128{"G128_Q4_W2", 2, {4}, {128}, {}};
const EndToEnd kNonCausal{
    "ragged_3_1_noncausal_W2", 2, {3, 1}, {31, 35}, {Mask::full, Mask::causal}};

auto name_of = [](const auto& info) { return std::string(info.param.name); };

INSTANTIATE_TEST_SUITE_P(Spec, SpecBatches,
                         ::testing::Values(kStartup, kRagged31, kRagged31W4, kRagged82, kRagged82W4,
                                           kG128, kNonCausal),
                         name_of);
// (non-causal requests see all T anyway: the control only means something for causal drafts)
INSTANTIATE_TEST_SUITE_P(Spec, SpecBatchesWithDrafts,
                         ::testing::Values(kStartup, kRagged31, kRagged31W4, kRagged82, kRagged82W4,
                                           kG128),
                         name_of);

}  // namespace
}  // namespace dcpmla
