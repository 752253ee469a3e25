// Asynchronous 16-byte copies from global into shared memory (cp.async, sm_80 and later): they
// complete for the issuing thread at cp_async_wait_all().
#pragma once

#include <cstdint>

namespace dcpmla::cuda::hopper {

#if !defined(DCPMLA_EMULATE)  // the host emulations (tests/cuda) define these
// 16 bytes from src to shared address dst (both 16-byte aligned).
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// The same, asking L2 for the whole 128-byte line: the sm90 decode's tile and query copies read
// whole lines (docs/design/decode-kernel.md).
__device__ __forceinline__ void cp_async16_line(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src)
               : "memory");
}
// Waits for all of this thread's cp.async copies.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
#endif  // !DCPMLA_EMULATE

}  // namespace dcpmla::cuda::hopper
