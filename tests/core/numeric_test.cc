// bf16, f16 and fp8 e4m3 conversions (numeric.h), against exhaustive tables and brute-force
// rounding.
#include "dcpmla/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dcpmla {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool is_bf16_nan(std::uint16_t h) {
  return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

// Round to nearest even by comparing the two bf16 neighbours in double.
std::uint16_t bf16_reference(float x) {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  const std::uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
  if (lo == mag) return std::uint16_t((sign | lo) >> 16);
  const double dx = double(bits_float(mag));
  const double dlo = double(bits_float(lo));
  const double dhi = hi >= 0x7f800000u ? std::ldexp(1.0, 128) : double(bits_float(hi));
  std::uint32_t pick;
  if (dx - dlo < dhi - dx) {
    pick = lo;
  } else if (dx - dlo > dhi - dx) {
    pick = hi;
  } else {
    pick = ((lo >> 16) & 1u) ? hi : lo;
  }
  return std::uint16_t((sign | pick) >> 16);
}

TEST(Bf16, DecodeIsATopHalfShift) {
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc000), -2.0f);
  EXPECT_EQ(bf16_to_float(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(bf16_to_float(0x8000)));
  EXPECT_EQ(bf16_to_float(0x7f80), kInf);
  EXPECT_EQ(bf16_to_float(0xff80), -kInf);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc0)));
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));  // smallest subnormal
}

TEST(Bf16, ExhaustiveRoundTrip) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_float(std::uint16_t(h));
    const std::uint16_t back = float_to_bf16(f);
    if (is_bf16_nan(std::uint16_t(h))) {
      EXPECT_TRUE(is_bf16_nan(back)) << std::hex << h;
      EXPECT_TRUE(back & 0x40u) << "NaN must come back quiet: " << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(Bf16, RoundToNearestEven) {
  // exactly halfway between 1.0 (0x3f80, even) and 1 + 2^-7 (0x3f81): to even
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // halfway between 0x3f81 (odd) and 0x3f82: to even, up
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // just above half rounds up, just below rounds down
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 0.0f)), 0x3f80);
  EXPECT_EQ(float_to_bf16(-(1.0f + std::ldexp(1.0f, -8))), 0xbf80);
  // overflow past the largest bf16 rounds to infinity; infinities and zeros are kept
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  // NaN stays a quiet NaN, including signalling NaN payloads in the low bits
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_float(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_float(0xff800001u))));
  // subnormal floats round too
  EXPECT_EQ(float_to_bf16(bits_float(0x00008000u)), 0x0000);  // tie, to even
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002);  // tie, to even (up)
  EXPECT_EQ(float_to_bf16(bits_float(0x00008001u)), 0x0001);
}

TEST(Bf16, RandomFloatsMatchReferenceRounding) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t u = std::uint32_t(rng());
    if ((u & 0x7f800000u) == 0x7f800000u) continue;   // inf / NaN covered above
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // force exact ties often
    const float f = bits_float(u);
    ASSERT_EQ(float_to_bf16(f), bf16_reference(f)) << std::hex << u;
  }
}

bool is_fp8_nan(std::uint8_t v) {
  return (v & 0x7fu) == 0x7fu;
}

TEST(Fp8E4m3, DecodeTable) {
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
  EXPECT_EQ(fp8_e4m3_to_float(0x80), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x39), 1.125f);
  EXPECT_EQ(fp8_e4m3_to_float(0xb8), -1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);  // largest finite
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x78), 256.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
  // every other code is finite, and codes of one sign are strictly increasing in value
  for (int v = 0; v < 0x7f; ++v) {
    EXPECT_TRUE(std::isfinite(fp8_e4m3_to_float(std::uint8_t(v))));
    if (v > 0) {
      EXPECT_LT(fp8_e4m3_to_float(std::uint8_t(v - 1)), fp8_e4m3_to_float(std::uint8_t(v)));
    }
    EXPECT_EQ(fp8_e4m3_to_float(std::uint8_t(v | 0x80)), -fp8_e4m3_to_float(std::uint8_t(v)));
  }
}

TEST(Fp8E4m3, ExhaustiveDecodeEncodeRoundTrip) {
  for (int v = 0; v < 256; ++v) {
    const auto code = std::uint8_t(v);
    if (is_fp8_nan(code)) continue;
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(code)), code) << std::hex << v;
  }
}

// The nearest finite e4m3 value by brute force over all codes (ties to the even code),
// saturating finite values at +-448.
std::uint8_t fp8_reference(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::abs(double(x));
  if (a >= 448.0) return sign | 0x7e;
  int best = 0;
  double best_err = INFINITY;
  for (int v = 0; v < 0x7f; ++v) {
    const double err = std::abs(double(fp8_e4m3_to_float(std::uint8_t(v))) - a);
    if (err < best_err || (err == best_err && (v & 1) == 0)) {
      best = v;
      best_err = err;
    }
  }
  return std::uint8_t(sign | best);
}

TEST(Fp8E4m3, EncodeMatchesBruteForceNearestEven) {
  std::vector<float> xs;
  // every midpoint between neighbouring codes, and its neighbours
  for (int v = 0; v < 0x7e; ++v) {
    const double lo = fp8_e4m3_to_float(std::uint8_t(v));
    const double hi = fp8_e4m3_to_float(std::uint8_t(v + 1));
    const float mid = float((lo + hi) / 2);
    xs.insert(xs.end(),
              {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), float(lo), float(hi)});
  }
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> expo(-12.0, 9.5);
  for (int i = 0; i < 20000; ++i) xs.push_back(float(std::exp2(expo(rng))));
  for (float x : xs) {
    ASSERT_EQ(float_to_fp8_e4m3(x), fp8_reference(x)) << x;
    ASSERT_EQ(float_to_fp8_e4m3(-x), fp8_reference(-x)) << -x;
  }
}

TEST(Fp8E4m3, SaturationNaNAndSpecificRounding) {
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(449.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(463.9f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(464.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(480.0f), 0x7e);  // never the NaN pattern
  EXPECT_EQ(float_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::max()), 0x7e);
  EXPECT_TRUE(is_fp8_nan(float_to_fp8_e4m3(kInf)));  // no infinity: never a finite value
  EXPECT_TRUE(is_fp8_nan(float_to_fp8_e4m3(-kInf)));
  EXPECT_EQ(float_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_TRUE(is_fp8_nan(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_fp8_nan(float_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_fp8_nan(float_to_fp8_e4m3(bits_float(0x7f800001u))));
  // ties to even: 1.0625 between 1.0 (0x38) and 1.125 (0x39) -> 0x38; 1.1875 -> 0x3a
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3a);
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  // subnormals: quantum 2^-9; 2^-10 is a tie -> 0; 3 * 2^-10 -> 2 * 2^-9
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(-std::ldexp(1.0f, -9)), 0x81);
  // 7.5 * 2^-9 is a tie between 0x07 and the smallest normal 0x08 -> 0x08
  EXPECT_EQ(float_to_fp8_e4m3(7.5f * std::ldexp(1.0f, -9)), 0x08);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -20)), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-std::ldexp(1.0f, -20)), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(bits_float(1u)), 0x00);  // float subnormal
  EXPECT_EQ(float_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
}

// f16: the value of every encoding from its fields, in double.
double f16_reference_value(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  const double mag = exp == 0 ? std::ldexp(double(man), -24) : std::ldexp(1024.0 + man, exp - 25);
  return (h & 0x8000u) ? -mag : mag;
}

TEST(F16, DecodesEveryEncodingAndRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto v = std::uint16_t(h);
    const float f = f16_to_float(v);
    if (((h >> 10) & 0x1fu) == 0x1fu) {
      EXPECT_EQ(std::isnan(f), (h & 0x3ffu) != 0) << h;
      if ((h & 0x3ffu) == 0) EXPECT_EQ(f, (h & 0x8000u) ? -kInf : kInf) << h;
      continue;
    }
    ASSERT_EQ(double(f), f16_reference_value(v)) << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << h;
    ASSERT_EQ(float_to_f16(f), v) << h;
  }
}

// Round to nearest even against the two f16 neighbours of |x| (finite encodings in order).
std::uint16_t f16_reference(float x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(double(x));
  if (a >= 65520.0) return std::uint16_t(sign | 0x7c00u);
  std::uint16_t lo = 0;
  for (int step = 1 << 14; step > 0; step >>= 1) {
    if (lo + step <= 0x7bff && f16_reference_value(std::uint16_t(lo + step)) <= a) lo += step;
  }
  if (f16_reference_value(lo) == a) return std::uint16_t(sign | lo);
  const double dlo = a - f16_reference_value(lo);
  const double dhi = f16_reference_value(std::uint16_t(lo + 1)) - a;
  const bool up = dhi < dlo || (dhi == dlo && (lo & 1u));
  return std::uint16_t(sign | (up ? lo + 1 : lo));
}

TEST(F16, EncodesByNearestEven) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // the tie rounds to the even side, past the last
  EXPECT_EQ(float_to_f16(-kInf), 0xfc00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: even
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 quanta: the even one
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::nanf("")))));
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Exponents around f16's range: 2^-30 .. 2^17, every mantissa.
    const std::uint32_t u = (bits(rng) & 0x807fffffu) | ((97u + bits(rng) % 48u) << 23);
    const float x = bits_float(u);
    ASSERT_EQ(float_to_f16(x), f16_reference(x)) << x;
  }
}

// Every e4m3 value is an f16 value: the round decode widens an fp8 cache to f16 exactly.
TEST(F16, HoldsEveryFp8Value) {
  for (int v = 0; v < 256; ++v) {
    const float f = fp8_e4m3_to_float(std::uint8_t(v));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f16_to_float(float_to_f16(f)), f) << v;
  }
}

}  // namespace
}  // namespace dcpmla
