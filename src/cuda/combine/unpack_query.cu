// The gathered query [W, N, Hl, 576] -> the decode layout [N, W * Hl, 576]: chunk (w, n) of
// Hl * 576 elements moves to chunk (n, w).
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "gpu/check.h"
#include "gpu/grid_dependency.cuh"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;                 // units per thread, all loaded before any store
constexpr int kPart = kThreads * kUnroll;  // units of a chunk per block

// Unit = uint4 (16 bytes) when both buffers are 16-byte aligned, else the element type.
// blockIdx.x picks the destination chunk c = n * W + w (one division per chunk, none per unit),
// blockIdx.y a part of kPart units of it; both loops are grid-stride for oversized shapes.
template <class Unit>
__global__ void __launch_bounds__(kThreads)
    unpack_query_kernel(const Unit* src, Unit* dst, std::int64_t W, std::int64_t N,
                        std::int64_t chunk_units) {
  // Launched dependent on the query's all-gather (launch_dependent): nothing is read or written
  // before the wait.
  gpu::wait_for_previous_grid();
  const std::int64_t chunks = W * N;
  for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const std::int64_t n = c / W, w = c - n * W;
    const Unit* s = src + (w * N + n) * chunk_units;
    Unit* d = dst + c * chunk_units;
    for (std::int64_t base = std::int64_t(blockIdx.y) * kPart + threadIdx.x; base < chunk_units;
         base += std::int64_t(gridDim.y) * kPart) {
      copy_unrolled<kThreads, kUnroll>(s, d, base, chunk_units, [](const Unit& v) { return v; });
    }
  }
}

template <class Unit>
void launch(const UnpackQueryArgs& a, std::int64_t chunk_bytes, cudaStream_t s) {
  const std::int64_t W = a.gathered.shape[0], N = a.gathered.shape[1];
  const std::int64_t units = chunk_bytes / std::int64_t(sizeof(Unit));
  const dim3 grid(unsigned(std::min<std::int64_t>(W * N, 1 << 30)),
                  unsigned(std::min<std::int64_t>((units + kPart - 1) / kPart, 65535)));
  gpu::launch_dependent(
      unpack_query_kernel<Unit>, grid, kThreads, 0, s, "unpack_query_kernel (cudaLaunchKernelEx)",
      static_cast<const Unit*>(a.gathered.data), static_cast<Unit*>(a.q.data), W, N, units);
}

}  // namespace

void unpack_query(const UnpackQueryArgs& a, cudaStream_t s) {
  validate(a);
  if (a.q.numel() == 0) return;
  const std::int64_t chunk_bytes =
      a.gathered.shape[2] * kHeadDim * std::int64_t(dtype_size(a.gathered.dtype));
  const bool aligned = (reinterpret_cast<std::uintptr_t>(a.gathered.data) |
                        reinterpret_cast<std::uintptr_t>(a.q.data)) %
                           16 ==
                       0;
  if (aligned && chunk_bytes % 16 == 0) {
    launch<uint4>(a, chunk_bytes, s);
  } else if (a.q.dtype == DType::bf16) {
    launch<std::uint16_t>(a, chunk_bytes, s);
  } else {
    launch<float>(a, chunk_bytes, s);
  }
}

}  // namespace dcpmla::cuda
