// Kernel launch helpers.
//
// launch_with_shared_memory: a kernel with more than 48 KiB of dynamic shared memory: the opt-in
// is a per-device function attribute, set once per device and kernel (each kernel instantiation
// gets its own flags through the template parameter).
//
// launch_dependent: a kernel that depends on the kernel enqueued just before it on the stream,
// launched with programmatic dependent launch (PDL).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "gpu/check.h"

namespace dcpmla::gpu {

template <auto kernel, class Params>
void launch_with_shared_memory(unsigned blocks, int threads, std::uint32_t smem_bytes,
                               const Params& p, cudaStream_t s, const char* name) {
  static std::atomic<std::uint64_t> configured{0};
  int device = 0;
  DCPMLA_CUDA_CHECK(cudaGetDevice(&device));
  const std::uint64_t bit = device < 64 ? (std::uint64_t(1) << device) : 0;
  if (bit == 0 || !(configured.load() & bit)) {
    DCPMLA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
    configured.fetch_or(bit);
  }
  kernel<<<blocks, threads, smem_bytes, s>>>(p);
  check_launch(name);
}

// Launches `kernel` on `grid` x `threads` with `smem_bytes` of dynamic shared memory (at most
// 48 KiB) and
// cudaLaunchAttributeProgrammaticStreamSerialization: the runtime may schedule its blocks before
// the previous kernel on the stream has completed (without griddepcontrol.launch_dependents there,
// as that kernel's blocks exit), so only its launch latency and start-up overlap the previous
// kernel's tail. Contract for the kernel: every thread executes wait_for_previous_grid()
// (grid_dependency.cuh) before it reads anything the previous kernels on the stream write and
// before it writes anything; before the wait it may read only data written by host uploads that
// precede those kernels (the plan buffer) and its parameters. Since every thread waits, the kernel
// completes only after its predecessors, so later stream work is ordered as without PDL. Under
// stream capture the dependency is recorded as a programmatic graph edge (CUDA 12.3+). A launch the
// runtime refuses throws Error(backend_failure): there is no silent fallback to another launch.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, int threads, std::size_t smem_bytes,
                      cudaStream_t s, const char* name, Args&&... args) {
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem_bytes;
  config.stream = s;
  config.attrs = attribute;
  config.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // the error is reported here, not by the next check_launch
    check(e, name);
  }
  check_launch(name);
}

}  // namespace dcpmla::gpu
