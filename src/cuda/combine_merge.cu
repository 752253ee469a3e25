// a2a merge on the receiver: the W packed partials [W, N, Hl, row] of this rank's heads (row: 513
// floats, or 514 bf16 slots with the fp32 LSE in the last two) -> out [N, Hl, 512] (f32 or bf16)
// and lse [N, Hl], through merge::merge_partials (fp32 either way).
#include "check.h"
#include "dcpmla/merge.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = kLatentDim / 4;  // 4 consecutive dims per thread

template <class Payload>
__global__ void __launch_bounds__(kThreads)
    combine_merge_kernel(int W, std::int64_t items, const Payload* recv, void* out, bool out_bf16,
                         float* lse) {
  constexpr int kRow = sizeof(Payload) == 4 ? kPackedRow : kPackedRowBf16;
  const long peer_stride = long(items) * kRow;  // payload elements
  // The LSE slots as floats: rows are 4-byte aligned in both layouts.
  const long lse_stride = peer_stride * long(sizeof(Payload)) / 4;
  const int d0 = 4 * int(threadIdx.x);
  for (std::int64_t i = blockIdx.x; i < items; i += gridDim.x) {
    const Payload* first = recv + i * kRow;
    const auto* first_lse = reinterpret_cast<const float*>(first + kLatentDim);
    float merged[4];
    const float l = merge::merge_partials(W, first + d0, peer_stride, first_lse, lse_stride, 4,
                                          merged, [](float x) { return x; });
#pragma unroll
    for (int c = 0; c < 4; ++c) store1(out, out_bf16, i * kLatentDim + d0 + c, merged[c]);
    if (threadIdx.x == 0) lse[i] = l;
  }
}

}  // namespace

void combine_merge(const CombineMergeArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t W = a.recv.shape[0], items = a.recv.shape[1] * a.recv.shape[2];
  if (items == 0) return;
  const bool out_bf16 = a.out.dtype == DType::bf16;
  if (a.recv.dtype == DType::bf16) {
    combine_merge_kernel<<<grid_blocks(items, 1), kThreads, 0, s>>>(
        int(W), items, a.recv.as<const bf16_bits>(), a.out.data, out_bf16, a.lse.as<float>());
  } else {
    combine_merge_kernel<<<grid_blocks(items, 1), kThreads, 0, s>>>(
        int(W), items, a.recv.as<const float>(), a.out.data, out_bf16, a.lse.as<float>());
  }
  check_launch("combine_merge_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
