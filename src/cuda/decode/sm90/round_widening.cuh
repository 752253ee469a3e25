// The fp8 cache of the round decode (round_kernel.cuh): warps 1-3 of the producer warpgroup widen
// each chunk's e4m3 bytes, which a uint8 box staged in the chunk's upper half (round_loads.cuh),
// to bf16 in place, in the 128-byte-swizzled layout the MMAs read, and then complete the chunk's
// full barrier as a bf16 box would. The consumers run as they do for bf16: the widening (sm_90
// has no e4m3x2 -> bf16x2 conversion; a pair takes four instructions), the copies and their
// hand-offs stay off their chains, where the warp-specialised form has them on its output
// warpgroups' path.
#pragma once

#include <cstdint>

#include "cuda/conversions.cuh"
#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/decode/sm90/round_loads.cuh"
#include "cuda/hopper/mbarrier.cuh"

namespace dcpmla::cuda::sm90::rounds {

constexpr int kStagedUnits = int(kStagedFp8 / 16);  // 16-byte units of a chunk's e4m3 bytes
constexpr int kUnitsPerWidener = (kStagedUnits + kWideners - 1) / kWideners;
static_assert(kWideners % 32 == 0 && kStagedUnits == 256, "a unit's swizzle is its widener's");

// Chunk `chunk` (a shared address) by the 96 wideners (wt: 0 .. 95). Staged unit u holds token
// u / 4, dims 16 (u % 4) + [0, 16), and widens into units 2 (u % 4) and 2 (u % 4) + 1 of the
// token's row. A widener's units u = wt + 96 k lie 24 k tokens apart, so their swizzle (token % 8)
// and unit are wt's: each address is the widener's first plus a constant. The widened rows 32-63
// cover the staged bytes, so every unit is read before any is written. nan: the tile's page lies
// outside the cache (its box read zeros); the units become e4m3 NaNs, as the threads' copies of
// the warp-specialised form write them, so both forms give the same bits.
__device__ __forceinline__ void widen_chunk(std::uint32_t chunk, bool nan, int wt) {
  const std::uint32_t w = std::uint32_t(wt);
  const std::uint32_t src = chunk + kStagedFp8 + 16u * w;
  const std::uint32_t dst = chunk + hopper::swizzled_offset(w >> 2, 2u * (w & 3u));
  constexpr std::uint32_t kSrcStep = 16u * kWideners, kDstStep = 128u * (kWideners / 4);
  uint4 raw[kUnitsPerWidener];
#pragma unroll
  for (int k = 0; k < kUnitsPerWidener; ++k) {
    if (wt + k * kWideners < kStagedUnits) {
      raw[k] = nan ? make_uint4(kFp8NanWord, kFp8NanWord, kFp8NanWord, kFp8NanWord)
                   : ld_shared16(src + kSrcStep * k);
    }
  }
  named_barrier_sync(kStagedRead, kWideners);
#pragma unroll
  for (int k = 0; k < kUnitsPerWidener; ++k) {
    if (wt + k * kWideners >= kStagedUnits) continue;
    const uint4 r = raw[k];
    // The unit's pair: 2 (u % 4) is even, so the second unit's swizzled place is bit 4 flipped.
    const std::uint32_t at = dst + kDstStep * k;
    st_shared16(at, make_uint4(widen_fp8x2(r.x), widen_fp8x2(r.x >> 16), widen_fp8x2(r.y),
                               widen_fp8x2(r.y >> 16)));
    st_shared16(at ^ 16u, make_uint4(widen_fp8x2(r.z), widen_fp8x2(r.z >> 16), widen_fp8x2(r.w),
                                     widen_fp8x2(r.w >> 16)));
  }
  hopper::fence_proxy_async_shared();
  named_barrier_sync(kWidenedStored, kWideners);
}

// The wideners over an item's n tiles, chunk by chunk in the order the producer issues them: each
// chunk once its bytes have landed, then one arrival on its full barrier.
__device__ __forceinline__ void widen_tiles(const DecodeParams& p, const RoundSmem& sm,
                                            const DecodeTile& tile, int n, int wt) {
  const int outside = int(std::int64_t(p.num_blocks) * p.block_size);  // tile_box_row's mark
  for_each_group(p, tile, n, [&](int index, ChunkGroup g, int row) {
    const int stage = index & 1;
    const std::uint32_t parity = std::uint32_t(index >> 1) & 1u;
    // Not unrolled: unrolled, the wideners spilled.
    const ChunkRange r = chunks_of(g);
#pragma unroll 1
    for (int c = r.first; c < r.last; ++c) {
      hopper::mbarrier_wait(sm.staged_bar(stage, c), parity);
      widen_chunk(sm.stage(index) + std::uint32_t(c) * kChunkBytes, row == outside, wt);
      if (wt == 0) hopper::mbarrier_arrive(sm.full_bar(stage, c));
    }
  });
}

}  // namespace dcpmla::cuda::sm90::rounds
