// a2a pack: partial O [N, H, 512] and LSE [N, H] -> send [W, N, H/W, row] grouped by the
// destination rank of each head (head h goes to rank h / (H/W) as its local head h % (H/W)); row
// is 513 floats (fp32 payload) or 514 bf16 slots (bf16 payload: O rounded, then the fp32 LSE).
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;  // items (row, head) per block: 8 float2 (bf16) or 16 float loads/thread

// The packed rows are 2052 or 1028 bytes, so a row starts only 4-byte aligned: stores are 4-byte
// words (one float, or two bf16 slots), consecutive across the lanes of a warp. A unit is what
// one thread moves: 1 float (fp32 payload) or 2 (bf16 payload, one float2 load -> one word).
//   kFast (bf16 payload only): partial_out 8-byte and send 4-byte aligned; otherwise scalar
//   loads and 2-byte stores, the LSE's bits as two slots.
// One block per kItems consecutive items (item = n * H + h; grid-stride past 65536 blocks);
// thread t owns units t, t + 256, ... of every item. All its loads are issued before any store
// (and before the destination rows' index arithmetic, which needs divisions).
template <class Payload, bool kFast>
__global__ void __launch_bounds__(kThreads)
    combine_pack_kernel(std::int64_t W, std::int64_t N, std::int64_t H, const float* partial_out,
                        const float* partial_lse, Payload* send) {
  constexpr bool kBf16 = sizeof(Payload) == 2;
  constexpr int kRow = kBf16 ? kPackedRowBf16 : kPackedRow;
  constexpr int kPer = kBf16 ? 2 : 1;                            // floats per unit
  constexpr int kUnitsPerThread = kLatentDim / kPer / kThreads;  // per item: 2 or 1
  const std::int64_t Hl = H / W, items = N * H;
  for (std::int64_t first = std::int64_t(blockIdx.x) * kItems; first < items;
       first += std::int64_t(gridDim.x) * kItems) {
    float v[kItems][kUnitsPerThread][kPer];
    float lse = 0.0f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (first + i >= items) continue;
      const float* src = partial_out + (first + i) * kLatentDim;
#pragma unroll
      for (int u = 0; u < kUnitsPerThread; ++u) {
        const int d = (int(threadIdx.x) + u * kThreads) * kPer;
        if constexpr (kBf16 && kFast) {
          const float2 x = *reinterpret_cast<const float2*>(src + d);
          v[i][u][0] = x.x;
          v[i][u][1] = x.y;
        } else {
#pragma unroll
          for (int c = 0; c < kPer; ++c) v[i][u][c] = src[d + c];
        }
      }
    }
    if (threadIdx.x < kItems && first + threadIdx.x < items) lse = partial_lse[first + threadIdx.x];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const std::int64_t item = first + i;
      if (item >= items) continue;
      const std::int64_t n = item / H, h = item - n * H;
      const std::int64_t dest = h / Hl, hl = h - dest * Hl;
      Payload* dst = send + ((dest * N + n) * Hl + hl) * kRow;
#pragma unroll
      for (int u = 0; u < kUnitsPerThread; ++u) {
        const int d = (int(threadIdx.x) + u * kThreads) * kPer;
        if constexpr (!kBf16) {
          dst[d] = v[i][u][0];
        } else if constexpr (kFast) {
          *reinterpret_cast<std::uint32_t*>(dst + d) = bf16_pair(v[i][u][0], v[i][u][1]);
        } else {
          dst[d] = float_to_bf16(v[i][u][0]);
          dst[d + 1] = float_to_bf16(v[i][u][1]);
        }
      }
      if (threadIdx.x == unsigned(i)) {
        if constexpr (!kBf16) {
          dst[kLatentDim] = lse;
        } else if constexpr (kFast) {
          // Row start 4-byte aligned (send is, and rows are 1028 bytes), so the LSE slot is too.
          *reinterpret_cast<float*>(dst + kLatentDim) = lse;
        } else {
          const std::uint32_t bits = __float_as_uint(lse);  // low half first, as memcpy on the CPU
          dst[kLatentDim] = bf16_bits(bits & 0xffffu);
          dst[kLatentDim + 1] = bf16_bits(bits >> 16);
        }
      }
    }
  }
}

template <class Payload, bool kFast>
void launch(const CombinePackArgs& a, std::int64_t N, std::int64_t H, cudaStream_t s) {
  combine_pack_kernel<Payload, kFast><<<grid_blocks(N * H, kItems), kThreads, 0, s>>>(
      a.world, N, H, a.partial_out.as<const float>(), a.partial_lse.as<const float>(),
      a.send.as<Payload>());
}

}  // namespace

void combine_pack(const CombinePackArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t N = a.partial_out.shape[0], H = a.partial_out.shape[1];
  if (N * H == 0) return;
  if (a.send.dtype == DType::bf16) {
    const bool fast = reinterpret_cast<std::uintptr_t>(a.partial_out.data) % 8 == 0 &&
                      reinterpret_cast<std::uintptr_t>(a.send.data) % 4 == 0;
    if (fast) {
      launch<bf16_bits, true>(a, N, H, s);
    } else {
      launch<bf16_bits, false>(a, N, H, s);
    }
  } else {
    launch<float, false>(a, N, H, s);
  }
  gpu::check_launch("combine_pack_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
