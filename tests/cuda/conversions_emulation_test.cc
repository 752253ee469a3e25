// The fp8 widening by integer moves (widen_fp8x4_finite, its host emulation) against the
// conversion-instruction widening and dcpmla::fp8_e4m3_to_float, on every pair of e4m3 bytes;
// and fp8_unit_has_nan on every byte value at every position of a 16-byte unit.
#include "cuda_emulation.h"
// The emulation shims must come first.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/conversions.cuh"

namespace dcpmla::cuda {
namespace {

bool is_nan_byte(std::uint32_t b) {
  return (b & 0x7fu) == 0x7fu;
}

TEST(Fp8Widening, IntegerFormEqualsConversionsOnEveryFiniteByte) {
  int checked = 0;
  for (std::uint32_t two = 0; two < 0x10000u; ++two) {
    if (is_nan_byte(two & 0xffu) || is_nan_byte(two >> 8)) continue;
    // The pair in either half of the word; the other half's bytes do not reach it.
    const std::uint32_t got = widen_fp8x4_finite(two | 0xabcd0000u).x;
    ASSERT_EQ(got, widen_fp8x2(two)) << std::hex << two;
    ASSERT_EQ(widen_fp8x4_finite(two << 16 | 0x7f7fu).y, got) << std::hex << two;
    const std::uint32_t exact =
        float_bits(fp8_e4m3_to_float(std::uint8_t(two))) >> 16 |
        (float_bits(fp8_e4m3_to_float(std::uint8_t(two >> 8))) & 0xffff0000u);
    ASSERT_EQ(got, exact) << std::hex << two;
    ++checked;
  }
  EXPECT_EQ(checked, 254 * 254);
}

TEST(Fp8Widening, UnitHasNanFindsEveryNanByteAtEveryPosition) {
  for (int pos = 0; pos < 16; ++pos) {
    for (std::uint32_t b = 0; b < 256; ++b) {
      unsigned char bytes[16];
      std::memset(bytes, 0x7e, sizeof bytes);  // 448, the largest finite value
      bytes[pos] = static_cast<unsigned char>(b);
      uint4 u;
      std::memcpy(&u, bytes, sizeof u);
      ASSERT_EQ(fp8_unit_has_nan(u), is_nan_byte(b)) << "byte " << b << " at " << pos;
    }
  }
  uint4 all_ff;
  std::memset(&all_ff, 0xff, sizeof all_ff);
  EXPECT_TRUE(fp8_unit_has_nan(all_ff));
  EXPECT_FALSE(fp8_unit_has_nan(uint4{0x80808080u, 0xfefefefeu, 0x01010101u, 0u}));
}

}  // namespace
}  // namespace dcpmla::cuda
