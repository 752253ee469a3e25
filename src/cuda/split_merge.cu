// Split-KV merge: every row of a split request <- merge::merge_partials over its fp32 partials
// (the shared merge algebra: empty partials have weight 0 and their payload is never read).
#include "check.h"
#include "dcpmla/merge.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = kLatentDim / 4;  // 4 dims per thread

// One block per (merge row, head) item, grid-stride over items.
__global__ void __launch_bounds__(kThreads) split_merge_kernel(const SplitMergeParams p) {
  const std::int64_t items = p.num_rows * p.num_heads;
  const int d0 = 4 * int(threadIdx.x);
  for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const MergeRow m = p.rows[item / p.num_heads];
    const int h = int(item % p.num_heads);
    const std::int64_t first = std::int64_t(m.first_partial_row) * p.num_heads + h;
    const long lse_stride = long(m.split_stride_rows) * p.num_heads;
    float merged[4];
    const float lse = merge::merge_partials(m.num_splits, p.partial_out + first * kLatentDim + d0,
                                            lse_stride * kLatentDim, p.partial_lse + first,
                                            lse_stride, 4, merged, [](float x) { return x; });
    const std::int64_t row = std::int64_t(m.out_row) * p.num_heads + h;
    store4(p.out, p.out_bf16, row * kLatentDim + d0, merged[0], merged[1], merged[2], merged[3]);
    if (threadIdx.x == 0) p.lse[row] = lse;
  }
}

}  // namespace

void launch_split_merge(const SplitMergeParams& p, cudaStream_t s) {
  const std::int64_t items = p.num_rows * p.num_heads;
  if (items == 0) return;
  split_merge_kernel<<<grid_blocks(items, 1), kThreads, 0, s>>>(p);
  check_launch("split_merge_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
