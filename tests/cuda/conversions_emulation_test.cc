// The round decode's f16 conversions in their host emulation (conversions.cuh under
// DCPMLA_EMULATE): an fp8 cache widened to f16 (widen_fp8x4_f16) on every pair of e4m3 bytes in
// either half of a word, exact and NaN to NaN; P packed as f16 (pack_f16x2) by numeric.h's
// rounding. The GPU instructions are checked against the same in conversions_test.cu.
#include "cuda_emulation.h"
// The emulation shims must come first.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/conversions.cuh"

namespace dcpmla::cuda {
namespace {

TEST(Fp8Widening, F16HoldsEveryPairExactly) {
  for (std::uint32_t two = 0; two < 0x10000u; ++two) {
    const uint2 w = widen_fp8x4_f16(two | two << 16);
    ASSERT_EQ(w.x, w.y) << std::hex << two;
    for (int h = 0; h < 2; ++h) {
      const float want = fp8_e4m3_to_float(std::uint8_t(two >> 8 * h));
      const float got = f16_to_float(std::uint16_t(w.x >> 16 * h));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << std::hex << two;
      } else {
        ASSERT_EQ(float_bits(got), float_bits(want)) << std::hex << two;
      }
    }
  }
}

TEST(Fp8Widening, PackF16RoundsAsNumeric) {
  const float values[] = {0.0f,     1.0f,  -0.3333333f, 65504.0f,
                          65520.0f, 1e-7f, -6.1e-5f,    0.99951172f};
  for (float lo : values) {
    for (float hi : values) {
      const std::uint32_t p = pack_f16x2(lo, hi);
      EXPECT_EQ(p & 0xffffu, float_to_f16(lo));
      EXPECT_EQ(p >> 16, float_to_f16(hi));
    }
  }
}

}  // namespace
}  // namespace dcpmla::cuda
