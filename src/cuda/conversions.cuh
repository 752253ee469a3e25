// The kernels' bf16 and fp8 conversions of packed words (element 0 in the low half or byte).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dcpmla/numeric.h"

namespace dcpmla::cuda {

// The two bf16 values packed in a 32-bit word, as floats.
__device__ __forceinline__ float bf16_lo(std::uint32_t u) {
  return __uint_as_float(u << 16);
}
__device__ __forceinline__ float bf16_hi(std::uint32_t u) {
  return __uint_as_float(u & 0xffff0000u);
}
// Two floats rounded as float_to_bf16 does (NaN stays NaN with its payload's high bits).
__device__ __forceinline__ std::uint32_t bf16_pair(float lo, float hi) {
  return std::uint32_t(float_to_bf16(lo)) | std::uint32_t(float_to_bf16(hi)) << 16;
}
#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/cuda_emulation.h) defines it
// Two floats rounded to nearest even in one instruction (the sm90 decode's P and output).
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif  // !DCPMLA_EMULATE

// Two e4m3 values (the low 16 bits) -> two bf16, exact (every e4m3 value is a bf16 value), by
// the hardware conversion (the sm90 decode's tiles).
__device__ __forceinline__ std::uint32_t widen_fp8x2(std::uint32_t two) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3));
  const float2 f = __half22float2(h);
  return pack_bf16x2(f.x, f.y);
}
// Four e4m3 values -> the bf16 bits of widen_fp8x2 (bytes 0, 1 in .x; 2, 3 in .y), for every
// byte but NaN (0x7f, 0xff; read as +-480 here, so callers test a unit with fp8_unit_has_nan
// first). With the byte s.eeee.mmm placed as the bf16 bits s.0000eeee.mmm0000, a bf16 holds the
// value times 2^-120 exactly (e4m3 subnormals as bf16 subnormals), and one exact multiply by
// 2^120 restores it: four integer and bf16x2 instructions a pair, where widen_fp8x2 takes four of
// which two (F2FP) run on the SM's conversion pipe of 16 lanes.
__device__ __forceinline__ uint2 widen_fp8x4_finite(std::uint32_t four) {
  // Per 16-bit lane: the byte in the low half, its sign bit copied over the high half.
  std::uint32_t lanes[2];
#if defined(DCPMLA_EMULATE)
  const auto lane = [](std::uint32_t b) { return b | (b & 0x80u ? 0xff00u : 0u); };
  for (int h = 0; h < 2; ++h) {
    lanes[h] = lane((four >> 16 * h) & 0xffu) | lane((four >> (16 * h + 8)) & 0xffu) << 16;
  }
#else
  asm("prmt.b32 %0, %1, 0, 0x9180;\n" : "=r"(lanes[0]) : "r"(four));
  asm("prmt.b32 %0, %1, 0, 0xb3a2;\n" : "=r"(lanes[1]) : "r"(four));
#endif
  std::uint32_t out[2];
  for (int h = 0; h < 2; ++h) {
    const std::uint32_t scaled = (lanes[h] << 4) & 0x87f087f0u;  // s.0000eeee.mmm0000 a lane
#if defined(DCPMLA_EMULATE)
    const auto restore = [](std::uint32_t bits) {
      return std::uint32_t(float_to_bf16(__uint_as_float(bits << 16) * 0x1p120f));
    };
    out[h] = restore(scaled & 0xffffu) | restore(scaled >> 16) << 16;
#else
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(out[h]) : "r"(scaled), "r"(0x7b807b80u));  // 2^120
#endif
  }
  return make_uint2(out[0], out[1]);
}
// Eight e4m3 values (two words) -> one 16-byte unit of bf16 by widen_fp8x2 (a staged 16-byte
// unit widens into two such units).
__device__ __forceinline__ uint4 widen_fp8x8(std::uint32_t lo, std::uint32_t hi) {
  return make_uint4(widen_fp8x2(lo), widen_fp8x2(lo >> 16), widen_fp8x2(hi), widen_fp8x2(hi >> 16));
}
// Whether any of the 16 e4m3 bytes is NaN (low seven bits all set).
__device__ __forceinline__ bool fp8_unit_has_nan(uint4 u) {
  constexpr std::uint32_t kLow = 0x7f7f7f7fu, kOne = 0x01010101u;
  const std::uint32_t carries =
      ((u.x & kLow) + kOne) | ((u.y & kLow) + kOne) | ((u.z & kLow) + kOne) | ((u.w & kLow) + kOne);
  return (carries & 0x80808080u) != 0;
}
// The same by dcpmla::fp8_e4m3_to_float (the FMA decode's tiles): the same bits but for the NaN
// payload (0x7fc0 here).
__device__ __forceinline__ std::uint32_t widen_fp8x2_exact(std::uint32_t two) {
  const std::uint32_t lo = float_bits(fp8_e4m3_to_float(std::uint8_t(two & 0xffu))) >> 16;
  const std::uint32_t hi = float_bits(fp8_e4m3_to_float(std::uint8_t((two >> 8) & 0xffu))) >> 16;
  return lo | (hi << 16);
}

}  // namespace dcpmla::cuda
