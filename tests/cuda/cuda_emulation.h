// A host emulation of the few CUDA builtins the decode kernel uses, so that the kernel's own
// source (src/cuda/decode_kernel.cuh, compiled as plain C++ with DCPMLA_EMULATE) runs on the CPU:
// one OS thread per CUDA thread, std::barrier for __syncthreads and __syncwarp, shuffles through
// a per-warp exchange buffer. Slow, but it checks indexing, masking, barriers and the online
// softmax of the real kernel source without a GPU (and under ASan / UBSan / TSan).
#pragma once

#define DCPMLA_EMULATE 1

#include <cuda_runtime.h>  // vector types; with a host compiler the qualifiers are empty

#include <algorithm>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __launch_bounds__(...)

namespace dcpmla_emu {

inline thread_local uint3 thread_idx{0, 0, 0};
inline thread_local uint3 block_idx{0, 0, 0};

struct Block {
  Block(int threads, std::size_t shared_bytes) : all(threads) {
    for (int w = 0; w < threads / 32; ++w) {
      warps.push_back(std::make_unique<std::barrier<>>(32));
      slots.emplace_back(32, 0u);
    }
    // Exactly the dynamic shared memory of the launch (so ASan sees overruns), NaN bytes so
    // that reads before writes show up.
    shared.assign(shared_bytes, 0xff);
  }
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::vector<std::uint32_t>> slots;
  std::vector<unsigned char> shared;  // operator new: 16-byte aligned
};
inline Block* block = nullptr;
inline std::uint64_t launches = 0;  // run_grid calls so far (keys per-launch state)

// Runs kernel() for blocks 0 .. num_blocks-1 with `threads` threads each (a multiple of 32) and
// `shared_bytes` of dynamic shared memory.
inline void run_grid(int num_blocks, int threads, std::size_t shared_bytes,
                     const std::function<void()>& kernel) {
  Block b(threads, shared_bytes);
  block = &b;
  ++launches;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      thread_idx = {unsigned(t), 0, 0};
      for (int i = 0; i < num_blocks; ++i) {
        block_idx = {unsigned(i), 0, 0};
        kernel();
        b.all.arrive_and_wait();  // the next block reuses shared memory
      }
    });
  }
  for (auto& t : pool) t.join();
  block = nullptr;
}

inline int warp_of_thread() {
  return int(thread_idx.x) / 32;
}

}  // namespace dcpmla_emu

#define threadIdx (::dcpmla_emu::thread_idx)
#define blockIdx (::dcpmla_emu::block_idx)

inline unsigned char* emulated_shared_memory() {
  return dcpmla_emu::block->shared.data();
}
inline void __syncthreads() {
  dcpmla_emu::block->all.arrive_and_wait();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  dcpmla_emu::block->warps[dcpmla_emu::warp_of_thread()]->arrive_and_wait();
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  static_assert(sizeof(T) == 4);
  const int w = dcpmla_emu::warp_of_thread(), lane = int(threadIdx.x) % 32;
  auto& slots = dcpmla_emu::block->slots[w];
  slots[lane] = std::bit_cast<std::uint32_t>(v);
  __syncwarp();
  const T r = std::bit_cast<T>(slots[lane ^ offset]);
  __syncwarp();
  return r;
}
template <class T>
T __ldg(const T* p) {
  return *p;
}
inline float __uint_as_float(unsigned u) {
  return std::bit_cast<float>(u);
}
inline unsigned __float_as_uint(float f) {
  return std::bit_cast<unsigned>(f);
}
using std::max;
using std::min;
