// KV write: each new token's latent (kv_c then k_pe, 576 values) into the paged cache at its
// slot. Slots are device data the host cannot check: slot < 0 (another rank's token, padding)
// and slot >= capacity are skipped. fp8 stores e4m3(x / k_scale), a correctly rounded division as
// in the CPU backend (x * (1 / k_scale) rounds differently for some x, and the e4m3 value can then
// differ).
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;

struct KvWriteParams {
  const void* latents;  // [n, 576] f32 or bf16
  bool latents_bf16;
  const std::int64_t* slots;  // [n]
  std::int64_t n;
  void* cache;  // [capacity, 576]
  DType cache_dtype;
  std::int64_t capacity;  // num_blocks * block_size
  float scale;            // k_scale for fp8, else 1
};

__global__ void kv_write_kernel(const KvWriteParams p) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n * kHeadDim;
       i += stride) {
    const std::int64_t token = i / kHeadDim, d = i - token * kHeadDim;
    const std::int64_t slot = p.slots[token];
    if (slot < 0 || slot >= p.capacity) continue;
    const float x = p.latents_bf16 ? bf16_to_float(static_cast<const bf16_bits*>(p.latents)[i])
                                   : static_cast<const float*>(p.latents)[i];
    const float v = __fdiv_rn(x, p.scale);
    const std::int64_t at = slot * kHeadDim + d;
    switch (p.cache_dtype) {
      case DType::f32:
        static_cast<float*>(p.cache)[at] = v;
        break;
      case DType::bf16:
        static_cast<bf16_bits*>(p.cache)[at] = float_to_bf16(v);
        break;
      default:
        static_cast<std::uint8_t*>(p.cache)[at] = float_to_fp8_e4m3(v);
        break;
    }
  }
}

}  // namespace

void write_kv(const KvWriteArgs& a, cudaStream_t s) {
  validate(a);
  const std::int64_t n = a.latents.shape[0];
  if (n == 0) return;
  const KvWriteParams p{a.latents.data,
                        a.latents.dtype == DType::bf16,
                        a.slots.as<const std::int64_t>(),
                        n,
                        a.cache.data,
                        a.cache.dtype,
                        a.cache.num_blocks * a.cache.block_size,
                        a.cache.dtype == DType::fp8_e4m3 ? a.cache.k_scale : 1.0f};
  kv_write_kernel<<<grid_blocks(n * kHeadDim, kThreads), kThreads, 0, s>>>(p);
  gpu::check_launch("kv_write_kernel<<<>>>");
}

}  // namespace dcpmla::cuda
