// The gathered query [W, N, Hl, 576] -> the decode layout [N, W * Hl, 576]: chunk (w, n) of
// Hl * 576 elements moves to chunk (n, w).
#include "check.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;

// Unit = uint4 (16 bytes) when both buffers are 16-byte aligned, else the element type.
template <class Unit>
__global__ void unpack_query_kernel(const Unit* src, Unit* dst, std::int64_t W, std::int64_t N,
                                    std::int64_t chunk_units) {
  const std::int64_t total = W * N * chunk_units;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t u = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < total;
       u += stride) {
    // u indexes dst: (n, w, c).
    const std::int64_t c = u % chunk_units;
    const std::int64_t nw = u / chunk_units;
    const std::int64_t w = nw % W, n = nw / W;
    dst[u] = src[(w * N + n) * chunk_units + c];
  }
}

template <class Unit>
void launch(const UnpackQueryArgs& a, std::int64_t chunk_bytes, cudaStream_t s) {
  const std::int64_t W = a.gathered.shape[0], N = a.gathered.shape[1];
  const std::int64_t units = chunk_bytes / std::int64_t(sizeof(Unit));
  unpack_query_kernel<Unit><<<grid_blocks(W * N * units, kThreads), kThreads, 0, s>>>(
      static_cast<const Unit*>(a.gathered.data), static_cast<Unit*>(a.q.data), W, N, units);
  check_launch("unpack_query_kernel<<<>>>");
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
