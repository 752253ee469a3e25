// a2a merge on the receiver: the W packed partials [W, N, Hl, row] of this rank's heads (row: 513
// floats, or 514 bf16 slots with the fp32 LSE in the last two; partial own_rank from own
// [N, Hl, row] when given) -> out [N, Hl, 512] (f32 or bf16) and lse [N, Hl], with the algebra
// of merge::merge_partials (fp32 either way): the merged L folds the peers' L in rank order, and
// out[d] = sum over r in rank order of w_r * o_r[d], skipping zero weights, each term added as in
// merge_partials (`sum += w * o`).
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "dcpmla/merge.h"
#include "gpu/check.h"
#include "gpu/grid_dependency.cuh"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = kLatentDim / 2;  // one pair of dims (2 d, 2 d + 1) per thread and item

// Items (row, local head) per block: kGroup * kItems = 16 pair loads in flight per thread.
constexpr int items_per_block(int group) {
  return 16 / group;
}

// The row's LSE slot of a peer as a float.
template <class Payload, bool kFast>
__device__ __forceinline__ float load_lse(const Payload* row) {
  if constexpr (sizeof(Payload) == 4 || kFast) {
    return *reinterpret_cast<const float*>(row + kLatentDim);  // rows are 4-byte aligned
  } else {
    return __uint_as_float(std::uint32_t(row[kLatentDim]) | std::uint32_t(row[kLatentDim + 1])
                                                                << 16);
  }
}

// Dims 2 d and 2 d + 1 of a peer's row as floats (the rows are only 4-byte aligned: 2052 or 1028
// bytes). bf16 payload with kFast (recv and own 4-byte aligned): one 32-bit load.
template <class Payload, bool kFast>
__device__ __forceinline__ void load_pair(const Payload* row, int d, float& a, float& b) {
  if constexpr (sizeof(Payload) == 4) {
    a = row[d];
    b = row[d + 1];
  } else if constexpr (kFast) {
    const std::uint32_t u = *reinterpret_cast<const std::uint32_t*>(row + d);
    a = bf16_lo(u);
    b = bf16_hi(u);
  } else {
    a = merge::partial_value(row[d]);
    b = merge::partial_value(row[d + 1]);
  }
}

// Peer r's row of item (row * Hl + local head) `item`: recv chunk r, or own for own_rank.
template <class Payload>
__device__ __forceinline__ const Payload* peer_row(const Payload* recv, const Payload* own,
                                                   int own_rank, int r, std::int64_t items,
                                                   std::int64_t item) {
  constexpr int kRow = sizeof(Payload) == 4 ? kPackedRow : kPackedRowBf16;
  return (r == own_rank ? own : recv + r * items * kRow) + item * kRow;
}

// One block per kItems consecutive items (grid-stride past 65536 blocks); thread t owns dims
// 2t, 2t + 1 of each. Per step: the payload loads of the first kGroup peers are issued (all
// items, unconditionally: a payload behind a zero weight is read but never used), then the block
// stages the kItems * W LSE in dynamic shared memory, one thread per item folds them into the
// merged L (LseAccumulator, rank order), all threads compute the kItems * W weights, and the
// sums run peer by peer in rank order (further groups of kGroup peers loaded as they come).
// out_vec: out 8-byte aligned (float2 / 32-bit stores of the pair), else one element at a time.
template <class Payload, bool kFast, int kGroup>
__global__ void __launch_bounds__(kThreads)
    combine_merge_kernel(int W, std::int64_t items, const Payload* recv, const Payload* own,
                         int own_rank, void* out, bool out_bf16, bool out_vec, float* lse) {
  constexpr int kItems = items_per_block(kGroup);
  extern __shared__ float smem[];
  float* s_lse = smem;                               // [kItems][W] the peers' LSE
  float* s_weight = smem + std::size_t(kItems) * W;  // [kItems][W]
  __shared__ float s_merged[kItems];
  const int d = 2 * int(threadIdx.x);
  // Launched dependent on the all-to-all (launch_dependent): nothing is read or written before
  // the wait.
  gpu::wait_for_previous_grid();
  for (std::int64_t first = std::int64_t(blockIdx.x) * kItems; first < items;
       first += std::int64_t(gridDim.x) * kItems) {
    const int n_items = int(std::min<std::int64_t>(kItems, items - first));
    float v[kGroup][kItems][2];
#pragma unroll
    for (int r = 0; r < kGroup; ++r) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        if (r < W && i < n_items) {
          load_pair<Payload, kFast>(peer_row(recv, own, own_rank, r, items, first + i), d,
                                    v[r][i][0], v[r][i][1]);
        }
      }
    }
    for (int j = int(threadIdx.x); j < n_items * W; j += kThreads) {
      const int i = j / W, r = j - i * W;
      s_lse[j] = load_lse<Payload, kFast>(peer_row(recv, own, own_rank, r, items, first + i));
    }
    __syncthreads();
    if (int(threadIdx.x) < n_items) {
      const int i = int(threadIdx.x);
      merge::LseAccumulator acc;
      for (int r = 0; r < W; ++r) acc.add(s_lse[i * W + r]);
      s_merged[i] = acc.lse();
      lse[first + i] = s_merged[i];
    }
    __syncthreads();
    for (int j = int(threadIdx.x); j < n_items * W; j += kThreads) {
      s_weight[j] = merge::weight(s_lse[j], s_merged[j / W]);
    }
    __syncthreads();
    float sum[kItems][2];
#pragma unroll
    for (int i = 0; i < kItems; ++i) sum[i][0] = sum[i][1] = 0.0f;
    for (int r0 = 0; r0 < W; r0 += kGroup) {
      if (r0 > 0) {  // the next group's loads (the first group's are in flight since the top)
#pragma unroll
        for (int r = 0; r < kGroup; ++r) {
#pragma unroll
          for (int i = 0; i < kItems; ++i) {
            if (r0 + r < W && i < n_items) {
              load_pair<Payload, kFast>(peer_row(recv, own, own_rank, r0 + r, items, first + i), d,
                                        v[r][i][0], v[r][i][1]);
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kGroup; ++r) {
        if (r0 + r >= W) break;
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
          if (i >= n_items) break;
          const float w = s_weight[i * W + r0 + r];
          if (w != 0.0f) {
            sum[i][0] += w * v[r][i][0];
            sum[i][1] += w * v[r][i][1];
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (i >= n_items) break;
      const std::int64_t o = (first + i) * kLatentDim + d;
      if (out_vec) {
        if (out_bf16) {
          *reinterpret_cast<std::uint32_t*>(static_cast<bf16_bits*>(out) + o) =
              bf16_pair(sum[i][0], sum[i][1]);
        } else {
          *reinterpret_cast<float2*>(static_cast<float*>(out) + o) =
              make_float2(sum[i][0], sum[i][1]);
        }
      } else {
        store1(out, out_bf16, o, sum[i][0]);
        store1(out, out_bf16, o + 1, sum[i][1]);
      }
    }
    __syncthreads();  // the shared arrays are refilled by the next step
  }
}

template <class Payload, bool kFast>
void launch(const CombineMergeArgs& a, int W, std::int64_t items, cudaStream_t s) {
  const auto grid = [&](int group) { return grid_blocks(items, items_per_block(group)); };
  const auto smem = [&](int group) {
    return 2 * std::size_t(items_per_block(group)) * std::size_t(W) * sizeof(float);
  };
  const bool out_bf16 = a.out.dtype == DType::bf16;
  const bool out_vec = reinterpret_cast<std::uintptr_t>(a.out.data) % 8 == 0;
  const auto* recv = static_cast<const Payload*>(a.recv.data);
  const auto* own = static_cast<const Payload*>(a.own.data);
  // 2 * items_per_block * W floats of shared memory: under 48 KiB up to W = 1536.
  const int group = W <= 2 ? 2 : 4;
  const auto kernel = group == 2 ? combine_merge_kernel<Payload, kFast, 2>
                                 : combine_merge_kernel<Payload, kFast, 4>;
  gpu::launch_dependent(kernel, dim3(grid(group)), kThreads, smem(group), s,
                        "combine_merge_kernel (cudaLaunchKernelEx)", W, items, recv, own,
                        a.own_rank, a.out.data, out_bf16, out_vec, a.lse.as<float>());
}

}  // namespace

void combine_merge(const CombineMergeArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t W = a.recv.shape[0], items = a.recv.shape[1] * a.recv.shape[2];
  if (items == 0) return;
  if (a.recv.dtype == DType::bf16) {
    const auto aligned4 = [](const void* p) {
      return reinterpret_cast<std::uintptr_t>(p) % 4 == 0;
    };
    if (aligned4(a.recv.data) && aligned4(a.own.data)) {
      launch<bf16_bits, true>(a, int(W), items, s);
    } else {
      launch<bf16_bits, false>(a, int(W), items, s);
    }
  } else {
    launch<float, false>(a, int(W), items, s);
  }
}

}  // namespace dcpmla::cuda
