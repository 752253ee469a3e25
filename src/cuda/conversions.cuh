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
// Emulated: pack_bf16x2 in tests/cuda/cuda_emulation.h, the f16 conversions below.
#if !defined(DCPMLA_EMULATE)
// Two floats rounded to nearest even in one instruction (the sm90 decode's P and output).
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Two floats rounded to nearest even as f16 in one instruction (the round decode's P for an fp8
// cache).
__device__ __forceinline__ std::uint32_t pack_f16x2(float lo, float hi) {
  std::uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Four e4m3 values -> four f16 (bytes 0, 1 in .x; 2, 3 in .y), exact, NaN to NaN: one conversion
// a pair.
__device__ __forceinline__ uint2 widen_fp8x4_f16(std::uint32_t four) {
  uint2 r;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n"
      "cvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(r.x), "=r"(r.y)
      : "r"(four));
  return r;
}
#else
inline std::uint32_t pack_f16x2(float lo, float hi) {
  return std::uint32_t(float_to_f16(lo)) | std::uint32_t(float_to_f16(hi)) << 16;
}
inline uint2 widen_fp8x4_f16(std::uint32_t four) {
  std::uint32_t h[4];
  for (int i = 0; i < 4; ++i) {
    h[i] = float_to_f16(fp8_e4m3_to_float(std::uint8_t((four >> 8 * i) & 0xffu)));
  }
  return make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
}
#endif  // !DCPMLA_EMULATE

// Two e4m3 values (the low 16 bits) -> two bf16, exact (every e4m3 value is a bf16 value), by
// the hardware conversion (the sm90 decode's tiles).
__device__ __forceinline__ std::uint32_t widen_fp8x2(std::uint32_t two) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xffffu), __NV_E4M3));
  const float2 f = __half22float2(h);
  return pack_bf16x2(f.x, f.y);
}
// Eight e4m3 values (two words) -> one 16-byte unit of bf16 by widen_fp8x2 (a staged 16-byte
// unit widens into two such units).
__device__ __forceinline__ uint4 widen_fp8x8(std::uint32_t lo, std::uint32_t hi) {
  return make_uint4(widen_fp8x2(lo), widen_fp8x2(lo >> 16), widen_fp8x2(hi), widen_fp8x2(hi >> 16));
}
// The same by dcpmla::fp8_e4m3_to_float (the FMA decode's tiles): the same bits but for the NaN
// payload (0x7fc0 here).
__device__ __forceinline__ std::uint32_t widen_fp8x2_exact(std::uint32_t two) {
  const std::uint32_t lo = float_bits(fp8_e4m3_to_float(std::uint8_t(two & 0xffu))) >> 16;
  const std::uint32_t hi = float_bits(fp8_e4m3_to_float(std::uint8_t((two >> 8) & 0xffu))) >> 16;
  return lo | (hi << 16);
}

}  // namespace dcpmla::cuda
