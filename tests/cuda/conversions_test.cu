// The fp8 widening by integer moves (widen_fp8x4_finite: prmt and bf16x2 multiplies on the GPU)
// against the conversion-instruction widening, on every pair of e4m3 bytes, and
// fp8_unit_has_nan on every byte value at every position, run on the GPU (skipped without one).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/conversions.cuh"
#include "dcpmla/numeric.h"

namespace dcpmla::cuda {
namespace {

constexpr int kPairs = 1 << 16, kUnits = 16 * 256;

// finite[2 two + h]: the pair in half h of the word, the other half's bytes NaN or arbitrary.
__global__ void widen_every_pair(std::uint32_t* finite, std::uint32_t* converted) {
  const auto two = std::uint32_t(blockIdx.x * blockDim.x + threadIdx.x);
  if (two >= std::uint32_t(kPairs)) return;
  finite[2 * two] = widen_fp8x4_finite(two | 0xabcd0000u).x;
  finite[2 * two + 1] = widen_fp8x4_finite(two << 16 | 0x7f7fu).y;
  converted[two] = widen_fp8x2(two);
}

// Unit k: byte k / 256 at position k % 16, the other bytes 0x7e (448).
__global__ void probe_units(int* has_nan) {
  const int k = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= kUnits) return;
  const std::uint32_t b = std::uint32_t(k) >> 4, pos = std::uint32_t(k) & 15u;
  std::uint32_t w[4] = {0x7e7e7e7eu, 0x7e7e7e7eu, 0x7e7e7e7eu, 0x7e7e7e7eu};
  const std::uint32_t shift = 8u * (pos & 3u);
  w[pos >> 2] = (w[pos >> 2] & ~(0xffu << shift)) | (b << shift);
  has_nan[k] = fp8_unit_has_nan(make_uint4(w[0], w[1], w[2], w[3])) ? 1 : 0;
}

bool gpu_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bool is_nan_byte(std::uint32_t b) {
  return (b & 0x7fu) == 0x7fu;
}

TEST(Fp8WideningGpu, IntegerFormEqualsConversionsOnEveryFiniteByte) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  std::uint32_t *d_finite = nullptr, *d_converted = nullptr;
  int* d_nan = nullptr;
  ASSERT_EQ(cudaMalloc(&d_finite, 2 * kPairs * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_converted, kPairs * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_nan, kUnits * sizeof(int)), cudaSuccess);
  widen_every_pair<<<kPairs / 256, 256>>>(d_finite, d_converted);
  probe_units<<<kUnits / 256, 256>>>(d_nan);
  std::vector<std::uint32_t> finite(2 * kPairs), converted(kPairs);
  std::vector<int> has_nan(kUnits);
  ASSERT_EQ(cudaMemcpy(finite.data(), d_finite, 2 * kPairs * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(converted.data(), d_converted, kPairs * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(has_nan.data(), d_nan, kUnits * sizeof(int), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_finite);
  cudaFree(d_converted);
  cudaFree(d_nan);
  int checked = 0;
  for (std::uint32_t two = 0; two < std::uint32_t(kPairs); ++two) {
    if (is_nan_byte(two & 0xffu) || is_nan_byte(two >> 8)) continue;
    ASSERT_EQ(finite[2 * two], converted[two]) << std::hex << two;
    ASSERT_EQ(finite[2 * two + 1], converted[two]) << std::hex << two;
    const std::uint32_t exact =
        float_bits(fp8_e4m3_to_float(std::uint8_t(two))) >> 16 |
        (float_bits(fp8_e4m3_to_float(std::uint8_t(two >> 8))) & 0xffff0000u);
    ASSERT_EQ(finite[2 * two], exact) << std::hex << two;
    ++checked;
  }
  EXPECT_EQ(checked, 254 * 254);
  for (int k = 0; k < kUnits; ++k) {
    ASSERT_EQ(has_nan[k] != 0, is_nan_byte(std::uint32_t(k) >> 4)) << "unit " << k;
  }
}

}  // namespace
}  // namespace dcpmla::cuda
