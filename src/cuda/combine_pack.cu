// a2a pack: partial O [N, H, 512] and LSE [N, H] -> send [W, N, H/W, row] grouped by the
// destination rank of each head (head h goes to rank h / (H/W) as its local head h % (H/W)); row
// is 513 floats (fp32 payload) or 514 bf16 slots (bf16 payload: O rounded, then the fp32 LSE).
#include "check.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 128;

template <class Payload>
__global__ void __launch_bounds__(kThreads)
    combine_pack_kernel(std::int64_t W, std::int64_t N, std::int64_t H, const float* partial_out,
                        const float* partial_lse, Payload* send) {
  constexpr int kRow = sizeof(Payload) == 4 ? kPackedRow : kPackedRowBf16;
  const std::int64_t Hl = H / W;
  for (std::int64_t item = blockIdx.x; item < N * H; item += gridDim.x) {
    const std::int64_t n = item / H, h = item % H;
    Payload* dst = send + (((h / Hl) * N + n) * Hl + h % Hl) * kRow;
    const float* src = partial_out + item * kLatentDim;
    for (int d = threadIdx.x; d < kLatentDim; d += kThreads) {
      if constexpr (sizeof(Payload) == 4) {
        dst[d] = src[d];
      } else {
        dst[d] = float_to_bf16(src[d]);
      }
    }
    if (threadIdx.x == 0) {
      // The row starts 4-byte aligned (514 slots = 1028 bytes), so the LSE slot is too.
      *reinterpret_cast<float*>(dst + kLatentDim) = partial_lse[item];
    }
  }
}

}  // namespace

void combine_pack(const CombinePackArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t N = a.partial_out.shape[0], H = a.partial_out.shape[1];
  if (N * H == 0) return;
  const auto* po = a.partial_out.as<const float>();
  const auto* pl = a.partial_lse.as<const float>();
  if (a.send.dtype == DType::bf16) {
    combine_pack_kernel<<<grid_blocks(N * H, 1), kThreads, 0, s>>>(a.world, N, H, po, pl,
                                                                   a.send.as<bf16_bits>());
  } else {
    combine_pack_kernel<<<grid_blocks(N * H, 1), kThreads, 0, s>>>(a.world, N, H, po, pl,
                                                                   a.send.as<float>());
  }
  check_launch("combine_pack_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
