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

constexpr int kDims = 576;

__device__ float sink_sign(int d) {
  return (hash32(std::uint64_t(d) * 0x9e3779b97f4a7c15ull + 77u) & 1u) ? 1.0f : -1.0f;
}

__global__ void bias_queries(std::uint16_t* q, std::size_t n, float beta) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    q[i] = float_to_bf16(bf16_to_float(q[i]) + beta * sink_sign(int(i % kDims)));
  }
}

__global__ void write_sink_rows(std::uint16_t* cache, const std::int64_t* rows, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n * kDims;
       i += std::size_t(gridDim.x) * blockDim.x) {
    cache[std::size_t(rows[i / kDims]) * kDims + i % kDims] =
        float_to_bf16(sink_sign(int(i % kDims)));
  }
}

}  // namespace

void plant_sink_bf16(void* q, std::size_t n_q, void* cache, const std::int64_t* rows,
                     std::size_t n_rows, float beta, void* stream) {
  bias_queries<<<1024, 256, 0, cudaStream_t(stream)>>>(static_cast<std::uint16_t*>(q), n_q, beta);
  write_sink_rows<<<256, 256, 0, cudaStream_t(stream)>>>(static_cast<std::uint16_t*>(cache), rows,
                                                         n_rows);
}

void fill_random_bf16(void* dst, std::size_t n, std::uint32_t seed, void* stream) {
  fill_bf16<<<1024, 256, 0, cudaStream_t(stream)>>>(static_cast<std::uint16_t*>(dst), n, seed);
}

void fill_random_fp8(void* dst, std::size_t n, std::uint32_t seed, void* stream) {
  fill_fp8<<<1024, 256, 0, cudaStream_t(stream)>>>(static_cast<std::uint8_t*>(dst), n, seed);
}

}  // namespace dcpmla::bench
