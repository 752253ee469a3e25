// What both decode kernels (fma/, sm90/) read of a DecodeTile and where its results go: the cache
// row of a token, a pair's key limit, the output item of the tile's first pair and where a pair's
// LSE goes.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"
#include "cuda/output_rows.cuh"

namespace dcpmla::cuda {

// Markers for tokens not read from the cache.
constexpr std::int64_t kEntryNone = -1;     // past the tile's visible end: zeros, never read
constexpr std::int64_t kEntryInvalid = -2;  // block id outside the cache: NaN, never read

// Cache row of local token t of `request`, or one of the markers above.
__device__ __forceinline__ std::int64_t cache_entry(const DecodeParams& p, int request, int t,
                                                    int visible_end) {
  if (t >= visible_end) return kEntryNone;
  const std::int64_t id = p.block_table[std::int64_t(request) * p.max_blocks + t / p.block_size];
  return (id >= 0 && id < p.num_blocks) ? id * p.block_size + t % p.block_size : kEntryInvalid;
}

// Exclusive local key limit of the tile's pair `pair` (kv_begin: no key).
__device__ __forceinline__ int pair_key_limit(const DecodeParams& p, const DecodeTile& tile,
                                              int pair) {
  if (pair >= tile.num_pairs) return tile.kv_begin;
  const int row = tile.row_begin + (tile.pair_begin + pair) / p.num_heads;
  return max(tile.kv_begin, min(p.row_bound[row], tile.kv_end));
}

// Item (row * H + head) of the tile's pair 0, in the fp32 partials (split work items) or in the
// final rows.
__device__ __forceinline__ std::int64_t first_output_item(const DecodeParams& p,
                                                          const DecodeTile& tile) {
  const std::int64_t row = tile.partial_row >= 0 ? tile.partial_row : tile.row_begin;
  return row * p.num_heads + tile.pair_begin;
}

// Where the LSE of output item `item` goes: the partials, or the final rows (plain or packed),
// where `offset` is output_offset(p.final_rows, item, H) (unused for the partials).
__device__ __forceinline__ float* pair_lse_at(const DecodeParams& p, bool partial,
                                              std::int64_t item, std::int64_t offset) {
  return partial ? p.partial_lse + item : output_lse(p.final_rows, item, offset);
}

}  // namespace dcpmla::cuda
