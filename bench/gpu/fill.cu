#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "dcpmla/numeric.h"
#include "fill.cuh"

namespace dcpmla::bench {
namespace {

__device__ std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return std::uint32_t(x);
}

__device__ float unit(std::size_t i, std::uint32_t seed) {
  return float(hash32(i * 0x9e3779b97f4a7c15ull + seed)) * (2.0f / 4294967296.0f) - 1.0f;
}

__global__ void fill_bf16(std::uint16_t* dst, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    dst[i] = float_to_bf16(unit(i, seed));
  }
}

__global__ void fill_fp8(std::uint8_t* dst, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    dst[i] = float_to_fp8_e4m3(2.0f * unit(i, seed));
  }
}

}  // namespace

void fill_random_bf16(void* dst, std::size_t n, std::uint32_t seed, void* stream) {
  fill_bf16<<<1024, 256, 0, cudaStream_t(stream)>>>(static_cast<std::uint16_t*>(dst), n, seed);
}

void fill_random_fp8(void* dst, std::size_t n, std::uint32_t seed, void* stream) {
  fill_fp8<<<1024, 256, 0, cudaStream_t(stream)>>>(static_cast<std::uint8_t*>(dst), n, seed);
}

}  // namespace dcpmla::bench
