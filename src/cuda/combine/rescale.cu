// ag_rs local step: from the gathered LSE [W, N, H] the merged L of every (row, head); this
// rank's O scaled by merge::weight(L_rank, L) into send [W, N, H/W, 512] grouped by destination
// rank (zeros, never 0 * payload, where the weight is 0), and L of this rank's own heads.
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "dcpmla/merge.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = kLatentDim / 4;             // 4 consecutive dims per thread and item
constexpr int kRowsPerStep = kThreads / kRowThreads;    // items side by side in the block (2)
constexpr int kItemsPerThread = 4;                      // payload loads in flight per thread
constexpr int kItems = kRowsPerStep * kItemsPerThread;  // items (row, head) per block

struct RescaleParams {
  int world;
  int rank;
  std::int64_t N, H, Hl;
  const float* gathered_lse;  // [W, N, H]
  const float* partial_out;   // [N, H, 512]
  float* send;                // [W, N, H/W, 512]
  float* lse_out;             // [N, H/W]
};

// One block per kItems consecutive items (item = n * H + h; grid-stride past 65536 blocks).
// Thread t owns dims [4 (t % 128), +4) of items t / 128 + 2 k, k < 4: it issues its 4 payload
// loads (float4 when kVec: partial_out and send 16-byte aligned; else 4 scalars each), then the
// block finds the items' weights (dynamic shared memory: kItems * W gathered LSE, loaded in
// parallel, then one thread per item folds them in rank order as the CPU does), then it stores.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) combine_rescale_kernel(const RescaleParams p) {
  extern __shared__ float s_lse[];  // [kItems][W]
  __shared__ float s_weight[kItems];
  const int W = p.world;
  const std::int64_t items = p.N * p.H;
  const int col = 4 * (int(threadIdx.x) % kRowThreads);
  const int sub = int(threadIdx.x) / kRowThreads;
  for (std::int64_t first = std::int64_t(blockIdx.x) * kItems; first < items;
       first += std::int64_t(gridDim.x) * kItems) {
    float v[kItemsPerThread][4];
#pragma unroll
    for (int k = 0; k < kItemsPerThread; ++k) {
      const std::int64_t item = first + sub + k * kRowsPerStep;
      if (item >= items) continue;
      const float* src = p.partial_out + item * kLatentDim + col;
      if constexpr (kVec) {
        load4(src, v[k]);
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) v[k][c] = src[c];
      }
    }
    for (int j = int(threadIdx.x); j < kItems * W; j += kThreads) {
      const int i = j / W, r = j - i * W;
      const std::int64_t item = first + i;
      if (item < items) s_lse[j] = p.gathered_lse[r * items + item];  // [(r * N + n) * H + h]
    }
    __syncthreads();
    if (threadIdx.x < kItems && first + threadIdx.x < items) {
      const int i = int(threadIdx.x);
      const std::int64_t item = first + i;
      merge::LseAccumulator acc;
      for (int r = 0; r < W; ++r) acc.add(s_lse[i * W + r]);
      const float merged = acc.lse();
      s_weight[i] = merge::weight(s_lse[i * W + p.rank], merged);
      const std::int64_t n = item / p.H, h = item - n * p.H;
      if (h / p.Hl == p.rank) p.lse_out[n * p.Hl + h % p.Hl] = merged;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kItemsPerThread; ++k) {
      const int i = sub + k * kRowsPerStep;
      const std::int64_t item = first + i;
      if (item >= items) continue;
      const std::int64_t n = item / p.H, h = item - n * p.H;
      const std::int64_t dest = h / p.Hl, hl = h - dest * p.Hl;
      float* dst = p.send + ((dest * p.N + n) * p.Hl + hl) * kLatentDim + col;
      const float w = s_weight[i];
      float o[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) o[c] = w == 0.0f ? 0.0f : w * v[k][c];
      if constexpr (kVec) {
        *reinterpret_cast<float4*>(dst) = make_float4(o[0], o[1], o[2], o[3]);
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) dst[c] = o[c];
      }
    }
    __syncthreads();  // s_lse and s_weight are refilled by the next step
  }
}

}  // namespace

void combine_rescale(const CombineRescaleArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t N = a.partial_out.shape[0], H = a.partial_out.shape[1];
  const RescaleParams p{a.world,
                        a.rank,
                        N,
                        H,
                        H / a.world,
                        a.gathered_lse.as<const float>(),
                        a.partial_out.as<const float>(),
                        a.send.as<float>(),
                        a.lse_out.as<float>()};
  if (N * H == 0) return;
  const unsigned grid = grid_blocks(N * H, kItems);
  const std::size_t smem = std::size_t(kItems) * std::size_t(a.world) * sizeof(float);
  const bool vec =
      (reinterpret_cast<std::uintptr_t>(p.partial_out) | reinterpret_cast<std::uintptr_t>(p.send)) %
          16 ==
      0;
  if (vec) {
    combine_rescale_kernel<true><<<grid, kThreads, smem, s>>>(p);
  } else {
    combine_rescale_kernel<false><<<grid, kThreads, smem, s>>>(p);
  }
  gpu::check_launch("combine_rescale_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
