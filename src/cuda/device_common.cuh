// Small device helpers shared by the CUDA kernels: vector loads of fp32 / raw bf16 elements,
// stores of fp32 values into f32 or bf16 outputs, and grid sizing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/conversions.cuh"

namespace dcpmla::cuda {

using bf16_bits = std::uint16_t;  // a bf16 value as its raw bits

// 8 consecutive elements as floats: 16-byte aligned for bf16, 32-byte aligned for f32.
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const bf16_bits* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  v[0] = bf16_lo(u.x), v[1] = bf16_hi(u.x), v[2] = bf16_lo(u.y), v[3] = bf16_hi(u.y);
  v[4] = bf16_lo(u.z), v[5] = bf16_hi(u.z), v[6] = bf16_lo(u.w), v[7] = bf16_hi(u.w);
}

// 4 consecutive elements as floats: 16-byte aligned for f32, 8-byte aligned for bf16.
__device__ __forceinline__ void load4(const float* p, float* v) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
__device__ __forceinline__ void load4(const bf16_bits* p, float* v) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  v[0] = bf16_lo(u.x), v[1] = bf16_hi(u.x), v[2] = bf16_lo(u.y), v[3] = bf16_hi(u.y);
}

// Stores 4 floats at out[i..i+3] (element index) of an f32 or bf16 array; out + i is 16-byte
// aligned for f32 and 8-byte aligned for bf16.
__device__ __forceinline__ void store4(void* out, bool bf16, std::int64_t i, float a, float b,
                                       float c, float d) {
  if (bf16) {
    *reinterpret_cast<uint2*>(static_cast<bf16_bits*>(out) + i) =
        make_uint2(bf16_pair(a, b), bf16_pair(c, d));
  } else {
    *reinterpret_cast<float4*>(static_cast<float*>(out) + i) = make_float4(a, b, c, d);
  }
}

// Stores one float at out[i] of an f32 or bf16 array.
__device__ __forceinline__ void store1(void* out, bool bf16, std::int64_t i, float v) {
  if (bf16) {
    static_cast<bf16_bits*>(out)[i] = float_to_bf16(v);
  } else {
    static_cast<float*>(out)[i] = v;
  }
}

// dst[i] = convert(src[i]) for the Unroll elements i = base + k * Threads (k < Unroll) below end,
// all loads issued before the first store (Unroll loads in flight per thread).
template <int Threads, int Unroll, class In, class Out, class Convert>
__device__ __forceinline__ void copy_unrolled(const In* src, Out* dst, std::int64_t base,
                                              std::int64_t end, Convert convert) {
  In v[Unroll];
#pragma unroll
  for (int k = 0; k < Unroll; ++k) {
    if (base + k * Threads < end) v[k] = src[base + k * Threads];
  }
#pragma unroll
  for (int k = 0; k < Unroll; ++k) {
    if (base + k * Threads < end) dst[base + k * Threads] = convert(v[k]);
  }
}

// Blocks for a grid-stride loop over n items with `threads` threads per block.
inline unsigned grid_blocks(std::int64_t n, int threads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return unsigned(std::clamp<std::int64_t>(blocks, 1, 65536));
}

}  // namespace dcpmla::cuda
