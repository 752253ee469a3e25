// The planner's rules as pure functions of integers, compiled for the host (make_plan) and the
// device (the GPU planner), so both planners compute every field the same way. Every cost is an
// integer: floating point could round differently on the two sides.
#pragma once

#include <cstdint>

#include "dcpmla/numeric.h"  // DCPMLA_HD

namespace dcpmla::rules {

// KV tokens a work item walks at a time (the kernels' tile of keys): the unit of a walk.
inline constexpr int kTileKeys = 64;
// Per-tile fixed cost of a work item in tokens of its walk (its query rows, its output, the
// merge): about two tiles (docs/design/decode-kernel.md).
inline constexpr std::int64_t kFixedTokens = 128;
// A split pair costs ~0.037 tokens of a walk: it writes 2 KiB of fp32 partial O and the merge
// reads it back (~1.2 ns at ~3.5 TB/s). Costs are kept in thousandths of a token.
inline constexpr std::int64_t kSplitPairMilli = 37;
inline constexpr std::int64_t kMilli = 1000;
// The fewest splits whose cost is within 2 % of the best: split only for a clear gain.
inline constexpr std::int64_t kTolerancePercent = 102;
// The last-wave cut: batches of 2..kMaxTailWaves waves, tail requests in at most kMaxTailParts.
inline constexpr std::int64_t kMaxTailWaves = 8;
inline constexpr std::int64_t kMaxTailParts = 8;
// ... and only where it finishes at least 2 % sooner.
inline constexpr std::int64_t kTailGainPercent = 98;

// 64-bit division costs tens of cycles; the planner's operands fit 31 bits, where a 32-bit one
// gives the same quotient.
DCPMLA_HD std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  if (a >= 0 && b > 0 && a <= 0x7fffffff && b <= 0x7fffffff) {
    return std::int64_t((std::uint32_t(a) + std::uint32_t(b) - 1) / std::uint32_t(b));
  }
  return (a + b - 1) / b;
}
DCPMLA_HD int count_leading_zeros(std::uint64_t x) {
#ifdef __CUDA_ARCH__
  return __clzll(static_cast<long long>(x));
#else
  return x == 0 ? 64 : __builtin_clzll(x);
#endif
}

// floor(2^s / d) for a quotient below 2^32 (s <= 62, d >= 1), by a double quotient: correctly
// rounded, it lies within an ulp (2^-20 at 2^32) of the exact one, so its floor is the exact floor
// or one above it, which one product tells.
DCPMLA_HD std::uint64_t floor_pow2_over_by_double(int s, std::int64_t d) {
  const std::uint64_t n = std::uint64_t(1) << s;
  auto q = std::uint64_t(double(n) / double(d));
  if (q * std::uint64_t(d) > n) --q;
  return q;
}

// Ceiling (and floor) division of many dividends by one divisor without a divide instruction (the
// host planner evaluates every request against every candidate chunk): x / d = (x m) >> s for x <
// 2^31 with m = floor(2^(31 + l) / d) + 1, l = ceil(log2 d) (Granlund and Montgomery, 1994), so m
// fits 32 bits and x m 63. Exact: the same quotients as ceil_div.
struct CeilDivider {
  std::uint64_t magic = 1;
  int shift = 0;
  std::int64_t divisor = 1;
  CeilDivider() = default;  // divides by 1
  // d in [1, 2^31).
  DCPMLA_HD explicit CeilDivider(std::int64_t d) : divisor(d) {
    const int l = d > 1 ? 64 - count_leading_zeros(std::uint64_t(d - 1)) : 0;
    shift = 31 + l;
#ifdef __CUDA_ARCH__
    // The GPU has no 64-bit divide instruction (its routine is ~100 dependent instructions).
    magic = floor_pow2_over_by_double(shift, d) + 1;
#else
    magic = ((std::uint64_t(1) << shift) / std::uint64_t(d)) + 1;
#endif
  }
  // floor(x / d) for x in [0, 2^31). x and m fit 32 bits: one 32 x 32 -> 64-bit multiply.
  DCPMLA_HD std::int64_t floor(std::int64_t x) const {
    return std::int64_t((std::uint64_t(std::uint32_t(x)) * std::uint32_t(magic)) >> shift);
  }
  // ceil(a / d) for a in [0, 2^31].
  DCPMLA_HD std::int64_t ceil(std::int64_t a) const {
    return a > 0 ? floor(a - 1) + 1 : 0;
  }
};

DCPMLA_HD std::int64_t min64(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}
DCPMLA_HD std::int64_t max64(std::int64_t a, std::int64_t b) {
  return a > b ? a : b;
}

// Sharding::local_len (SPEC section 2): positions < L owned by `rank`.
DCPMLA_HD std::int64_t local_len(std::int64_t L, int world, int rank, int interleave) {
  const std::int64_t span = std::int64_t(world) * interleave;
  std::int64_t whole, rem;
  if ((span & (span - 1)) == 0) {  // W x I a power of two (the usual case): shifts
    // One instruction on either side (a popcount without -mpopcnt is a library call).
    const int shift = 63 - count_leading_zeros(std::uint64_t(span));
    whole = L >> shift;
    rem = L & (span - 1);
  } else {
    whole = L / span;
    rem = L % span;
  }
  return whole * interleave + min64(max64(rem - std::int64_t(rank) * interleave, 0), interleave);
}

// local_len of one sharding for L in [0, 2^31) by a multiplier: no branch and no division, for
// the GPU planner's loops over work items. W x I below 2^31 (fits()).
struct LocalLen {
  CeilDivider span;
  std::int64_t interleave, first;  // first: rank x I
  DCPMLA_HD static bool fits(int world, int interleave) {
    return std::int64_t(world) * interleave < (std::int64_t(1) << 31);
  }
  DCPMLA_HD LocalLen(int world, int rank, int interleave)
      : span(std::int64_t(world) * interleave),
        interleave(interleave),
        first(std::int64_t(rank) * interleave) {}
  DCPMLA_HD std::int64_t operator()(std::int64_t L) const {
    const std::int64_t whole = span.floor(L), rem = L - whole * span.divisor;
    return whole * interleave + min64(max64(rem - first, 0), interleave);
  }
};

// Work items (thread blocks) a request split of Q rows needs: one per tile_pairs pairs.
DCPMLA_HD std::int64_t tiles_per_split(std::int64_t q, int num_heads, int tile_pairs) {
  if (tile_pairs <= 0) return 1;
  const std::int64_t t = ceil_div(q * num_heads, tile_pairs);
  return t < 1 ? 1 : t;
}

// Pairs of each work item of a request split with `pairs` (row, head) pairs in `tiles` work items
// (tiles_per_split; tile_pairs 0: all pairs in one). Two tiles whose second would hold more than a
// quarter of a tile are cut into equal halves: both thread blocks then run one schedule and read
// the KV in step, so the L2 answers one block's reads with the other's, where a full and a partial
// tile drift apart (Kimi K3's 96 gathered heads: 48 + 48 instead of 64 + 32). A smaller second
// tile runs in the GPU's narrow form (decode-kernel.md section 8), far cheaper than a wide one.
DCPMLA_HD std::int32_t tile_step(std::int32_t pairs, std::int64_t tiles, int tile_pairs) {
  if (tile_pairs <= 0) return pairs;
  if (tiles == 2 && 4 * (std::int64_t(pairs) - tile_pairs) > tile_pairs) {
    return std::int32_t((std::int64_t(pairs) + 1) / 2);  // pairs may be 2^31 - 1
  }
  return tile_pairs;
}

// Splits of a local KV of `local` tokens in chunks of `chunk_tokens` (>= 1 even when empty).
DCPMLA_HD std::int64_t splits_of(std::int64_t local, std::int64_t chunk_tokens) {
  return local <= chunk_tokens ? 1 : ceil_div(local, chunk_tokens);
}

// The chunk of candidate k (k = 0: unsplit, the longest request's blocks), or 0 past the last.
// Candidates shrink strictly: k-th split count s gives max(min_chunk, ceil(longest / s)).
// Callers walk k = 0, 1, ... in order; next_candidate gives the following (chunk, s).
struct Candidate {
  std::int64_t chunk_blocks;
  std::int64_t splits;  // the split count that produced it (1 for k = 0)
};
DCPMLA_HD Candidate next_candidate(Candidate c, std::int64_t longest, std::int64_t min_chunk,
                                   int workers) {
  for (std::int64_t s = c.splits + 1; s <= 2 * std::int64_t(workers); ++s) {
    if (c.chunk_blocks <= min_chunk) break;
    const std::int64_t chunk = max64(min_chunk, ceil_div(longest, s));
    if (chunk < c.chunk_blocks) return {chunk, s};
  }
  return {0, 0};
}

// The cost of one chunk in thousandths of a token of one work item's walk: waves of work items
// x (the longest item's tokens + the fixed cost), plus what splitting costs beyond that.
// work_items / split_pairs are sums over the requests of split_terms. Saturates at kCostCap, so
// that cost x 100 and cap x kTolerancePercent stay within 64 bits (only absurd batches reach it,
// and then alike on the host and the device).
inline constexpr std::uint64_t kCostCap = ~std::uint64_t(0) / 128;
DCPMLA_HD std::uint64_t chunk_cost(std::int64_t chunk_blocks, std::int64_t longest, int block_size,
                                   std::int64_t work_items, std::int64_t split_pairs, int workers) {
  const std::int64_t waves = ceil_div(work_items, workers);
  const std::int64_t walk = min64(chunk_blocks, longest) * block_size + kFixedTokens;
  const unsigned __int128 cost = (unsigned __int128)(waves)*std::uint64_t(walk) * kMilli +
                                 (unsigned __int128)(split_pairs)*kSplitPairMilli;
  return cost > kCostCap ? kCostCap : std::uint64_t(cost);
}

// One request's share of chunk_cost's sums: its work items and, when split, its split pairs.
inline constexpr std::int64_t kTermCap = std::int64_t(1) << 40;
struct SplitTerms {
  std::int64_t work_items;
  std::int64_t split_pairs;
};
// The same from the request's split count.
DCPMLA_HD SplitTerms split_terms_of(std::int64_t splits, std::int64_t tiles, std::int64_t q,
                                    int num_heads) {
  // Each term at most kTermCap, so sums over any batch stay far from overflow (a batch that
  // reaches it is refused by its capacity long before).
  const std::int64_t items = tiles * splits, pairs = splits > 1 ? splits * q * num_heads : 0;
  return {min64(items, kTermCap), min64(pairs, kTermCap)};
}
DCPMLA_HD SplitTerms split_terms(std::int64_t kv_blocks, std::int64_t chunk_blocks,
                                 std::int64_t tiles, std::int64_t q, int num_heads) {
  return split_terms_of(kv_blocks <= chunk_blocks ? 1 : ceil_div(kv_blocks, chunk_blocks), tiles, q,
                        num_heads);
}

// Whether a split's totals respect the config's limits (-1: none).
DCPMLA_HD bool within_limits(std::int64_t work_items, std::int64_t split_pairs, int num_heads,
                             std::int64_t max_work_items, std::int64_t max_partial_rows) {
  // split_pairs / H <= max_partial_rows, as a product where it cannot overflow (a 64-bit division
  // costs the GPU planner ~100 instructions a candidate).
  const bool rows_fit =
      max_partial_rows < 0 || (max_partial_rows < 0x7fffffff && num_heads > 0
                                   ? split_pairs < (max_partial_rows + 1) * std::int64_t(num_heads)
                                   : split_pairs / num_heads <= max_partial_rows);
  return (max_work_items < 0 || work_items <= max_work_items) && rows_fit;
}

// The global positions causal row j of a request with Q rows and global length T sees; its
// exclusive local bound is the rank's share of them (local_len).
DCPMLA_HD std::int64_t causal_row_length(std::int64_t T, std::int64_t Q, std::int64_t j) {
  return T - (Q - 1 - j);
}

// An item's visible end from its last row's bound: min(bound, kv_end), at least kv_begin.
DCPMLA_HD std::int32_t clamp_visible(std::int32_t last_row_bound, std::int32_t kv_begin,
                                     std::int32_t kv_end) {
  const std::int32_t bound = last_row_bound < kv_end ? last_row_bound : kv_end;
  return bound > kv_begin ? bound : kv_begin;
}

// Visible end of the item of pairs [pair_begin, pair_begin + num_pairs) of a request split
// [kv_begin, kv_end): max over its rows of min(row bound, kv_end), at least kv_begin. A request's
// row bounds never decrease (causal rows see one more position each; full rows all see T), so
// the max is its last row's. row_bound points at the request's first row.
DCPMLA_HD std::int32_t visible_end(const std::int32_t* row_bound, std::int64_t pair_begin,
                                   std::int64_t num_pairs, int num_heads, std::int32_t kv_begin,
                                   std::int32_t kv_end) {
  // A request's pairs fit 31 bits (make_plan checks Q x H): a 32-bit division.
  const std::uint32_t last = std::uint32_t(pair_begin + num_pairs - 1) / std::uint32_t(num_heads);
  return clamp_visible(row_bound[last], kv_begin, kv_end);
}

// The walk of an item in tiles of kTileKeys keys: the launch order's sort key.
DCPMLA_HD std::int64_t walk_tiles(std::int32_t kv_begin, std::int32_t visible) {
  return ceil_div(std::int64_t(visible) - kv_begin, kTileKeys);
}

// Launch order key: walk descending, then the split's index (request order) ascending. Sorting
// the keys ascending gives the order; the split index is in the low 32 bits.
DCPMLA_HD std::uint64_t order_key(std::int64_t walk, std::int64_t index) {
  return (std::uint64_t(0x7fffffff - walk) << 32) | std::uint64_t(index);
}

}  // namespace dcpmla::rules
