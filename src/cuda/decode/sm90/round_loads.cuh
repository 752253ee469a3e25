// The KV loads of the round decode (round_kernel.cuh): every tile by bulk tensor copies, one
// 64-row box per chunk (pages of a multiple of 64 tokens, items starting on a page boundary),
// issued by the producer thread as the consumers free each chunk group, each chunk completing on
// its own mbarrier (fp8: once widened, round_widening.cuh); a partial last tile's rows past the
// visible end zeroed by its owner before S.
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

// The chunks [first, last) of group g.
struct ChunkRange {
  int first, last;
};
__device__ __forceinline__ ChunkRange chunks_of(ChunkGroup g) {
  return g == kRopeGroup ? ChunkRange{8, 9} : g == kLowGroup ? ChunkRange{0, 4} : ChunkRange{4, 8};
}
// fn(c) for the chunks of group g, unrolled.
template <class Fn>
__device__ __forceinline__ void for_each_chunk_of(ChunkGroup g, Fn fn) {
  if (g == kRopeGroup) {
    fn(8);
  } else {
    const int first = chunks_of(g).first;
#pragma unroll
    for (int c = first; c < first + 4; ++c) fn(c);
  }
}

// fn(index, group, key) for every chunk group of an item's n tiles, key = key_of(index), in the
// order the producer loads them: tiles 0 and 1 whole, then each later tile's groups as the
// consumers free them in tile index - 2 (the rope chunks at the round's top, then chunks 0-3 and
// 4-7 of tile A, then of B). The producer's issuing thread (key: the tile's box row) and the fp8
// wideners (no key) walk it alike.
template <class KeyOf, class Fn>
__device__ __forceinline__ void walk_groups(int n, KeyOf key_of, Fn fn) {
  for (int index = 0; index < 2 && index < n; ++index) {
    const auto key = key_of(index);
    fn(index, kLowGroup, key);
    fn(index, kRopeGroup, key);
    fn(index, kHighGroup, key);
  }
#pragma unroll 1
  for (int a = 2; a < n; a += 2) {
    const int b = a + 1;
    const bool has_b = b < n;
    const auto key_a = key_of(a);
    const decltype(key_a) key_b = has_b ? key_of(b) : decltype(key_a){};
    fn(a, kRopeGroup, key_a);
    if (has_b) fn(b, kRopeGroup, key_b);
    fn(a, kLowGroup, key_a);
    fn(a, kHighGroup, key_a);
    if (has_b) {
      fn(b, kLowGroup, key_b);
      fn(b, kHighGroup, key_b);
    }
  }
}

// Whether the item's query comes by boxes: a query with a map (q_boxes), and a tile of more than
// 48 pairs (a box brings 64 rows, 1152 bytes each, whatever the pairs: 4x a 16-pair tile's query,
// read by every item of a memory-bound batch).
__device__ __forceinline__ bool query_by_boxes(const DecodeParams& p, const DecodeTile& tile) {
  return p.q_boxes && tile.num_pairs > 48;
}

// The item's 64 pairs from its first (row, head) on, as 9 boxes of 64 dims into Q's swizzled
// chunks, completing q_full: a thread's few instructions where the consumers' 16-byte copies took
// ~18 a thread with their address arithmetic. A plain query's pairs are consecutive rows of q; a
// gathered one's (q_group_heads: H a multiple of 64, so an item lies in one row) are 64 / gh groups
// of gh heads, one box row a head. Rows past the item's pairs hold the next pairs of q (zeros past
// its end): their scores are masked (their key limit is the item's first key) and their outputs
// never stored.
__device__ __forceinline__ void issue_query_boxes(const DecodeParams& p, const RoundSmem& sm,
                                                  const DecodeTile& tile) {
  hopper::mbarrier_arrive_expect_tx(sm.q_full, kTileBytes);
  if (p.q_group_heads == 0) {
    const int slot = int(std::int64_t(tile.row_begin) * p.num_heads + tile.pair_begin);
#pragma unroll 1
    for (int c = 0; c < kChunks; ++c) {
      hopper::bulk_tensor_load_2d(sm.q + std::uint32_t(c) * kChunkBytes, &p.q_map, c * 64, slot,
                                  sm.q_full);
    }
  } else {
    const int row = tile.row_begin + tile.pair_begin / p.num_heads;
    const int group = tile.pair_begin % p.num_heads / p.q_group_heads;
#pragma unroll 1
    for (int c = 0; c < kChunks; ++c) {
      hopper::bulk_tensor_load_4d(sm.q + std::uint32_t(c) * kChunkBytes, &p.q_map, c * 64, 0, row,
                                  group, sm.q_full);
    }
  }
}

// The producer thread (thread 0 of warpgroup 2): the query's boxes (query_by_boxes), then every
// chunk's box, each group once the consumers have freed it in the tile two before. A bf16 box
// lands swizzled in the chunk and completes its full barrier; an fp8 box (uint8, unswizzled: 64
// tokens x 64 bytes) lands in the chunk's upper half and completes its staged barrier, for the
// wideners. Only this thread waits for the block ids and for the copy engine to take each box.
template <Cache C>
__device__ __forceinline__ void produce_tiles(const DecodeParams& p, const RoundSmem& sm,
                                              const DecodeTile& tile, int n) {
  if (query_by_boxes(p, tile) && n > 0) issue_query_boxes(p, sm, tile);
  constexpr std::uint32_t kBoxBytes = C == Cache::bf16 ? kChunkBytes : kChunkBytes / 2;
  constexpr std::uint32_t kBoxAt = C == Cache::bf16 ? 0u : kStagedFp8;
  const int outside = int(std::int64_t(p.num_blocks) * p.block_size);  // tile_box_row's mark
  auto row_of = [&](int index) { return tile_box_row(p, tile, tile.kv_begin + index * kKeys); };
  walk_groups(n, row_of, [&](int index, ChunkGroup g, int row) {
    const int stage = index & 1;
    if (index >= 2) {
      hopper::mbarrier_wait(sm.empty_bar(stage, g), (std::uint32_t(index - 2) >> 1) & 1u);
    }
    if constexpr (C == Cache::fp8) sm.outside_group(stage, g) = row == outside;
    for_each_chunk_of(g, [&](int c) {
      const std::uint32_t bar = C == Cache::bf16 ? sm.full_bar(stage, c) : sm.staged_bar(stage, c);
      hopper::mbarrier_arrive_expect_tx(bar, kBoxBytes);
      hopper::bulk_tensor_load_2d(sm.stage(index) + c * kChunkBytes + kBoxAt, &p.kv_map, c * 64,
                                  row, bar);
    });
  });
}

// Whether tile `index` reaches past the item's visible end.
__device__ __forceinline__ bool partial_tile(const DecodeTile& tile, int index) {
  return tile.kv_begin + (index + 1) * kKeys > tile.kv_visible_end;
}

// A partial bf16 tile, by its owner's 128 threads (wt: 0 .. 127) before its S: once every chunk
// has landed, the rows past the visible end become zeros, as the threads' copies of the other
// forms write them (the box brought whatever the page holds there; P is 0 on those keys, and
// 0 x NaN would poison P.V). An fp8 tile's wideners write its zeros (round_widening.cuh).
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
