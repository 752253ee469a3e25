// Launches a kernel with more than 48 KiB of dynamic shared memory: the opt-in is a per-device
// function attribute, set once per device and kernel (each kernel instantiation gets its own
// flags through the template parameter).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "check.h"

namespace dcpmla::cuda {

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

}  // namespace dcpmla::cuda
