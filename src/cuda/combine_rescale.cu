// ag_rs local step: from the gathered LSE [W, N, H] the merged L of every (row, head); this
// rank's O scaled by merge::weight(L_rank, L) into send [W, N, H/W, 512] grouped by destination
// rank (zeros, never 0 * payload, where the weight is 0), and L of this rank's own heads.
#include "check.h"
#include "dcpmla/merge.h"
#include "device_common.cuh"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 128;  // dims t, t + 128, t + 256, t + 384 per thread

struct RescaleParams {
  int world;
  int rank;
  std::int64_t N, H;
  const float* gathered_lse;  // [W, N, H]
  const float* partial_out;   // [N, H, 512]
  float* send;                // [W, N, H/W, 512]
  float* lse_out;             // [N, H/W]
};

__global__ void __launch_bounds__(kThreads) combine_rescale_kernel(const RescaleParams p) {
  const std::int64_t Hl = p.H / p.world;
  for (std::int64_t item = blockIdx.x; item < p.N * p.H; item += gridDim.x) {
    const std::int64_t n = item / p.H, h = item % p.H;
    merge::LseAccumulator acc;
    for (int r = 0; r < p.world; ++r) acc.add(p.gathered_lse[(r * p.N + n) * p.H + h]);
    const float merged = acc.lse();
    const float w = merge::weight(p.gathered_lse[(p.rank * p.N + n) * p.H + h], merged);
    const std::int64_t dest = h / Hl, hl = h % Hl;
    float* dst = p.send + ((dest * p.N + n) * Hl + hl) * kLatentDim;
    const float* src = p.partial_out + item * kLatentDim;
    for (int d = threadIdx.x; d < kLatentDim; d += kThreads) dst[d] = w == 0.0f ? 0.0f : w * src[d];
    if (threadIdx.x == 0 && dest == p.rank) p.lse_out[n * Hl + hl] = merged;
  }
}

}  // namespace

void combine_rescale(const CombineRescaleArgs& a, cudaStream_t s) {
  validate(a);
  const RescaleParams p{a.world,
                        a.rank,
                        a.partial_out.shape[0],
                        a.partial_out.shape[1],
                        a.gathered_lse.as<const float>(),
                        a.partial_out.as<const float>(),
                        a.send.as<float>(),
                        a.lse_out.as<float>()};
  if (p.N * p.H == 0) return;
  combine_rescale_kernel<<<grid_blocks(p.N * p.H, 1), kThreads, 0, s>>>(p);
  check_launch("combine_rescale_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
