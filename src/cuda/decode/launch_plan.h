// Host side of the CUDA decode launch: turns a Plan into the flat arrays the kernels read (one
// entry per thread block). Plain C++ (no CUDA), so it is unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dcpmla/plan.h"

namespace dcpmla::cuda {

// (row, head) pairs one decode thread block computes.
inline constexpr int kTilePairs = 64;
// KV tokens a decode thread block walks at a time (the kernels' kKeys).
inline constexpr int kTileKeys = 64;
// Rows of the decode's bulk-copy box at most (the kernels' kBoxRows).
inline constexpr int kBulkBoxRows = 64;

// One decode thread block: pairs [pair_begin, pair_begin + num_pairs) of one work item, where the
// work item's pairs are its Q rows x H heads in row-major order (pair = j * H + h).
struct DecodeTile {
  std::int32_t request;     // block-table row
  std::int32_t row_begin;   // first query row of the request (q / out row)
  std::int32_t pair_begin;  // first pair of the tile inside the work item
  std::int32_t num_pairs;   // 1 .. kTilePairs
  std::int32_t kv_begin;    // the work item's local KV range [kv_begin, kv_end)
  std::int32_t kv_end;
  std::int32_t kv_visible_end;  // max over the tile's rows of min(row bound, kv_end); >= kv_begin
  std::int32_t partial_row;     // -1: write out / lse rows; else the item's first partial row
};
static_assert(sizeof(DecodeTile) == 32);

// One query row of a split request: merges num_splits partials (split s at partial row
// first_partial_row + s * split_stride_rows) into output row out_row, for every head.
struct MergeRow {
  std::int32_t out_row;
  std::int32_t first_partial_row;
  std::int32_t num_splits;
  std::int32_t split_stride_rows;
};
static_assert(sizeof(MergeRow) == 16);

struct LaunchPlan {
  std::vector<DecodeTile> tiles;  // by work item, the longest KV walk first
  std::vector<MergeRow> merge_rows;
  std::int64_t padding_begin = 0;  // padding rows [padding_begin, padding_end): O = 0, LSE = -inf
  std::int64_t padding_end = 0;
};

// The counts of the plan in the device buffer, read by the kernels: a CUDA graph launches them for
// the buffer's capacity and replays whatever plan was uploaded last.
struct PlanHeader {
  std::int64_t num_tiles;
  std::int64_t num_merge_rows;
  std::int64_t padding_begin;
  std::int64_t padding_end;
};
static_assert(sizeof(PlanHeader) == 32);

// Room in a device plan buffer: decode thread blocks (tiles), merge rows, query rows.
struct LaunchCapacity {
  std::int64_t tiles = 0;
  std::int64_t merge_rows = 0;
  std::int64_t rows = 0;
  bool holds(const LaunchCapacity& need) const {
    return need.tiles <= tiles && need.merge_rows <= merge_rows && need.rows <= rows;
  }
  friend bool operator==(const LaunchCapacity&, const LaunchCapacity&) = default;
};
LaunchCapacity capacity_of(const LaunchPlan& lp, const Plan& plan);
LaunchCapacity max_capacity(const LaunchCapacity& a, const LaunchCapacity& b);

// Split-KV limits for a GPU with `sm_count` SMs that runs one decode thread block per SM at a
// time (a work item of Q rows runs ceil(Q * H / kTilePairs) blocks): the chunk size (cut from the
// longest request, never under 256 tokens) that minimises waves x the longest block's work, where
// each block also pays about two tiles of fixed cost (its query rows, its output, the merge). A
// batch that fills the SMs evenly is not split. A batch left unsplit whose last wave is partly
// filled may have just the requests of that wave cut (request_chunk_blocks), where list
// scheduling of its blocks says that finishes at least 2 % sooner (docs/design/decode-kernel.md).
PlanLimits gpu_plan_limits(const Batch& batch, const Sharding& sharding, int num_heads,
                           int block_size, int sm_count);

// Throws Error(unsupported) when a work item has more than INT32_MAX pairs.
LaunchPlan build_launch_plan(const Plan& plan, int tile_pairs = kTilePairs);

// Whether the decode's bf16 tiles of this block size come by bulk tensor copies: pages of 16
// tokens or more that hold whole 64-row boxes or fit in one (4 boxes a chunk at most, none
// straddling a page).
bool bulk_copies_fit(int block_size);

// Whether most of the plan's KV tokens are read by more than one thread block: those of work
// items with more than tile_pairs (row, head) pairs, whose row tiles walk the same KV (from L2
// after the first). The decode's bulk copies are asked for differently then (sm90/sm90_decode.cu).
bool kv_mostly_shared(const Plan& plan, int tile_pairs = kTilePairs);

// The device image of a launch plan: header, tiles, merge rows and row_local_bound, each section
// 16-byte aligned and sized for `capacity` (so the sections stay where a captured graph reads
// them whatever plan fits), in one buffer (one upload).
struct PackedLaunchPlan {
  std::vector<std::byte> bytes;
  std::size_t header_offset = 0;
  std::size_t tiles_offset = 0;
  std::size_t merge_rows_offset = 0;
  std::size_t row_bound_offset = 0;
};
// Throws Error(invalid_argument) when the plan does not fit `capacity`.
void pack_launch_plan(const LaunchPlan& lp, const Plan& plan, const LaunchCapacity& capacity,
                      PackedLaunchPlan& out);

}  // namespace dcpmla::cuda
