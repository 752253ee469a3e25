// SPEC section 5 on the CPU backend: NaN and infinities in the query or in read keys poison
// exactly the (row, head) pairs that read them, through splits and both combines, on every rank.
#include <gtest/gtest.h>

#include <string>

#include "testing/non_finite_cases.h"

namespace dcpmla {
namespace {

struct NonFiniteCase {
  int world;
  Combine combine;
  DType kv_dtype;
  int chunk_blocks;  // 0: one work item per request; else splits of this many blocks
};

std::string name(const ::testing::TestParamInfo<NonFiniteCase>& info) {
  const NonFiniteCase& c = info.param;
  return "W" + std::to_string(c.world) + "_" + to_string(c.combine) + "_" + to_string(c.kv_dtype) +
         "_chunk" + std::to_string(c.chunk_blocks);
}

class NonFinite : public ::testing::TestWithParam<NonFiniteCase> {};

TEST_P(NonFinite, PoisonsExactlyTheReaders) {
  const NonFiniteCase& p = GetParam();
  testing::ScenarioSpec spec;
  spec.world = p.world;
  spec.kv_dtype = p.kv_dtype;
  spec.q_dtype = DType::f32;
  spec.seed = 17 + p.world;
  const testing::Scenario sc = testing::non_finite_scenario(spec);
  testing::RunOptions options;
  options.combine = p.combine;
  options.kv_chunk_blocks = p.chunk_blocks;
  if (p.chunk_blocks == 0) options.model = DeviceModel{};  // never split
  testing::check_non_finite(sc, testing::cpu1(), options, /*strict_o=*/true);
}

INSTANTIATE_TEST_SUITE_P(Cases, NonFinite,
                         ::testing::Values(NonFiniteCase{1, Combine::ag_rs, DType::f32, 0},
                                           NonFiniteCase{2, Combine::ag_rs, DType::bf16, 2},
                                           NonFiniteCase{2, Combine::a2a, DType::fp8_e4m3, 1},
                                           NonFiniteCase{4, Combine::a2a, DType::bf16, 3},
                                           NonFiniteCase{4, Combine::ag_rs, DType::f32, 1}),
                         name);

}  // namespace
}  // namespace dcpmla
