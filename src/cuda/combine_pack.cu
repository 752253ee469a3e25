// a2a pack: partial O [N, H, 512] and LSE [N, H] -> send [W, N, H/W, 513] grouped by the
// destination rank of each head (head h goes to rank h / (H/W) as its local head h % (H/W)).
#include "check.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    combine_pack_kernel(std::int64_t W, std::int64_t N, std::int64_t H, const float* partial_out,
                        const float* partial_lse, float* send) {
  const std::int64_t Hl = H / W;
  for (std::int64_t item = blockIdx.x; item < N * H; item += gridDim.x) {
    const std::int64_t n = item / H, h = item % H;
    float* dst = send + (((h / Hl) * N + n) * Hl + h % Hl) * kPackedRow;
    const float* src = partial_out + item * kLatentDim;
    for (int d = threadIdx.x; d < kLatentDim; d += kThreads) dst[d] = src[d];
    if (threadIdx.x == 0) dst[kLatentDim] = partial_lse[item];
  }
}

}  // namespace

void combine_pack(const CombinePackArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t N = a.partial_out.shape[0], H = a.partial_out.shape[1];
  if (N * H == 0) return;
  combine_pack_kernel<<<grid_blocks(N * H, 1), kThreads, 0, s>>>(
      a.world, N, H, a.partial_out.as<const float>(), a.partial_lse.as<const float>(),
      a.send.as<float>());
  check_launch("combine_pack_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
