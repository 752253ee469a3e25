// Launch of the decode kernel (decode_kernel.cuh): one instantiation per (q dtype, cache dtype).
#include <atomic>

#include "check.h"
#include "decode_kernel.cuh"

namespace dcpmla::cuda {
namespace {

template <class QS, CacheKind C>
void launch_decode_kernel(const DecodeParams& p, std::int64_t num_tiles, cudaStream_t s) {
  using L = Layout<QS, KStore<C>>;
  const auto kernel = decode_kernel<QS, C>;
  // The shared-memory opt-in is a per-device function attribute: set once per device.
  static std::atomic<std::uint64_t> configured{0};
  int device = 0;
  DCPMLA_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = device < 64 ? (std::uint64_t(1) << device) : 0;
  if (bit == 0 || !(configured.load() & bit)) {
    DCPMLA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kBytes)));
    configured.fetch_or(bit);
  }
  kernel<<<unsigned(num_tiles), kThreads, L::kBytes, s>>>(p);
  check_launch("decode_kernel<<<>>>");
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

void launch_decode_tiles(const DecodeParams& p, DType q_dtype, DType cache_dtype,
                         std::int64_t num_tiles, cudaStream_t s) {
  if (num_tiles <= 0) return;
  if (q_dtype == DType::bf16) {
    launch_for_cache<bf16_bits>(cache_dtype, p, num_tiles, s);
  } else {
    launch_for_cache<float>(cache_dtype, p, num_tiles, s);
  }
}

}  // namespace dcpmla::cuda
