// The decode kernels' view of a schedule (core/schedule_layout.h): one thread block per work item
// of at most kTilePairs (row, head) pairs, the header's counts read on the device.
#pragma once

#include <cstdint>

#include "core/schedule_layout.h"
#include "dcpmla/plan.h"

namespace dcpmla::cuda {

// (row, head) pairs one decode thread block computes: the CUDA backend's DeviceModel::tile_pairs.
inline constexpr int kTilePairs = 64;
// KV tokens a decode thread block walks at a time (the kernels' kKeys).
inline constexpr int kTileKeys = 64;
// Rows of the decode's bulk-copy box at most (the kernels' kBoxRows).
inline constexpr int kBulkBoxRows = 64;

// One decode thread block's work: a plan's work item, as the planner wrote it.
using DecodeTile = WorkItem;
// The plan's counts: the kernels read num_items, num_merge_rows and the padding rows.
using PlanHeader = ScheduleHeader;

// Whether the decode's bf16 tiles of this block size come by bulk tensor copies: pages of 16
// tokens or more that hold whole 64-row boxes or fit in one (4 boxes a chunk at most, none
// straddling a page).
inline bool bulk_copies_fit(int block_size) {
  return block_size >= 16 && (block_size % kBulkBoxRows == 0 || kBulkBoxRows % block_size == 0);
}

}  // namespace dcpmla::cuda
