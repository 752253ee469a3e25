// Element-wise f32 -> f32 (a device copy) or bf16 (round to nearest even, as float_to_bf16).
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // float4 groups per thread, all loaded before stores
constexpr int kBlockGroups = kThreads * kUnroll;

// src 16-byte and dst 8-byte aligned: groups of 4 elements (float4 in, 4 x bf16 = uint2 out);
// the last n % 4 elements by block 0.
__global__ void __launch_bounds__(kThreads)
    to_bf16_vec_kernel(const float* src, bf16_bits* dst, std::int64_t n) {
  const std::int64_t groups = n / 4;
  const auto* src4 = reinterpret_cast<const float4*>(src);
  auto* dst4 = reinterpret_cast<uint2*>(dst);
  for (std::int64_t base = std::int64_t(blockIdx.x) * kBlockGroups + threadIdx.x; base < groups;
       base += std::int64_t(gridDim.x) * kBlockGroups) {
    copy_unrolled<kThreads, kUnroll>(src4, dst4, base, groups, [](const float4& v) {
      return make_uint2(bf16_pair(v.x, v.y), bf16_pair(v.z, v.w));
    });
  }
  if (blockIdx.x == 0 && threadIdx.x < n - groups * 4) {
    const std::int64_t i = groups * 4 + threadIdx.x;
    dst[i] = float_to_bf16(src[i]);
  }
}

// Any alignment (elements only): one element per thread per step.
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
  const bool aligned = reinterpret_cast<std::uintptr_t>(a.src.data) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(a.dst.data) % 8 == 0;
  if (aligned) {
    to_bf16_vec_kernel<<<grid_blocks(n / 4, kBlockGroups), kThreads, 0, s>>>(
        a.src.as<const float>(), a.dst.as<bf16_bits>(), n);
    gpu::check_launch("to_bf16_vec_kernel<<<>>>");
  } else {
    to_bf16_kernel<<<grid_blocks(n, kThreads), kThreads, 0, s>>>(a.src.as<const float>(),
                                                                 a.dst.as<bf16_bits>(), n);
    gpu::check_launch("to_bf16_kernel<<<>>>");
  }
}

}  // namespace dcpmla::cuda
