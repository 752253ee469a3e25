// Conversions between stored element types and fp32 for contiguous runs, written as plain loops
// the compiler vectorises.
#pragma once

#include <array>
#include <cstdint>

#include "dcpmla/numeric.h"
#include "dcpmla/types.h"

namespace dcpmla::cpu {

// All 256 e4m3 codes decoded once: a table lookup instead of a branchy decode per element.
inline const float* fp8_e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = fp8_e4m3_to_float(std::uint8_t(i));
    return t;
  }();
  return table.data();
}

// dst[i] = value(src[i]) * scale for i < n; src is of dtype t (f32, bf16 or fp8 e4m3).
inline void load_f32(const void* src, DType t, std::int64_t n, float scale, float* dst) {
  switch (t) {
    case DType::f32: {
      const auto* s = static_cast<const float*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = s[i] * scale;
      break;
    }
    case DType::bf16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]) * scale;
      break;
    }
    default: {
      const auto* s = static_cast<const std::uint8_t*>(src);
      const float* table = fp8_e4m3_table();
      for (std::int64_t i = 0; i < n; ++i) dst[i] = table[s[i]] * scale;
      break;
    }
  }
}

// dst[i] = encode(src[i] * scale) in dtype t (f32, bf16 or fp8 e4m3).
inline void store_f32(const float* src, std::int64_t n, float scale, DType t, void* dst) {
  switch (t) {
    case DType::f32: {
      auto* d = static_cast<float*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = src[i] * scale;
      break;
    }
    case DType::bf16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i] * scale);
      break;
    }
    default: {
      auto* d = static_cast<std::uint8_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = float_to_fp8_e4m3(src[i] * scale);
      break;
    }
  }
}

// Dot product of two 576-wide rows with independent partial sums, so it vectorises without
// reassociation flags. The summation order is fixed, which keeps results reproducible.
inline float dot_head(const float* __restrict a, const float* __restrict b) {
  constexpr int kLanes = 16;
  float part[kLanes] = {};
  for (int i = 0; i < kHeadDim; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += a[i + l] * b[i + l];
  }
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += part[l];
  return s;
}

// Four dot products of one query row with four consecutive key rows (stride 576): four
// independent accumulator chains instead of one.
inline void dot_head4(const float* __restrict q, const float* __restrict k, float* out) {
  constexpr int kLanes = 16;
  float p0[kLanes] = {}, p1[kLanes] = {}, p2[kLanes] = {}, p3[kLanes] = {};
  for (int i = 0; i < kHeadDim; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float x = q[i + l];
      p0[l] += x * k[i + l];
      p1[l] += x * k[kHeadDim + i + l];
      p2[l] += x * k[2 * kHeadDim + i + l];
      p3[l] += x * k[3 * kHeadDim + i + l];
    }
  }
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  for (int l = 0; l < kLanes; ++l) {
    s0 += p0[l];
    s1 += p1[l];
    s2 += p2[l];
    s3 += p3[l];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

}  // namespace dcpmla::cpu
