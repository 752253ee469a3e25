// Where a decode launch's time goes, block by block (DCPMLA_BLOCK_TIMES builds only; elsewhere the
// marks compile to nothing): thread 0 of each block records the global timer (and the SM clock at
// two of them) at six points of its walk into sm90_block_times, which cuda::read_block_times
// (sm90_decode.cu) copies out after the launch.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace dcpmla::cuda::sm90 {

enum class BlockMark { start, q_loaded, first_s, walked, rows_ready, end };

#if defined(DCPMLA_BLOCK_TIMES) && !defined(DCPMLA_EMULATE)
static __device__ BlockTimes sm90_block_times[kMaxTimedBlocks];

// By thread 0 of the block; tiles: the block's KV tiles (read at the start).
__device__ __forceinline__ void mark_block(BlockMark mark, int tiles) {
  if (threadIdx.x != 0 || blockIdx.x >= unsigned(kMaxTimedBlocks)) return;
  std::uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  const std::uint64_t clock = clock64();
  BlockTimes& t = sm90_block_times[blockIdx.x];
  switch (mark) {
    case BlockMark::start: {
      std::uint32_t sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      t = BlockTimes{sm, std::uint64_t(tiles), ns, 0, 0, 0, 0, 0, 0, 0};
      break;
    }
    case BlockMark::q_loaded:
      t.q_loaded_ns = ns;
      break;
    case BlockMark::first_s:
      t.first_s_ns = ns;
      t.first_s_clock = clock;
      break;
    case BlockMark::walked:
      t.walked_ns = ns;
      t.walked_clock = clock;
      break;
    case BlockMark::rows_ready:
      t.rows_ready_ns = ns;
      break;
    case BlockMark::end:
      t.end_ns = ns;
      break;
  }
}
#else
__device__ __forceinline__ void mark_block(BlockMark, int) {}
#endif

}  // namespace dcpmla::cuda::sm90
