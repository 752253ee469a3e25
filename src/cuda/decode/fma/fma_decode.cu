// Launch of the FMA decode (fma_kernel.cuh): one instantiation per (q dtype, cache dtype).
#include "cuda/decode/fma/fma_kernel.cuh"
#include "gpu/check.h"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

template <class QS, CacheKind C>
void launch_decode_kernel(const DecodeParams& p, std::int64_t num_tiles, cudaStream_t s) {
  using L = Layout<QS, KStore<C>>;
  gpu::launch_with_shared_memory<fma_decode_kernel<QS, C>>(unsigned(num_tiles), kThreads, L::kBytes,
                                                           p, s, "fma_decode_kernel<<<>>>");
}

template <class QS>
void launch_for_cache(DType cache, const DecodeParams& p, std::int64_t n, cudaStream_t s) {
  switch (cache) {
    case DType::f32:
      launch_decode_kernel<QS, CacheKind::f32>(p, n, s);
      break;
    case DType::bf16:
      launch_decode_kernel<QS, CacheKind::bf16>(p, n, s);
      break;
    default:
      launch_decode_kernel<QS, CacheKind::fp8>(p, n, s);
      break;
  }
}

}  // namespace

void launch_fma_decode(const DecodeParams& p, DType q_dtype, DType cache_dtype,
                       std::int64_t num_tiles, cudaStream_t s) {
  if (num_tiles <= 0) return;
  if (q_dtype == DType::bf16) {
    launch_for_cache<bf16_bits>(cache_dtype, p, num_tiles, s);
  } else {
    launch_for_cache<float>(cache_dtype, p, num_tiles, s);
  }
}

}  // namespace dcpmla::cuda
