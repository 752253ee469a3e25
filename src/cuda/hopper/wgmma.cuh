// Thin wrappers over the sm_90a instructions the tensor-core decode uses: warpgroup MMA (wgmma)
// with shared-memory operand descriptors, its fences, and the proxy fence that makes ordinary
// shared-memory stores visible to it.
//
// Shared-memory operands use the 128-byte swizzle: a tile is stored as rows of 64 bf16 (128 B),
// grouped in 1024-byte atoms of 8 rows, and inside an atom the 16-byte unit u of row r sits at
// unit u ^ (r % 8). Atoms must start 1024-byte aligned. `swizzled_offset` gives the byte offset
// of (row, unit) in such a tile; wgmma undoes the swizzle itself.
#pragma once

#include <cstdint>

namespace dcpmla::cuda::hopper {

__host__ __device__ constexpr std::uint32_t swizzled_offset(std::uint32_t row, std::uint32_t unit) {
  return row * 128u + ((unit ^ (row & 7u)) << 4);
}

// Descriptor of a 128-byte-swizzled operand at shared address `addr` (bytes, from
// __cvta_generic_to_shared). K-major tiles (rows along M or N, 64 K values per row): leading
// offset unused, stride offset 1024 (one 8-row atom). MN-major tiles (rows along K, 64 M/N
// values per row): leading offset = bytes between 64-wide M/N blocks, stride offset 1024
// (8 K-rows). Bits: start >> 4 at 0, leading >> 4 at 16, stride >> 4 at 32, swizzle mode 1
// (128 B) at 62.
__device__ __forceinline__ std::uint64_t smem_descriptor(std::uint32_t addr,
                                                         std::uint32_t leading_bytes,
                                                         std::uint32_t stride_bytes) {
  return std::uint64_t((addr >> 4) & 0x3fffu) |
         std::uint64_t((leading_bytes >> 4) & 0x3fffu) << 16 |
         std::uint64_t((stride_bytes >> 4) & 0x3fffu) << 32 | std::uint64_t(1) << 62;
}

#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/tc_emulation.h) defines these
// Orders this thread's earlier register writes of accumulators before the next wgmma.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed wgmma groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes generic-proxy shared-memory writes (st.shared, cp.async) visible to wgmma reads.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of an accumulator register across a wgmma wait.
template <int N>
__device__ __forceinline__ void pin_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#include "wgmma_ops.inc"
#endif  // !DCPMLA_EMULATE

}  // namespace dcpmla::cuda::hopper
