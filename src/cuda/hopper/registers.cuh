// Moving registers between the warpgroups of a thread block (sm_90a setmaxnreg): a warpgroup that
// needs few gives them back, one that needs many takes them; all of a warpgroup's threads run
// the same call.
#pragma once

namespace dcpmla::cuda::hopper {

#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/tc_emulation.h) defines these
template <int N>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif  // !DCPMLA_EMULATE

}  // namespace dcpmla::cuda::hopper
