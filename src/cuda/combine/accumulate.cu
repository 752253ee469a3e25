// dst[i] += src[i] over f32 buffers (the in-process reduce-scatter's sum on the device).
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void accumulate_kernel(float* dst, const float* src, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] += src[i];
  }
}

}  // namespace

void accumulate(float* dst, const float* src, std::size_t count, cudaStream_t s) {
  if (count == 0) return;
  const auto n = std::int64_t(count);
  accumulate_kernel<<<grid_blocks(n, kThreads), kThreads, 0, s>>>(dst, src, n);
  gpu::check_launch("accumulate_kernel<<<>>>");
}

cudaError_t probe_kernels() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, accumulate_kernel);
}

}  // namespace dcpmla::cuda
