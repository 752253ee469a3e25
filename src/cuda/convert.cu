// Element-wise f32 -> f32 (a device copy) or bf16 (round to nearest even, as float_to_bf16).
#include "check.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void to_bf16_kernel(const float* src, bf16_bits* dst, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = float_to_bf16(src[i]);
  }
}

}  // namespace

void convert(const ConvertArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t n = a.src.numel();
  if (n == 0) return;
  if (a.dst.dtype == DType::f32) {
    if (a.dst.data != a.src.data) {
      DCPMLA_CUDA_CHECK(cudaMemcpyAsync(a.dst.data, a.src.data, std::size_t(n) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, s));
    }
    return;
  }
  to_bf16_kernel<<<grid_blocks(n, kThreads), kThreads, 0, s>>>(a.src.as<const float>(),
                                                               a.dst.as<bf16_bits>(), n);
  check_launch("to_bf16_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
