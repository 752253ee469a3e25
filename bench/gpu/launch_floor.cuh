// The time a kernel launch takes when the kernel does nothing: the floor under every figure of
// a one-block kernel timed between CUDA events (the GPU planner's).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace dcpmla::bench {

// Launches one block of `threads` threads that returns at once, with `smem_bytes` of dynamic
// shared memory reserved; the launch's error.
cudaError_t launch_empty(int threads, std::size_t smem_bytes, cudaStream_t stream);

}  // namespace dcpmla::bench
