// SPEC section 5 on the GPU: NaN and infinities in the query or in read keys poison exactly the
// (row, head) pairs that read them, through the wide and narrow sm90 tiles, the FMA decode, the
// split merge and both combines. A tile's P.V multiplies masked keys by P = 0, so a NaN key past
// an earlier draft row's bound may turn that row's O (never its LSE) NaN too: O is compared bit
// for bit only outside the corrupted key's request.
#include <gtest/gtest.h>

#include <string>

#include "gpu_test_support.h"
#include "testing/non_finite_cases.h"

namespace dcpmla {
namespace {

struct GpuNonFiniteCase {
  int world;
  Combine combine;
  DType q_dtype;
  DType kv_dtype;
  int chunk_blocks;
};

std::string name(const ::testing::TestParamInfo<GpuNonFiniteCase>& info) {
  const GpuNonFiniteCase& c = info.param;
  return "W" + std::to_string(c.world) + "_" + to_string(c.combine) + "_q" + to_string(c.q_dtype) +
         "_kv" + to_string(c.kv_dtype) + "_chunk" + std::to_string(c.chunk_blocks);
}

class CudaNonFinite : public ::testing::TestWithParam<GpuNonFiniteCase> {};

TEST_P(CudaNonFinite, PoisonsExactlyTheReaders) {
  DCPMLA_REQUIRE_GPU();
  const GpuNonFiniteCase& p = GetParam();
  testing::ScenarioSpec spec;
  spec.world = p.world;
  spec.q_dtype = p.q_dtype;
  spec.kv_dtype = p.kv_dtype;
  spec.seed = 31 + p.world;
  const testing::Scenario sc = testing::non_finite_scenario(spec);
  testing::RunOptions options;
  options.combine = p.combine;
  options.model = gpu_testing::kNoSplitModel;
  options.kv_chunk_blocks = p.chunk_blocks;
  testing::check_non_finite(sc, gpu_testing::factory(), options, /*strict_o=*/false);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaNonFinite,
    ::testing::Values(GpuNonFiniteCase{1, Combine::ag_rs, DType::bf16, DType::bf16, 0},
                      GpuNonFiniteCase{2, Combine::a2a, DType::bf16, DType::bf16, 1},
                      GpuNonFiniteCase{2, Combine::ag_rs, DType::bf16, DType::fp8_e4m3, 2},
                      GpuNonFiniteCase{4, Combine::a2a, DType::bf16, DType::fp8_e4m3, 0},
                      GpuNonFiniteCase{2, Combine::ag_rs, DType::f32, DType::f32, 1},
                      GpuNonFiniteCase{1, Combine::ag_rs, DType::f32, DType::bf16, 0}),
    name);

}  // namespace
}  // namespace dcpmla
