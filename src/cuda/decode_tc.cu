// Launch of the tensor-core decode kernel (decode_tc_kernel.cuh).
#include <atomic>

#include "check.h"
#include "decode_tc_kernel.cuh"

namespace dcpmla::cuda {
namespace {

template <tc::Cache C>
void launch(const DecodeParams& p, std::int64_t num_tiles, cudaStream_t s) {
  const auto kernel = tc::decode_tc_kernel<C>;
  // The shared-memory opt-in is a per-device function attribute: set once per device.
  static std::atomic<std::uint64_t> configured{0};
  int device = 0;
  DCPMLA_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = device < 64 ? (std::uint64_t(1) << device) : 0;
  if (bit == 0 || !(configured.load() & bit)) {
    DCPMLA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(tc::kSmemBytes)));
    configured.fetch_or(bit);
  }
  kernel<<<unsigned(num_tiles), tc::kThreads, tc::kSmemBytes, s>>>(p);
  check_launch("decode_tc_kernel<<<>>>");
}

}  // namespace

bool tensor_core_decode_supports(DType q_dtype, DType cache_dtype) {
  return q_dtype == DType::bf16 && (cache_dtype == DType::bf16 || cache_dtype == DType::fp8_e4m3);
}

void launch_decode_tc(const DecodeParams& p, DType cache_dtype, std::int64_t num_tiles,
                      cudaStream_t s) {
  if (num_tiles <= 0) return;
  if (cache_dtype == DType::bf16) {
    launch<tc::Cache::bf16>(p, num_tiles, s);
  } else {
    launch<tc::Cache::fp8>(p, num_tiles, s);
  }
}

}  // namespace dcpmla::cuda
