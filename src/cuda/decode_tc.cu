// Launch of the tensor-core decode kernel (decode_tc_kernel.cuh).
#include <atomic>

#include "check.h"
#include "decode_tc_kernel.cuh"
#include "decode_ws_kernel.cuh"

namespace dcpmla::cuda {
namespace {

// One instantiation per kernel, so each has its own "configured" flags.
template <auto kernel>
void launch(int threads, std::uint32_t smem_bytes, const DecodeParams& p, std::int64_t num_tiles,
            cudaStream_t s) {
  // The shared-memory opt-in is a per-device function attribute: set once per device.
  static std::atomic<std::uint64_t> configured{0};
  int device = 0;
  DCPMLA_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = device < 64 ? (std::uint64_t(1) << device) : 0;
  if (bit == 0 || !(configured.load() & bit)) {
    DCPMLA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
    configured.fetch_or(bit);
  }
  kernel<<<unsigned(num_tiles), threads, smem_bytes, s>>>(p);
  check_launch("tensor-core decode kernel <<<>>>");
}

}  // namespace

bool tensor_core_decode_supports(DType q_dtype, DType cache_dtype) {
  return q_dtype == DType::bf16 && (cache_dtype == DType::bf16 || cache_dtype == DType::fp8_e4m3);
}

void launch_decode_tc(const DecodeParams& p, DType cache_dtype, std::int64_t num_tiles,
                      cudaStream_t s) {
  if (num_tiles <= 0) return;
  // bf16 caches: the warp-specialised kernel (v3). fp8 caches: v2, whose widening loads need
  // registers the output warpgroups of v3 do not have.
  if (cache_dtype == DType::bf16) {
    launch<ws::decode_ws_kernel>(ws::kThreads, ws::kSmemBytes, p, num_tiles, s);
  } else {
    launch<tc::decode_tc_kernel<tc::Cache::fp8>>(tc::kThreads, tc::kSmemBytes, p, num_tiles, s);
  }
}

}  // namespace dcpmla::cuda
