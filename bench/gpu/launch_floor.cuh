// The time a kernel launch takes when the kernel does nothing: the floor under every figure of
// a one-block kernel timed between CUDA events (the GPU planner's).
#pragma once

#include <cstddef>

namespace dcpmla::bench {

// Launches one block of `threads` threads that returns at once, with `smem_bytes` of dynamic
// shared memory reserved.
void launch_empty(int threads, std::size_t smem_bytes, void* stream);

}  // namespace dcpmla::bench
