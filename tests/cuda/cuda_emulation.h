// A host emulation of the few CUDA builtins the decode kernel uses, so that the kernel's own
// source (src/cuda/decode/fma/fma_kernel.cuh, compiled as plain C++ with DCPMLA_EMULATE) runs on
// the CPU:
// one OS thread per CUDA thread, std::barrier for __syncthreads and __syncwarp, shuffles through
// a per-warp exchange buffer. Slow, but it checks indexing, masking, barriers and the online
// softmax of the real kernel source without a GPU (and under ASan / UBSan / TSan).
#pragma once

#define DCPMLA_EMULATE 1

#include <cuda_runtime.h>  // vector types; with a host compiler the qualifiers are empty

#include <algorithm>
#include <array>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dcpmla/numeric.h"

#define __launch_bounds__(...)

namespace dcpmla_emu {

inline thread_local uint3 thread_idx{0, 0, 0};
inline thread_local uint3 block_idx{0, 0, 0};

// Happens-before, for tc_emulation.h's check of writes to MMA operands: a thread's clock counts,
// per warpgroup, the MMAs whose completion the thread is ordered after (by its own wait, or
// through barriers from threads that waited). __syncthreads joins every thread's clock; the
// named barriers and mbarriers of tc_emulation.h join their arrivals' clocks into their waiters'.
// __syncwarp is not tracked (it would cost a lock per shuffle), so a kernel that orders an
// operand write after another lane's wait by __syncwarp alone is reported.
using Clock = std::array<int, 4>;
inline thread_local Clock hb_clock{};
inline void join_clock(Clock& into, const Clock& from) {
  for (std::size_t w = 0; w < into.size(); ++w) into[w] = std::max(into[w], from[w]);
}
// The join of the clocks of one __syncthreads phase (two slots: a slot is rewritten two phases
// later, after every thread has read it).
struct ClockExchange {
  std::mutex mutex;
  std::uint64_t phase[2] = {~0ull, ~0ull};
  Clock joined[2]{};
};
inline thread_local std::uint64_t syncthreads_passed = 0;
// Called by one thread while the others wait, before each block (tc_emulation.h resets what it
// tracks per block there).
inline void (*before_each_block)() = nullptr;

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
  ClockExchange all_clocks;
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
        hb_clock = {};
        if (before_each_block != nullptr) {
          if (t == 0) before_each_block();
          b.all.arrive_and_wait();
        }
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
  using namespace dcpmla_emu;
  ClockExchange& x = block->all_clocks;
  const std::uint64_t phase = syncthreads_passed++;
  const int slot = int(phase & 1);
  {
    std::lock_guard lk(x.mutex);
    if (x.phase[slot] != phase) {
      x.phase[slot] = phase;
      x.joined[slot] = hb_clock;
    } else {
      join_clock(x.joined[slot], hb_clock);
    }
  }
  block->all.arrive_and_wait();
  std::lock_guard lk(x.mutex);
  join_clock(hb_clock, x.joined[slot]);
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  dcpmla_emu::block->warps[dcpmla_emu::warp_of_thread()]->arrive_and_wait();
}
namespace dcpmla_emu {
// The value lane `source` of the calling thread's warp passes in (every lane of the warp calls).
template <class T>
T shuffle_from(T v, int source) {
  static_assert(sizeof(T) == 4);
  auto& slots = block->slots[warp_of_thread()];
  slots[int(threadIdx.x) % 32] = std::bit_cast<std::uint32_t>(v);
  __syncwarp();
  const T r = std::bit_cast<T>(slots[source & 31]);
  __syncwarp();
  return r;
}
}  // namespace dcpmla_emu
template <class T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  return dcpmla_emu::shuffle_from(v, (int(threadIdx.x) % 32) ^ offset);
}
template <class T>
T __shfl_sync(unsigned, T v, int src_lane) {
  return dcpmla_emu::shuffle_from(v, src_lane);
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

// The PTX wrappers both decode kernels use that have no effect or a plain C++ equivalent here
// (tc_emulation.h adds those of the sm90 decode).
namespace dcpmla::cuda {
inline std::uint32_t pack_bf16x2(float lo, float hi) {
  return std::uint32_t(dcpmla::float_to_bf16(lo)) | std::uint32_t(dcpmla::float_to_bf16(hi)) << 16;
}
}  // namespace dcpmla::cuda
namespace dcpmla::cuda::hopper {
inline void cp_async_wait_all() {}  // the emulated copies complete at once
}  // namespace dcpmla::cuda::hopper
