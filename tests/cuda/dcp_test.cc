// The CUDA backend through the whole DCP step: W simulated ranks (threads with in-process
// collectives) on one GPU, against the double-precision reference and the CPU backend.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <random>
#include <string>

#include "gpu_test_support.h"

namespace dcpmla {
namespace {

using gpu_testing::Case;
using gpu_testing::factory;
using gpu_testing::random_case;
using testing::custom_scenario;
using testing::describe;

void expect_matches_reference(const testing::Scenario& sc, const testing::RunOptions& o) {
  SCOPED_TRACE(testing::describe_run(sc, o));
  const auto got = testing::run_dcp(sc, factory(), o);
  const auto cmp =
      testing::compare(sc, got, testing::run_reference(sc), testing::tolerance_for(sc.spec, o));
  EXPECT_TRUE(cmp.pass) << describe(cmp);
}

// (a) The property harness: many random cases (W in {1, 2, 4, 8} on one GPU, H in
// {1, 16, 64, 96, 128}, block sizes {1, 16, 32, 64}, I in {1, 2, 4}, every cache dtype, causal
// and full masks, padding, both combines, random split policies).
TEST(CudaDcp, RandomScenariosMatchReference) {
  DCPMLA_REQUIRE_GPU();
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 48; ++i) {
    const Case c = random_case(rng, /*large=*/i % 12 == 11, 1000 + i);
    expect_matches_reference(testing::make_scenario(c.spec), c.options);
    if (HasFailure()) return;
  }
}

// (b) CUDA and CPU backends agree on the same cases (both fp32 inside: within the output
// rounding of q's dtype; empty and padding rows identical).
TEST(CudaDcp, AgreesWithCpuBackend) {
  DCPMLA_REQUIRE_GPU();
  std::mt19937_64 rng(77);
  for (int i = 0; i < 16; ++i) {
    const Case c = random_case(rng, /*large=*/i % 8 == 7, 5000 + i);
    const testing::Scenario sc = testing::make_scenario(c.spec);
    SCOPED_TRACE(testing::describe_run(sc, c.options));
    const auto gpu = testing::run_dcp(sc, factory(), c.options);
    const auto cpu = testing::run_dcp(sc, gpu_testing::cpu_factory(), c.options);
    const auto a = testing::agreement(gpu, cpu);
    const auto tol = testing::tolerance_for(c.spec, c.options);
    EXPECT_LE(a.max_out_diff, tol.out);
    EXPECT_LE(a.max_lse_diff, tol.lse);
    for (std::size_t k = 0; k < cpu.lse.size(); ++k) {
      if (std::isinf(cpu.lse[k])) {
        ASSERT_EQ(gpu.lse[k], cpu.lse[k]) << "(row, head) " << k;
        for (int d = 0; d < kLatentDim; ++d) {
          ASSERT_EQ(gpu.out[k * kLatentDim + d], 0.0f) << "(row, head) " << k;
        }
      }
    }
    if (HasFailure()) return;
  }
}

// (c) The SPEC vector batches (testing::spec_batches) on W = 2 and 4.
TEST(CudaDcp, SpecVectorBatches) {
  DCPMLA_REQUIRE_GPU();
  int seed = 1;
  for (const testing::SpecBatch& v : testing::spec_batches()) {
    for (int W : {2, 4}) {
      for (DType kv : {DType::bf16, DType::fp8_e4m3, DType::f32}) {
        for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
          testing::ScenarioSpec spec;
          spec.world = W;
          spec.heads = 16;
          spec.block_size = 16;
          spec.kv_dtype = kv;
          spec.q_dtype = kv == DType::f32 ? DType::f32 : DType::bf16;
          spec.seed = seed++;
          const testing::Scenario sc = custom_scenario(spec, v.q, v.t, v.masks, /*padding=*/2);
          testing::RunOptions o;
          o.combine = combine;
          o.model = gpu_testing::kNoSplitModel;
          o.kv_chunk_blocks = seed % 2 ? 1 : 0;
          expect_matches_reference(sc, o);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// (d) Rows that see nothing on a rank, ranks that hold nothing at all, and padding rows are
// exactly O = 0, LSE = -inf (compare() checks both), for every combine and split policy.
TEST(CudaDcp, EmptyRowsEmptyRanksAndPadding) {
  DCPMLA_REQUIRE_GPU();
  struct Shape {
    std::vector<int> q;
    std::vector<std::int64_t> t;
  };
  const std::vector<Shape> shapes = {
      {{1, 2, 3}, {1, 3, 5}},  // T < W + Q: rows with no key on most ranks
      {{1}, {1}},              // one token: W - 1 ranks hold nothing
      {{4, 1, 8}, {4, 2, 9}},  // T == Q
  };
  int seed = 11;
  for (const Shape& sh : shapes) {
    for (int W : {4, 8}) {
      for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
        testing::ScenarioSpec spec;
        spec.world = W;
        spec.heads = W * 2;
        spec.block_size = 1;
        spec.kv_dtype = DType::bf16;
        spec.seed = seed++;
        const testing::Scenario sc = custom_scenario(spec, sh.q, sh.t, {}, /*padding=*/3);
        testing::RunOptions o;
        o.combine = combine;
        o.model = gpu_testing::kNoSplitModel;
        o.kv_chunk_blocks = seed % 2 ? 1 : 0;
        expect_matches_reference(sc, o);
        if (HasFailure()) return;
      }
    }
  }
}

// (e) The flattened single-token-row form and the native multi-token form, with the same KV
// split, give the same bits: each (row, head) is computed the same way whatever tile it is in.
TEST(CudaDcp, FlattenedMatchesNativeBitForBit) {
  DCPMLA_REQUIRE_GPU();
  std::mt19937_64 rng(9);
  for (int i = 0; i < 12; ++i) {
    Case c = random_case(rng, false, 300 + i);
    if (i % 3 != 2) {  // mostly bf16, as the SPEC states it; the other dtypes hold too
      c.spec.kv_dtype = DType::bf16;
      c.spec.q_dtype = DType::bf16;
    }
    c.options.model = gpu_testing::kNoSplitModel;
    c.options.kv_chunk_blocks = int(i % 3);  // 0: no split
    const testing::Scenario sc = testing::make_scenario(c.spec);
    SCOPED_TRACE(testing::describe_run(sc, c.options));
    testing::RunOptions flat = c.options;
    flat.flatten = true;
    const auto a = testing::agreement(testing::run_dcp(sc, factory(), c.options),
                                      testing::run_dcp(sc, factory(), flat));
    EXPECT_TRUE(a.bit_identical) << "max|dO| " << a.max_out_diff << " max|dLSE| " << a.max_lse_diff;
    if (HasFailure()) return;
  }
}

// (e2) The same where the two forms run different tile widths: at H = 16 and 32 the flattened
// rows are narrow tiles (16 or 32 pairs, computed transposed) and the native rows of Q >= 3 fill
// wide 64-pair tiles (with narrow tails at some Q); at H = 96 a native row is one wide and one
// narrow tile. Long KV (many tiles, rescaled exp-sums), both cache dtypes, split and unsplit.
TEST(CudaDcp, NarrowAndWideTilesGiveTheSameBits) {
  DCPMLA_REQUIRE_GPU();
  int seed = 60;
  for (int heads : {16, 32, 96}) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      for (int W : {1, 2}) {
        testing::ScenarioSpec spec;
        spec.world = W;
        spec.heads = heads;
        spec.block_size = 64;
        spec.kv_dtype = kv;
        spec.q_dtype = DType::bf16;
        spec.seed = seed++;
        const testing::Scenario sc =
            custom_scenario(spec, {1, 3, 5, 8, 2, 6}, {900, 1500, 64, 2000, 700, 1300});
        testing::RunOptions native;
        native.model = gpu_testing::kNoSplitModel;
        native.kv_chunk_blocks = seed % 2 ? 4 : 0;
        testing::RunOptions flat = native;
        flat.flatten = true;
        SCOPED_TRACE(testing::describe_run(sc, native));
        const auto a = testing::agreement(testing::run_dcp(sc, factory(), native),
                                          testing::run_dcp(sc, factory(), flat));
        EXPECT_TRUE(a.bit_identical)
            << "max|dO| " << a.max_out_diff << " max|dLSE| " << a.max_lse_diff;
        const auto cmp =
            testing::compare(sc, testing::run_dcp(sc, factory(), flat), testing::run_reference(sc),
                             testing::tolerance_for(spec, flat));
        EXPECT_TRUE(cmp.pass) << describe(cmp);
        if (HasFailure()) return;
      }
    }
  }
}

// The round decode (round_kernel.cuh) and the warp-specialised form agree on the launches the
// round decode takes (bf16 and fp8 caches, pages of 64 or 128 tokens; 16 heads make tiles of 16
// pairs, narrow for bf16 and wide for fp8, 96 heads tiles of 48 pairs, rules::tile_step's
// halves), on ragged DCP batches with rows that see no key, split and unsplit
// (DCPMLA_DECODE_ROUNDS, read when a backend is made, picks the kernel): bit for bit on a bf16
// cache; on fp8, whose MMAs the round decode runs in f16 and the other form in bf16, the same LSE
// bits and outputs within P's rounding.
TEST(CudaDcp, RoundsAndWarpSpecialisedAgree) {
  DCPMLA_REQUIRE_GPU();
  gpu_testing::RoundsChoice choice;
  int seed = 90;
  for (int heads : {16, 32, 64, 96, 128}) {
    for (int W : {1, 2}) {
      for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
        testing::ScenarioSpec spec;
        spec.world = W;
        spec.heads = heads;
        spec.block_size = heads == 64 ? 128 : 64;
        spec.kv_dtype = kv;
        spec.q_dtype = DType::bf16;
        spec.seed = seed++;
        const testing::Scenario sc =
            custom_scenario(spec, {1, 3, 5, 8, 2, 6}, {900, 1500, 64, 2000, 3, 1300});
        testing::RunOptions o;
        o.model = gpu_testing::kNoSplitModel;
        o.kv_chunk_blocks = seed % 2 ? 4 : 0;
        SCOPED_TRACE(testing::describe_run(sc, o));
        choice.pick(false);
        const auto ws = testing::run_dcp(sc, factory(), o);
        choice.pick(true);
        const auto rounds = testing::run_dcp(sc, factory(), o);
        const auto a = testing::agreement(ws, rounds);
        if (kv == DType::bf16) {
          EXPECT_TRUE(a.bit_identical)
              << "max|dO| " << a.max_out_diff << " max|dLSE| " << a.max_lse_diff;
        } else {
          EXPECT_EQ(a.max_lse_diff, 0.0);
          EXPECT_LE(a.max_out_diff, 0.0625);  // a bf16 output step below 8
        }
        const auto cmp = testing::compare(sc, rounds, testing::run_reference(sc),
                                          testing::tolerance_for(spec, o));
        EXPECT_TRUE(cmp.pass) << describe(cmp);
        if (HasFailure()) return;
      }
    }
  }
}

// (f) Negative control: every row bounded at T (seeing future drafts) must fail the comparison.
TEST(CudaDcp, SeeingTheFutureFails) {
  DCPMLA_REQUIRE_GPU();
  for (int W : {1, 2}) {
    testing::ScenarioSpec spec;
    spec.world = W;
    spec.heads = 16;
    spec.block_size = 16;
    spec.seed = 41 + W;
    const testing::Scenario sc = custom_scenario(spec, {8, 2}, {100, 40});
    testing::RunOptions o;
    o.see_future = true;
    const auto cmp = testing::compare(sc, testing::run_dcp(sc, factory(), o),
                                      testing::run_reference(sc), testing::tolerance_for(spec));
    EXPECT_FALSE(cmp.pass);
    EXPECT_GT(cmp.max_out_error, 0.05);
  }
}

// (g) Unused pages full of NaN never reach a result: poisoned and clean caches give the same
// bits; so do renamed block ids and a second run.
TEST(CudaDcp, PoisonBlockIdsAndRerunsDoNotChangeBits) {
  DCPMLA_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  for (int i = 0; i < 8; ++i) {
    const Case c = random_case(rng, false, 700 + i);
    const testing::Scenario sc = testing::make_scenario(c.spec);
    SCOPED_TRACE(testing::describe_run(sc, c.options));
    testing::RunOptions clean = c.options;
    clean.poison = false;
    testing::RunOptions dirty = c.options;
    dirty.poison = true;
    const auto base = testing::run_dcp(sc, factory(), dirty);
    EXPECT_TRUE(testing::agreement(base, testing::run_dcp(sc, factory(), clean)).bit_identical);
    EXPECT_TRUE(testing::agreement(base, testing::run_dcp(sc, factory(), dirty)).bit_identical);
    const testing::Scenario renamed = testing::permute_block_ids(sc, 99 + i);
    EXPECT_TRUE(
        testing::agreement(base, testing::run_dcp(renamed, factory(), dirty)).bit_identical);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace dcpmla
