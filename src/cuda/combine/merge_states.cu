// Log-sum-exp merge of S partial states [S, N, H, D] -> [N, H, D] (Backend::merge_states), with
// the algebra of merge::merge_partials: the merged L folds the states' L in order, and
// out[d] = sum over s in order of w_s * v_s[d], skipping zero weights.
#include <numbers>

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "dcpmla/merge.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float load_state(const float* v, std::int64_t i) {
  return v[i];
}
__device__ __forceinline__ float load_state(const bf16_bits* v, std::int64_t i) {
  return merge::partial_value(v[i]);
}

// One block per (row, head) pair (grid-stride past the grid): thread 0 folds the S LSE into the
// merged L, the threads turn the S LSE in shared memory into weights (S <= 1024, validate), then
// every thread owns dims threadIdx.x, + kThreads, ... of the pair.
template <class In>
__global__ void __launch_bounds__(kThreads)
    merge_states_kernel(int S, std::int64_t pairs, int D, const In* v, const float* s, void* v_out,
                        bool out_bf16, float* s_out, float to_e, float from_e) {
  __shared__ float s_lse[1024];
  __shared__ float s_merged;
  for (std::int64_t i = blockIdx.x; i < pairs; i += gridDim.x) {
    for (int r = int(threadIdx.x); r < S; r += kThreads) s_lse[r] = s[r * pairs + i] * to_e;
    __syncthreads();
    if (threadIdx.x == 0) {
      merge::LseAccumulator acc;
      for (int r = 0; r < S; ++r) acc.add(s_lse[r]);
      s_merged = acc.lse();
      s_out[i] = s_merged * from_e;
    }
    __syncthreads();
    // s_lse[r] <- the weight of state r (0 for an empty one, NaN in a poisoned merge).
    for (int r = int(threadIdx.x); r < S; r += kThreads)
      s_lse[r] = merge::weight(s_lse[r], s_merged);
    __syncthreads();
    for (int d = int(threadIdx.x); d < D; d += kThreads) {
      float sum = 0.0f;
      for (int r = 0; r < S; ++r) {
        const float w = s_lse[r];
        if (w != 0.0f) sum += w * load_state(v, (r * pairs + i) * D + d);
      }
      store1(v_out, out_bf16, i * D + d, sum);
    }
    __syncthreads();  // s_lse and s_merged are refilled for the next pair
  }
}

}  // namespace

void merge_states(const MergeStatesArgs& a, cudaStream_t stream) {
  validate(a);
  const int S = int(a.v.shape[0]), D = int(a.v.shape[3]);
  const std::int64_t pairs = a.v.shape[1] * a.v.shape[2];
  if (pairs == 0) return;
  const float to_e = a.lse_base_e ? 1.0f : std::numbers::ln2_v<float>;
  const float from_e = a.lse_base_e ? 1.0f : std::numbers::log2e_v<float>;
  const unsigned grid = unsigned(std::min<std::int64_t>(pairs, 65536));
  const bool out_bf16 = a.v_out.dtype == DType::bf16;
  if (a.v.dtype == DType::bf16) {
    merge_states_kernel<<<grid, kThreads, 0, stream>>>(S, pairs, D, a.v.as<const bf16_bits>(),
                                                       a.s.as<const float>(), a.v_out.data,
                                                       out_bf16, a.s_out.as<float>(), to_e, from_e);
  } else {
    merge_states_kernel<<<grid, kThreads, 0, stream>>>(S, pairs, D, a.v.as<const float>(),
                                                       a.s.as<const float>(), a.v_out.data,
                                                       out_bf16, a.s_out.as<float>(), to_e, from_e);
  }
  gpu::check_launch("merge_states_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
