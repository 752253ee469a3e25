// The fp8 cache of the round decode (round_kernel.cuh): warps 1-3 of the producer warpgroup widen
// each chunk's e4m3 bytes, which a uint8 box staged in the chunk's upper half (round_loads.cuh),
// to f16 in place (every e4m3 value is an f16 value; the consumers' MMAs take f16 for an fp8
// cache, round_query.cuh), in the 128-byte-swizzled layout the MMAs read, and then complete the
// chunk's full barrier as a bf16 box would. The consumers run as they do for bf16: the widening,
// the copies and their hand-offs stay off their chains, where the warp-specialised form has them on
// its output warpgroups' path.
//
// One warp widens a whole chunk, the three warps taking the chunks in turn, so a chunk needs only
// its warp's __syncwarp. By the conversion to f16 a pair takes one instruction, where bf16 took
// four (docs/design/decode-kernel.md, section 3).
#pragma once

#include <cstdint>

#include "cuda/conversions.cuh"
#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/decode/sm90/round_loads.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90::rounds {

constexpr int kWidenerWarps = kWideners / 32;
static_assert(kStagedFp8 == 4096u && kChunkBytes == 8192u, "staged bytes fill the upper half");

// Four staged units of a lane into their widened places: staged unit u holds token u / 4, dims
// 16 (u % 4) + [0, 16), and widens into units 2 (u % 4) and 2 (u % 4) + 1 of the token's row, the
// second at the first's swizzled place with bit 4 flipped (2 (u % 4) is even). Unit k of the four
// lies 8 k tokens after the first, so it shares the lane's swizzle (token % 8) and its place is
// the first's plus 1024 k bytes. To f16, one conversion a pair, NaN bytes to NaN.
__device__ __forceinline__ void widen_units(const uint4 (&raw)[4], std::uint32_t dst) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint2 x = widen_fp8x4_f16(raw[k].x), y = widen_fp8x4_f16(raw[k].y);
    const uint2 z = widen_fp8x4_f16(raw[k].z), w = widen_fp8x4_f16(raw[k].w);
    const std::uint32_t at = dst + 1024u * std::uint32_t(k);
    st_shared16(at, make_uint4(x.x, x.y, y.x, y.y));
    st_shared16(at ^ 16u, make_uint4(z.x, z.y, w.x, w.y));
  }
}

// Chunk `chunk` (a shared address) by one warp, in two halves of 32 tokens: the first writes rows
// 0-31, below every staged byte; the second reads all its staged units before any lane writes
// rows 32-63, which cover them. nan: the tile's page lies outside the cache (its box read zeros);
// the units become e4m3 NaNs, as the threads' copies of the warp-specialised form write them, so
// both forms give the same bits. Rows from `valid` on lie past the item's visible end and become
// zeros, as the bf16 tiles' zero_tail writes them (round_loads.cuh): for an fp8 cache the
// wideners are the only threads that write a stage.
__device__ __forceinline__ void widen_chunk(std::uint32_t chunk, bool nan, int valid, int lane) {
  const std::uint32_t l = std::uint32_t(lane);
  const std::uint32_t src = chunk + kStagedFp8 + 16u * l;
  const std::uint32_t dst = chunk + hopper::swizzled_offset(l >> 2, 2u * (l & 3u));
#pragma unroll 1
  for (std::uint32_t half = 0; half < 2; ++half) {
    uint4 raw[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int token = int(l >> 2) + 32 * int(half) + 8 * k;
      raw[k] = token >= valid ? make_uint4(0u, 0u, 0u, 0u)
               : nan          ? make_uint4(kFp8NanWord, kFp8NanWord, kFp8NanWord, kFp8NanWord)
                              : ld_shared16(src + 2048u * half + 512u * std::uint32_t(k));
    }
    __syncwarp();
    widen_units(raw, dst + 4096u * half);
  }
  hopper::fence_proxy_async_shared();
  __syncwarp();
}

// The wideners (wt: 0 .. 95) over an item's n tiles, chunk by chunk in the order the producer
// issues them, warp w taking chunks w, w + 3, ...: each once its bytes have landed (its group's
// outside-the-cache mark, which the producer set before the boxes, is then in place), then one
// arrival on its full barrier. They read no block ids.
__device__ __forceinline__ void widen_tiles(const RoundSmem& sm, const DecodeTile& tile, int n,
                                            int wt) {
  const int warp = wt >> 5, lane = wt & 31;
  int turn = 0;  // the warp whose turn the next chunk is
  walk_groups(
      n, [](int) { return 0; },
      [&](int index, ChunkGroup g, int) {
        const int stage = index & 1;
        const std::uint32_t parity = std::uint32_t(index >> 1) & 1u;
        const ChunkRange r = chunks_of(g);
        const int valid = tile.kv_visible_end - (tile.kv_begin + index * kKeys);
#pragma unroll 1
        for (int c = r.first; c < r.last; ++c) {
          const bool mine = turn == warp;
          turn = turn == kWidenerWarps - 1 ? 0 : turn + 1;
          if (!mine) continue;
          hopper::mbarrier_wait(sm.staged_bar(stage, c), parity);
          const bool nan = sm.outside_group(stage, g) != 0;
          widen_chunk(sm.stage(index) + std::uint32_t(c) * kChunkBytes, nan, valid, lane);
          if (lane == 0) hopper::mbarrier_arrive(sm.full_bar(stage, c));
        }
      });
}

}  // namespace dcpmla::cuda::sm90::rounds
