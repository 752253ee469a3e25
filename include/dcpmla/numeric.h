// Scalar conversions shared by host and device code: bf16 and fp8 e4m3 (OCP, finite-only, 448 max).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DCPMLA_HD __host__ __device__ __forceinline__
#else
#define DCPMLA_HD inline
#endif

namespace dcpmla {

DCPMLA_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DCPMLA_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

DCPMLA_HD float bf16_to_float(std::uint16_t h) {
  return bits_float(std::uint32_t(h) << 16);
}

// Round to nearest even; NaN stays a quiet NaN.
DCPMLA_HD std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

// IEEE binary16 (the round decode's MMA inputs for an fp8 cache): 1 sign, 5 exponent (bias 15),
// 10 mantissa bits, subnormals down to 2^-24.
DCPMLA_HD float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    const float mag = float(man) * 5.9604644775390625e-8f;  // man * 2^-24, exact
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round to nearest even; beyond 65504 (from 65520 on) +-inf; NaN stays a quiet NaN.
DCPMLA_HD std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const auto sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);
  const std::uint32_t exp = a >> 23;
  if (exp < 113u) {  // below 2^-14: a multiple of 2^-24, mant x 2^(exp - 126)
    const std::uint32_t shift = 126u - exp;
    if (shift > 24u) return sign;
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t q = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return std::uint16_t(sign | q);  // q == 0x400 is the smallest normal
  }
  const std::uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return std::uint16_t(sign | ((rounded - (112u << 23)) >> 13));
}

// e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; S.1111.111 is NaN, no infinities.
DCPMLA_HD float fp8_e4m3_to_float(std::uint8_t v) {
  const std::uint32_t sign = std::uint32_t(v & 0x80u) << 24;
  const std::uint32_t exp = (v >> 3) & 0xfu;
  const std::uint32_t man = v & 0x7u;
  if (exp == 0xfu && man == 0x7u) return bits_float(sign | 0x7fc00000u);
  if (exp == 0) {
    // subnormal: man * 2^-9
    const float mag = float(man) * 0.001953125f;
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// Rounds to nearest even; finite values beyond 448 saturate to +-448; NaN and +-inf map to NaN
// (e4m3 has no infinity, and a key written as +-inf must not come back finite: SPEC section 5).
DCPMLA_HD std::uint8_t float_to_fp8_e4m3(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint8_t sign = std::uint8_t((u >> 24) & 0x80u);
  const std::uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) return std::uint8_t(sign | 0x7fu);
  const float a = bits_float(abs_bits);
  if (a >= 464.0f) return std::uint8_t(sign | 0x7eu);  // 448 is the largest; 464 rounds past it
  if (a < 0.015625f) {
    // subnormal range (below 2^-6): quantum 2^-9
    const float q = a * 512.0f;
    std::uint32_t m = std::uint32_t(q);
    const float rest = q - float(m);
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;
    return std::uint8_t(sign | m);  // m == 8 becomes the smallest normal, 0x08
  }
  // normal: keep 3 mantissa bits with round-to-nearest-even on the float bits
  std::uint32_t exp = (abs_bits >> 23) - 120u;
  std::uint32_t man = abs_bits & 0x7fffffu;
  std::uint32_t keep = man >> 20;
  const std::uint32_t rest = man & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++keep;
  if (keep == 8u) {
    keep = 0;
    ++exp;
  }
  if (exp > 15u || (exp == 15u && keep == 7u)) return std::uint8_t(sign | 0x7eu);
  return std::uint8_t(sign | (exp << 3) | keep);
}

}  // namespace dcpmla
