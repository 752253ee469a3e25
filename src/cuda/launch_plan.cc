#include "launch_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "dcpmla/error.h"

namespace dcpmla::cuda {

PlanLimits gpu_plan_limits(const Batch& batch, const Sharding& sharding, int num_heads,
                           int block_size, int sm_count) {
  require(num_heads >= 1, ErrorCode::invalid_argument, "num_heads", ">= 1",
          std::to_string(num_heads));
  require(block_size >= 1, ErrorCode::invalid_argument, "block_size", ">= 1",
          std::to_string(block_size));
  require(sm_count >= 1, ErrorCode::invalid_argument, "sm_count", ">= 1", std::to_string(sm_count));
  validate_layout(batch);
  std::int64_t blocks = 0;      // thread blocks of the unsplit batch
  std::int64_t longest = 0;  // tokens of the longest local KV
  for (int b = 0; b < batch.num_requests(); ++b) {
    blocks += std::max<std::int64_t>(1, (std::int64_t(batch.q_len(b)) * num_heads + kTilePairs - 1) /
                                            kTilePairs);
    longest = std::max(longest, sharding.local_len(batch.total_len[std::size_t(b)]));
  }
  PlanLimits lim;  // no split
  if (blocks == 0 || blocks >= sm_count) return lim;
  const std::int64_t splits = sm_count / blocks;
  const std::int64_t min_blocks = (256 + block_size - 1) / block_size;
  const std::int64_t longest_blocks = (longest + block_size - 1) / block_size;
  lim.kv_chunk_blocks = int(std::clamp<std::int64_t>((longest_blocks + splits - 1) / splits,
                                                     min_blocks, std::max(min_blocks, longest_blocks)));
  return lim;
}

LaunchPlan build_launch_plan(const Plan& plan, int tile_pairs) {
  require(tile_pairs >= 1, ErrorCode::invalid_argument, "tile_pairs", ">= 1",
          std::to_string(tile_pairs));
  const std::int64_t H = plan.config.num_heads;
  LaunchPlan lp;
  for (const WorkItem& w : plan.work) {
    const std::int64_t pairs = std::int64_t(w.num_rows) * H;
    require(pairs <= std::numeric_limits<std::int32_t>::max(), ErrorCode::unsupported,
            fmt::format("work item of request {}", w.request), "at most 2^31 - 1 (row, head) pairs",
            fmt::format("{} rows x {} heads", w.num_rows, H));
    for (std::int64_t pb = 0; pb < pairs; pb += tile_pairs) {
      const std::int64_t np = std::min<std::int64_t>(tile_pairs, pairs - pb);
      // Rows the tile touches: its pairs are row-major, so rows [pb / H, (pb + np - 1) / H].
      std::int32_t visible = w.kv_begin;
      for (std::int64_t j = pb / H; j <= (pb + np - 1) / H; ++j) {
        const std::int32_t bound = plan.row_local_bound[std::size_t(w.row_begin + j)];
        visible = std::max(visible, std::min(bound, w.kv_end));
      }
      lp.tiles.push_back({w.request, w.row_begin, std::int32_t(pb), std::int32_t(np), w.kv_begin,
                          w.kv_end, visible, w.partial_row});
    }
  }
  // Longest first, so the long tiles do not start last and form the tail. The order never
  // changes what a tile computes.
  std::stable_sort(lp.tiles.begin(), lp.tiles.end(), [](const DecodeTile& a, const DecodeTile& b) {
    return a.kv_visible_end - a.kv_begin > b.kv_visible_end - b.kv_begin;
  });
  for (const SplitMerge& m : plan.merges) {
    for (std::int32_t j = 0; j < m.num_rows; ++j) {
      lp.merge_rows.push_back({m.row_begin + j, m.first_partial_row + j, m.num_splits, m.num_rows});
    }
  }
  lp.padding_begin = plan.num_real_rows;
  lp.padding_end = plan.num_rows;
  return lp;
}

namespace {

std::size_t align16(std::size_t n) {
  return (n + 15) / 16 * 16;
}

}  // namespace

void pack_launch_plan(const LaunchPlan& lp, const Plan& plan, PackedLaunchPlan& out) {
  const std::size_t tiles = lp.tiles.size() * sizeof(DecodeTile);
  const std::size_t merges = lp.merge_rows.size() * sizeof(MergeRow);
  const std::size_t bounds = plan.row_local_bound.size() * sizeof(std::int32_t);
  out.tiles_offset = 0;
  out.merge_rows_offset = align16(tiles);
  out.row_bound_offset = out.merge_rows_offset + align16(merges);
  out.bytes.assign(out.row_bound_offset + align16(bounds), std::byte{0});
  if (tiles) std::memcpy(out.bytes.data() + out.tiles_offset, lp.tiles.data(), tiles);
  if (merges) std::memcpy(out.bytes.data() + out.merge_rows_offset, lp.merge_rows.data(), merges);
  if (bounds) {
    std::memcpy(out.bytes.data() + out.row_bound_offset, plan.row_local_bound.data(), bounds);
  }
}

}  // namespace dcpmla::cuda
