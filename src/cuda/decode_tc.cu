// Launch of the tensor-core decode kernel (decode_ws_kernel.cuh).
#include "check.h"
#include "decode_ws_kernel.cuh"
#include "launch_config.h"

namespace dcpmla::cuda {

bool tensor_core_decode_supports(DType q_dtype, DType cache_dtype) {
  return q_dtype == DType::bf16 && (cache_dtype == DType::bf16 || cache_dtype == DType::fp8_e4m3);
}

void launch_decode_tc(const DecodeParams& p, DType cache_dtype, std::int64_t num_tiles,
                      cudaStream_t s) {
  if (num_tiles <= 0) return;
  // The warp-specialised kernel (v3) for both; fp8 tiles are widened to bf16 as they load.
  if (cache_dtype == DType::bf16) {
    launch_with_shared_memory<ws::decode_ws_kernel<tc::Cache::bf16>>(
        unsigned(num_tiles), ws::kThreads, ws::kSmemBytes, p, s, "decode_ws_kernel<<<>>>");
  } else {
    launch_with_shared_memory<ws::decode_ws_kernel<tc::Cache::fp8>>(
        unsigned(num_tiles), ws::kThreads, ws::kSmemBytes, p, s, "decode_ws_kernel<<<>>>");
  }
}

}  // namespace dcpmla::cuda
