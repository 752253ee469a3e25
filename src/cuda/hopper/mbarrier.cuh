// Thin wrappers over the shared-memory mbarrier (sm_90): a barrier that completes a phase once
// `count` arrivals have been made and the bytes it expects (from bulk copies) have landed.
#pragma once

#include <cstdint>

namespace dcpmla::cuda::hopper {

#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/tc_emulation.h) defines these
// One thread initialises; the barrier must be visible to all (a __syncthreads) before use.
__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Arrives on `bar` once (release: this thread's earlier shared-memory writes are visible to the
// threads that see the phase complete).
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives on `bar` and adds `bytes` to the transactions the current phase waits for (the bulk
// copies that complete on it).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Blocks until the phase with parity `parity` (0, 1, 0, ... for the barrier's uses 0, 1, 2, ...)
// has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
#endif  // !DCPMLA_EMULATE

}  // namespace dcpmla::cuda::hopper
