// The round decode's f16 conversions as the GPU runs them (cvt.rn.f16x2.e4m3x2 and
// cvt.rn.f16x2.f32) against numeric.h on the host: every pair of e4m3 bytes in either half of a
// word, and floats around f16's range (subnormals, ties, overflow). Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/conversions.cuh"
#include "dcpmla/numeric.h"

namespace dcpmla::cuda {
namespace {

constexpr int kPairs = 1 << 16, kFloats = 1 << 20;

__global__ void widen_every_pair(uint2* widened) {
  const auto two = std::uint32_t(blockIdx.x * blockDim.x + threadIdx.x);
  if (two < std::uint32_t(kPairs)) widened[two] = widen_fp8x4_f16(two | two << 16);
}

__global__ void pack_floats(const float* x, std::uint32_t* packed) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < kFloats / 2) packed[i] = pack_f16x2(x[2 * i], x[2 * i + 1]);
}

bool gpu_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(F16ConversionsGpu, MatchTheHostOnEveryFp8PairAndAroundTheRange) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(20261205);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::vector<float> x(kFloats);
  for (float& v : x) v = bits_float((bits(rng) & 0x807fffffu) | ((97u + bits(rng) % 48u) << 23));
  x[0] = 65520.0f;  // the tie past the largest f16: inf
  x[1] = std::ldexp(1.0f, -25);
  uint2* d_widened = nullptr;
  float* d_x = nullptr;
  std::uint32_t* d_packed = nullptr;
  ASSERT_EQ(cudaMalloc(&d_widened, kPairs * sizeof(uint2)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_x, kFloats * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_packed, kFloats / 2 * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_x, x.data(), kFloats * 4, cudaMemcpyHostToDevice), cudaSuccess);
  widen_every_pair<<<kPairs / 256, 256>>>(d_widened);
  pack_floats<<<kFloats / 2 / 256, 256>>>(d_x, d_packed);
  std::vector<uint2> widened(kPairs);
  std::vector<std::uint32_t> packed(kFloats / 2);
  ASSERT_EQ(cudaMemcpy(widened.data(), d_widened, kPairs * sizeof(uint2), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(packed.data(), d_packed, kFloats / 2 * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_widened);
  cudaFree(d_x);
  cudaFree(d_packed);
  for (std::uint32_t two = 0; two < std::uint32_t(kPairs); ++two) {
    ASSERT_EQ(widened[two].x, widened[two].y) << std::hex << two;
    for (int h = 0; h < 2; ++h) {
      const float want = fp8_e4m3_to_float(std::uint8_t(two >> 8 * h));
      const float got = f16_to_float(std::uint16_t(widened[two].x >> 16 * h));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << std::hex << two;
      } else {
        ASSERT_EQ(float_bits(got), float_bits(want)) << std::hex << two;
      }
    }
  }
  for (int i = 0; i < kFloats / 2; ++i) {
    ASSERT_EQ(packed[i] & 0xffffu, float_to_f16(x[2 * i])) << x[2 * i];
    ASSERT_EQ(packed[i] >> 16, float_to_f16(x[2 * i + 1])) << x[2 * i + 1];
  }
}

}  // namespace
}  // namespace dcpmla::cuda
