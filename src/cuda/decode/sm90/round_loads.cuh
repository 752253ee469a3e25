// The KV loads of the round decode (round_kernel.cuh): every tile by bulk tensor copies, one
// 64-row box per chunk (pages of a multiple of 64 tokens, items starting on a page boundary),
// issued by the producer thread as the consumers free each chunk group, each chunk completing on
// its own mbarrier; a partial last tile's rows past the visible end zeroed by its owner before S.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/hopper/mbarrier.cuh"
#include "cuda/hopper/tma.cuh"

namespace dcpmla::cuda::sm90::rounds {

// The cache row of the box of the tile at local token t0 (one page holds the whole tile), or the
// tensor's row count (past its end: NaN, no read) for a block id outside the cache.
__device__ __forceinline__ int tile_box_row(const DecodeParams& p, const DecodeTile& tile, int t0) {
  const std::int32_t id =
      p.block_table[std::int64_t(tile.request) * p.max_blocks + t0 / p.block_size];
  const std::int64_t end_row = std::int64_t(p.num_blocks) * p.block_size;
  return int((id >= 0 && id < p.num_blocks) ? std::int64_t(id) * p.block_size + t0 % p.block_size
                                            : end_row);
}

// Chunks `Chunks` of tile `index` (box row `row`) into its stage, by one thread: each chunk's
// byte count on its own mbarrier, then its box.
template <int... Chunks>
__device__ __forceinline__ void load_chunks(const DecodeParams& p, const RoundSmem& sm, int index,
                                            int row) {
  const std::uint32_t stage = sm.stage(index);
  auto one = [&](int c) {
    const std::uint32_t bar = sm.full_bar(index & 1, c);
    hopper::mbarrier_arrive_expect_tx(bar, kChunkBytes);
    hopper::bulk_tensor_load_2d(stage + c * kChunkBytes, &p.kv_map, c * 64, row, bar);
  };
  (one(Chunks), ...);
}

// The producer thread (thread 0 of warpgroup 2) over an item's n tiles: tiles 0 and 1 whole,
// then each later tile's chunk groups as the consumers free them in tile index - 2, in the order
// they do (the rope chunks at the round's top, then chunks 0-3 and 4-7 of tile A, then of B).
// Only this thread waits for the block ids and for the copy engine to take each box.
__device__ __forceinline__ void produce_tiles(const DecodeParams& p, const RoundSmem& sm,
                                              const DecodeTile& tile, int n) {
  auto row_of = [&](int index) { return tile_box_row(p, tile, tile.kv_begin + index * kKeys); };
  for (int index = 0; index < 2 && index < n; ++index) {
    load_chunks<0, 1, 2, 3, 8, 4, 5, 6, 7>(p, sm, index, row_of(index));
  }
#pragma unroll 1
  for (int a = 2; a < n; a += 2) {
    const int b = a + 1;
    const bool has_b = b < n;
    const std::uint32_t parity = std::uint32_t((a - 2) >> 1) & 1u;
    const int row_a = row_of(a), row_b = has_b ? row_of(b) : 0;
    hopper::mbarrier_wait(sm.empty_bar(0, kRopeGroup), parity);
    load_chunks<8>(p, sm, a, row_a);
    if (has_b) {
      hopper::mbarrier_wait(sm.empty_bar(1, kRopeGroup), parity);
      load_chunks<8>(p, sm, b, row_b);
    }
    hopper::mbarrier_wait(sm.empty_bar(0, kLowGroup), parity);
    load_chunks<0, 1, 2, 3>(p, sm, a, row_a);
    hopper::mbarrier_wait(sm.empty_bar(0, kHighGroup), parity);
    load_chunks<4, 5, 6, 7>(p, sm, a, row_a);
    if (has_b) {
      hopper::mbarrier_wait(sm.empty_bar(1, kLowGroup), parity);
      load_chunks<0, 1, 2, 3>(p, sm, b, row_b);
      hopper::mbarrier_wait(sm.empty_bar(1, kHighGroup), parity);
      load_chunks<4, 5, 6, 7>(p, sm, b, row_b);
    }
  }
}

// Whether tile `index` reaches past the item's visible end.
__device__ __forceinline__ bool partial_tile(const DecodeTile& tile, int index) {
  return tile.kv_begin + (index + 1) * kKeys > tile.kv_visible_end;
}

// A partial tile, by its owner's 128 threads (wt: 0 .. 127) before its S: once every chunk has
// landed, the rows past the visible end become zeros, as the threads' copies of the other forms
// write them (the box brought whatever the page holds there; P is 0 on those keys, and 0 x NaN
// would poison P.V).
__device__ __forceinline__ void zero_tail(const RoundSmem& sm, const DecodeTile& tile, int index,
                                          int wt, int wg) {
  const std::uint32_t parity = std::uint32_t(index >> 1) & 1u;
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c) hopper::mbarrier_wait(sm.full_bar(index & 1, c), parity);
  const int valid = tile.kv_visible_end - (tile.kv_begin + index * kKeys);
  const std::uint32_t stage = sm.stage(index);
  constexpr int kUnits = kChunks * 8;  // 16-byte units of a row
#pragma unroll 1
  for (int u = wt; u < (kKeys - valid) * kUnits; u += 128) {
    const int row = valid + u / kUnits, rem = u % kUnits;
    st_shared16(stage + (rem >> 3) * kChunkBytes + hopper::swizzled_offset(row, rem & 7),
                make_uint4(0u, 0u, 0u, 0u));
  }
  hopper::fence_proxy_async_shared();
  named_barrier_sync(kZeroed + wg, 128);
}

}  // namespace dcpmla::cuda::sm90::rounds
