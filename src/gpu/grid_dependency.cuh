// The device side of a dependent launch (launch_dependent, launch_config.h).
#pragma once

namespace dcpmla::gpu {

// Blocks the thread until the grids its launch depends on have completed and their memory is
// visible (a no-op for a kernel launched without the attribute). asm volatile with a memory
// clobber: no load or store is moved across it. Reads of data the previous kernel writes must not
// use the non-coherent path (__ldg, const __restrict__ parameters) in a way the compiler could
// hoist above it.
__device__ __forceinline__ void wait_for_previous_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

}  // namespace dcpmla::gpu
