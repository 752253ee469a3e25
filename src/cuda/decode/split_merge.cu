// Split-KV merge: every row of a split request <- the merge of its fp32 partials, with the shared
// merge algebra's rules (dcpmla/merge.h): an empty partial (LSE -inf) has weight 0 and its payload
// is never read; a row whose partials are all empty gets O = 0 and LSE = -inf; a poisoned partial
// (LSE NaN or +inf) makes the row O = NaN, LSE = NaN.
//
// Two kernels; each merges any plan right, the launch picks by the plan's largest split count.
// - Few splits (the batched shapes, 2-15 splits a request): one warp per (merge row, head) item.
//   Lane r holds split r's LSE (the reductions are shuffles, no block barrier) and each lane sums
//   16 of the 512 output dims over the splits in order, kWarpBatch splits' rows loaded together.
// - Many splits ((1, 65536, 128, 1): 64 splits of 128 items): Parts (4) blocks per item, each
//   for 128 of its dims, so the few items' many rows are read by 4x as many SMs. A block reduces
//   the split LSEs in parallel (max, then the sum of exp(lse - max)), then each of Groups (8)
//   thread groups sums 4 dims a thread over every Groups-th split, kBatch of its splits' rows
//   loaded together (64 splits: one round of memory latency), with the weights of up to kWeights
//   splits at a time staged in shared memory, and the groups' sums are added in a fixed order
//   (the same bits every run).
//
// Measurements behind both: docs/design/decode-kernel.md.
//
// Launched with programmatic dependent launch after the decode (launch_dependent): the blocks
// start as the decode's blocks exit, read the plan, and wait for the decode's partials.
#include <algorithm>

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "cuda/output_rows.cuh"
#include "dcpmla/merge.h"
#include "gpu/check.h"
#include "gpu/grid_dependency.cuh"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

constexpr int kDimThreads = kLatentDim / 4;  // 4 dims per thread
constexpr int kBatch = 8;                    // rows a thread loads at once
constexpr int kWeights = 256;
constexpr int kWarpSplits = 16;  // below this many splits of every request: a warp per item
constexpr int kWarpBatch = 4;    // splits a lane loads at once (16 float4 in flight)
constexpr int kWarpItemsPerBlock = 8;
constexpr unsigned kMaxMergeThreads = 256u * 2048u;  // a full device of 256 SMs

// A split's LSE as a term of the max: a poisoned one (NaN or +inf, SPEC section 5) as +inf, so the
// max of the row says whether the merge is poisoned.
__device__ __forceinline__ float max_term(float lse) {
  return merge::poisoned_lse(lse) ? INFINITY : lse;
}

// The merged LSE from the max term and the exp-sum: NaN when a split was poisoned, -inf when all
// were empty.
__device__ __forceinline__ float merged_lse(float max_term, float sum) {
  if (max_term == INFINITY) return NAN;
  return sum > 0.0f ? max_term + logf(sum) : -INFINITY;
}

template <int Threads>
__device__ float block_reduce(float v, bool is_max, float* scratch) {
  for (int off = 16; off >= 1; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch free from a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < Threads / 32; ++w) v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
  return v;
}

// Parts: the blocks that share an item's 512 dims (more SMs read a few items' many splits).
template <int Groups, int Parts>
__global__ void __launch_bounds__(Groups* kDimThreads / Parts)
    split_merge_kernel(const SplitMergeParams p) {
  constexpr int kPartThreads = kDimThreads / Parts;  // a group's threads, 4 dims each
  constexpr int kThreads = Groups * kPartThreads;
  __shared__ float weights[kWeights];
  __shared__ float scratch[kThreads / 32];
  __shared__ __align__(16) float sums[Groups - 1][4 * kPartThreads];  // groups 1.. -> group 0
  // Launched dependent on the decode (launch_dependent): the plan (header, merge rows) was
  // uploaded before the decode and is read before the wait, the decode's partials and every
  // store only after it. Every thread waits, items or not.
  const std::int64_t units = p.header->num_merge_rows * p.num_heads * Parts;
  MergeRow first_row{};
  if (std::int64_t(blockIdx.x) < units) first_row = p.rows[blockIdx.x / Parts / p.num_heads];
  gpu::wait_for_previous_grid();
  for (std::int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const std::int64_t item = unit / Parts;
    const int part = int(unit % Parts);
    const MergeRow m = unit == std::int64_t(blockIdx.x) ? first_row : p.rows[item / p.num_heads];
    const int h = int(item % p.num_heads);
    const std::int64_t first = std::int64_t(m.first_partial_row) * p.num_heads + h;
    const std::int64_t stride = std::int64_t(m.split_stride_rows) * p.num_heads;
    const float* lse = p.partial_lse + first;

    float mx = -INFINITY;
    for (int r = threadIdx.x; r < m.num_splits; r += kThreads)
      mx = fmaxf(mx, max_term(lse[r * stride]));
    mx = block_reduce<kThreads>(mx, true, scratch);
    float sum = 0.0f;
    if (mx != -INFINITY && mx != INFINITY) {
      for (int r = threadIdx.x; r < m.num_splits; r += kThreads) sum += expf(lse[r * stride] - mx);
    }
    sum = block_reduce<kThreads>(sum, false, scratch);
    const float merged = merged_lse(mx, sum);

    const int group = int(threadIdx.x) / kPartThreads;
    const int d = 4 * (int(threadIdx.x) % kPartThreads);  // within the part
    const int d0 = part * 4 * kPartThreads + d;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const float* o = p.partial_out + first * kLatentDim + d0;
    for (int r0 = 0; r0 < m.num_splits; r0 += kWeights) {
      const int n = min(kWeights, m.num_splits - r0);
      __syncthreads();  // the previous group's weights are read
      for (int r = threadIdx.x; r < n; r += kThreads) {
        weights[r] = merge::weight(lse[(r0 + r) * stride], merged);
      }
      __syncthreads();
      for (int rb = group; rb < n; rb += Groups * kBatch) {
        float w[kBatch];
        float4 v[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {  // splits rb, rb + Groups, ...: loads issued together
          const int r = rb + Groups * k;
          w[k] = r < n ? weights[r] : 0.0f;
          v[k] = r < n ? *reinterpret_cast<const float4*>(o + (r0 + r) * stride * kLatentDim)
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          // An empty partial's payload (weight 0) is never used, whatever it holds.
          const float4 x = w[k] != 0.0f ? v[k] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          acc[0] = fmaf(w[k], x.x, acc[0]);
          acc[1] = fmaf(w[k], x.y, acc[1]);
          acc[2] = fmaf(w[k], x.z, acc[2]);
          acc[3] = fmaf(w[k], x.w, acc[3]);
        }
      }
    }
    // Group g > 0 hands its sums to group 0, which adds them in group order (group 0 read the
    // previous item's sums before this item's reductions synchronised the block).
    if (group > 0) {
      *reinterpret_cast<float4*>(&sums[group - 1][d]) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
    __syncthreads();
    if (group > 0) continue;
#pragma unroll
    for (int g = 1; g < Groups; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(&sums[g - 1][d]);
      acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
    }
    const std::int64_t out_item = std::int64_t(m.out_row) * p.num_heads + h;
    const std::int64_t row_at = output_offset(p.final_rows, out_item, p.num_heads);
    store_output4(p.final_rows, row_at + d0, acc[0], acc[1], acc[2], acc[3]);
    if (threadIdx.x == 0 && part == 0) *output_lse(p.final_rows, out_item, row_at) = merged;
  }
}

// A warp per (merge row, head) item; lane l sums dims 4 l + 128 k (k = 0..3) over the splits in
// split order, so the bits depend only on the item's partials.
__global__ void __launch_bounds__(32 * kWarpItemsPerBlock)
    split_merge_warp_kernel(const SplitMergeParams p) {
  const std::int64_t items = p.header->num_merge_rows * p.num_heads;
  const int lane = int(threadIdx.x) & 31;
  const std::int64_t warps = std::int64_t(gridDim.x) * kWarpItemsPerBlock;
  std::int64_t item = std::int64_t(blockIdx.x) * kWarpItemsPerBlock + int(threadIdx.x) / 32;
  MergeRow m{};
  if (item < items) m = p.rows[item / p.num_heads];
  gpu::wait_for_previous_grid();
  for (; item < items; item += warps) {
    if (item >= warps) m = p.rows[item / p.num_heads];
    const int h = int(item % p.num_heads);
    const std::int64_t first = std::int64_t(m.first_partial_row) * p.num_heads + h;
    const std::int64_t stride = std::int64_t(m.split_stride_rows) * p.num_heads;
    const float* lse = p.partial_lse + first;

    float mx = -INFINITY;
    for (int r = lane; r < m.num_splits; r += 32) mx = fmaxf(mx, max_term(lse[r * stride]));
    for (int off = 16; off >= 1; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = 0.0f;
    if (mx != -INFINITY && mx != INFINITY) {
      for (int r = lane; r < m.num_splits; r += 32) sum += expf(lse[r * stride] - mx);
    }
    for (int off = 16; off >= 1; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float merged = merged_lse(mx, sum);

    float acc[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) acc[k] = 0.0f;
    const float* o = p.partial_out + first * kLatentDim + 4 * lane;
    for (int r0 = 0; r0 < m.num_splits; r0 += 32) {
      // Lane j holds the weight of split r0 + j.
      const float w_lane =
          r0 + lane < m.num_splits ? merge::weight(lse[(r0 + lane) * stride], merged) : 0.0f;
      const int n = min(32, m.num_splits - r0);
      for (int rb = 0; rb < n; rb += kWarpBatch) {
        float4 v[kWarpBatch][4];
#pragma unroll
        for (int b = 0; b < kWarpBatch; ++b) {
          const float* row = o + std::int64_t(r0 + rb + b) * stride * kLatentDim;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            v[b][k] = rb + b < n ? *reinterpret_cast<const float4*>(row + 128 * k)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          }
        }
#pragma unroll
        for (int b = 0; b < kWarpBatch; ++b) {
          const float w = __shfl_sync(0xffffffffu, w_lane, (rb + b) & 31);
          if (rb + b >= n || w == 0.0f) continue;  // an empty partial's payload is never used
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            acc[4 * k + 0] = fmaf(w, v[b][k].x, acc[4 * k + 0]);
            acc[4 * k + 1] = fmaf(w, v[b][k].y, acc[4 * k + 1]);
            acc[4 * k + 2] = fmaf(w, v[b][k].z, acc[4 * k + 2]);
            acc[4 * k + 3] = fmaf(w, v[b][k].w, acc[4 * k + 3]);
          }
        }
      }
    }
    const std::int64_t out_item = std::int64_t(m.out_row) * p.num_heads + h;
    const std::int64_t row_at = output_offset(p.final_rows, out_item, p.num_heads);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      store_output4(p.final_rows, row_at + 4 * lane + 128 * k, acc[4 * k], acc[4 * k + 1],
                    acc[4 * k + 2], acc[4 * k + 3]);
    }
    if (lane == 0) *output_lse(p.final_rows, out_item, row_at) = merged;
  }
}

template <int Groups, int Parts>
void launch_merge(const SplitMergeParams& p, std::int64_t items, cudaStream_t s) {
  constexpr int kThreads = Groups * kDimThreads / Parts;
  // The blocks stride over the items, so a full device of them is enough; under a CUDA graph
  // the launch covers the capacity, and a block per item would make most of them empty.
  gpu::launch_dependent(split_merge_kernel<Groups, Parts>,
                        dim3(std::min(grid_blocks(items * Parts, 1), kMaxMergeThreads / kThreads)),
                        kThreads, 0, s, "split_merge_kernel (cudaLaunchKernelEx)", p);
}

}  // namespace

void launch_split_merge(const SplitMergeParams& p, std::int64_t capacity, int max_splits,
                        cudaStream_t s) {
  const std::int64_t items = capacity * p.num_heads;
  if (items == 0) return;
  if (max_splits < kWarpSplits) {
    const unsigned blocks = unsigned((items + kWarpItemsPerBlock - 1) / kWarpItemsPerBlock);
    gpu::launch_dependent(split_merge_warp_kernel,
                          dim3(std::min(blocks, kMaxMergeThreads / (32u * kWarpItemsPerBlock))),
                          32 * kWarpItemsPerBlock, 0, s,
                          "split_merge_warp_kernel (cudaLaunchKernelEx)", p);
  } else {
    launch_merge<8, 4>(p, items, s);
  }
}

}  // namespace dcpmla::cuda
