// The property harness of tests/testing/property_test.cc on the CUDA backend: the same 2000 small
// random DCP + speculative-decoding batches (W ranks simulated on one GPU, every cache dtype and
// mask kind, ragged Q, padding rows, poisoned unused pages, permuted block tables, random split
// policies, both combines, flattened and native forms), each compared with the double-precision
// reference.
#include <gtest/gtest.h>

#include "gpu_test_support.h"
#include "testing/property_cases.h"

namespace dcpmla {
namespace {

constexpr int kShards = 4;  // 2000 cases in 4 tests, so ctest -j spreads them

class CudaSmallBatches : public ::testing::TestWithParam<int> {};

TEST_P(CudaSmallBatches, DcpMatchesReference) {
  DCPMLA_REQUIRE_GPU();
  constexpr int kCases = testing::kSmallShards * testing::kCasesPerShard;
  for (int i = GetParam(); i < kCases; i += kShards) {
    const testing::PropertyCase c = testing::draw_case(testing::kBaseSeed + i, false);
    const testing::Scenario sc = testing::make_scenario(c.spec);
    const auto got = testing::run_dcp(sc, gpu_testing::factory(), c.options);
    const auto cmp = testing::compare(sc, got, testing::run_reference(sc),
                                      testing::tolerance_for(c.spec, c.options));
    ASSERT_TRUE(cmp.pass) << testing::repro(std::uint64_t(i), c) << "\n"
                          << testing::describe_batch(sc.batch) << "\n"
                          << testing::describe(cmp);
  }
}

INSTANTIATE_TEST_SUITE_P(CudaProperty, CudaSmallBatches, ::testing::Range(0, kShards));

}  // namespace
}  // namespace dcpmla
