#include "cuda/decode/launch_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "dcpmla/error.h"

namespace dcpmla::cuda {

namespace {

// Per-block fixed cost in tokens of a block's walk (its query rows, its output, the merge).
constexpr double kBlockFixedTokens = 128;
// Splitting: each split (row, head) pair writes 2 KiB of fp32 partial O and the merge reads it
// back, ~1.2 ns a pair and split at ~3.5 TB/s, ~0.037 tokens of a block's walk
// (docs/design/decode-kernel.md).
constexpr double kTokensPerSplitPair = 0.037;

// The last-wave cut: batches of at most this many waves, each tail request in at most this many
// parts.
constexpr int kMaxTailWaves = 8;
constexpr int kMaxTailParts = 8;

// List scheduling of thread blocks on SMs (each block to the SM that frees first), as the GPU's
// block scheduler runs a launch: `free` holds each SM's finishing time (a min-heap).
struct SmClock {
  std::vector<double> free;
  explicit SmClock(int sms) : free(std::size_t(sms), 0.0) {}
  void run(double cost, std::int64_t count) {
    for (std::int64_t k = 0; k < count; ++k) {
      std::pop_heap(free.begin(), free.end(), std::greater<>());
      free.back() += cost;
      std::push_heap(free.begin(), free.end(), std::greater<>());
    }
  }
  double makespan() const { return *std::max_element(free.begin(), free.end()); }
};

// The requests a batch-wide chunk leaves unsplit and whose thread blocks would start in the last,
// partly filled wave are cut further, each into `parts` chunks, when list scheduling (blocks in
// the launch order: the longest walk first) says that finishes the batch clearly sooner.
// Returns the per-request chunks (empty: no change). kv_blocks / blocks: per request, its KV
// blocks and its thread blocks per work item; q_pairs: its (row, head) pairs.
std::vector<std::int32_t> tail_split(const std::vector<std::int64_t>& kv_blocks,
                                     const std::vector<std::int64_t>& blocks,
                                     const std::vector<std::int64_t>& q_pairs, int block_size,
                                     std::int64_t min_chunk, int sm_count) {
  const std::size_t B = kv_blocks.size();
  std::int64_t total = 0;
  for (std::size_t b = 0; b < B; ++b) total += blocks[b];
  // One wave has no tail to cut; past kMaxTailWaves the last wave is a small share, and the
  // simulation would cost the host more than it could save (~1.6 ms at 4096 requests).
  if (total <= sm_count || total > kMaxTailWaves * std::int64_t(sm_count)) return {};
  std::vector<std::size_t> order(B);
  for (std::size_t b = 0; b < B; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return kv_blocks[a] > kv_blocks[b]; });
  const std::int64_t tail_start = (total - 1) / sm_count * sm_count;  // first block of last wave
  auto walk = [&](std::int64_t pages) { return double(pages * block_size) + kBlockFixedTokens; };
  SmClock prefix(sm_count);
  std::size_t first_tail = 0;  // in `order`
  for (std::int64_t started = 0; first_tail < B; ++first_tail) {
    const std::size_t b = order[first_tail];
    if (started + blocks[b] > tail_start) break;
    started += blocks[b];
    prefix.run(walk(kv_blocks[b]), blocks[b]);
  }
  // The batch's finishing time (plus the splits' cost) with each tail request cut in `parts`.
  auto finish = [&](int parts) {
    // The tail's work items, longest walk first (as build_launch_plan orders them).
    std::vector<std::pair<std::int64_t, std::int64_t>> items;  // (pages, thread blocks)
    double split_cost = 0;
    for (std::size_t k = first_tail; k < B; ++k) {
      const std::size_t b = order[k];
      const std::int64_t chunk = std::max(min_chunk, (kv_blocks[b] + parts - 1) / parts);
      const std::int64_t n = (kv_blocks[b] + chunk - 1) / chunk;
      for (std::int64_t s = 0; s < n; ++s) {
        items.emplace_back(std::min(chunk, kv_blocks[b] - s * chunk), blocks[b]);
      }
      if (n > 1) split_cost += kTokensPerSplitPair * double(n) * double(q_pairs[b]);
    }
    std::stable_sort(items.begin(), items.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    SmClock clock = prefix;
    for (const auto& [pages, count] : items) clock.run(walk(pages), count);
    return clock.makespan() + split_cost;
  };
  const double unsplit = finish(1);
  int best_parts = 1;
  double best = unsplit;
  for (int parts = 2; parts <= kMaxTailParts; ++parts) {
    const double cost = finish(parts);
    if (cost >= best && parts > best_parts + 1) break;  // two past the best: taken as rising
    if (cost < best) best = cost, best_parts = parts;
  }
  if (best_parts == 1 || best > 0.98 * unsplit) return {};
  std::vector<std::int32_t> chunks(B, 0);
  for (std::size_t k = first_tail; k < B; ++k) {
    const std::size_t b = order[k];
    const std::int64_t chunk = std::max(min_chunk, (kv_blocks[b] + best_parts - 1) / best_parts);
    if (chunk < kv_blocks[b]) chunks[b] = std::int32_t(chunk);
  }
  return chunks;
}

}  // namespace

PlanLimits gpu_plan_limits(const Batch& batch, const Sharding& sharding, int num_heads,
                           int block_size, int sm_count) {
  require(num_heads >= 1, ErrorCode::invalid_argument, "num_heads", ">= 1",
          std::to_string(num_heads));
  require(block_size >= 1, ErrorCode::invalid_argument, "block_size", ">= 1",
          std::to_string(block_size));
  require(sm_count >= 1, ErrorCode::invalid_argument, "sm_count", ">= 1", std::to_string(sm_count));
  validate_layout(batch);
  const int B = batch.num_requests();
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(B)), kv_blocks(blocks.size());
  std::int64_t longest = 0;  // KV blocks of the longest local KV
  for (int b = 0; b < B; ++b) {
    blocks[b] = std::max<std::int64_t>(
        1, (std::int64_t(batch.q_len(b)) * num_heads + kTilePairs - 1) / kTilePairs);
    const std::int64_t len = sharding.local_len(batch.total_len[std::size_t(b)]);
    kv_blocks[b] = (len + block_size - 1) / block_size;
    longest = std::max(longest, kv_blocks[b]);
  }
  const std::int64_t min_chunk = (256 + block_size - 1) / block_size;
  // Estimated time of a chunk size, in tokens of one thread block's walk (a 64-token tile takes
  // about 2 us whether its MMAs or its loads bound it): waves of thread blocks x (the longest
  // block's tokens + a fixed cost of about two tiles: its query rows and its output), plus what
  // splitting costs beyond that (kTokensPerSplitPair).
  auto cost = [&](std::int64_t chunk) {
    std::int64_t thread_blocks = 0;
    double split_pairs = 0;
    for (int b = 0; b < B; ++b) {
      const std::int64_t splits = std::max<std::int64_t>(1, (kv_blocks[b] + chunk - 1) / chunk);
      thread_blocks += blocks[b] * splits;
      if (splits > 1) split_pairs += double(splits) * batch.q_len(b) * num_heads;
    }
    const std::int64_t waves = (thread_blocks + sm_count - 1) / sm_count;
    return double(waves) * (double(std::min(chunk, longest) * block_size) + kBlockFixedTokens) +
           kTokensPerSplitPair * split_pairs;
  };
  PlanLimits lim;  // no split
  if (B == 0 || longest <= min_chunk) return lim;
  // The fewest splits whose cost is within 2 % of the best: split only for a clear gain.
  std::vector<std::pair<std::int64_t, double>> options{{longest, cost(longest)}};
  double best_cost = options.front().second;
  for (std::int64_t splits = 2; splits <= 2 * sm_count; ++splits) {
    const std::int64_t chunk = std::max(min_chunk, (longest + splits - 1) / splits);
    if (chunk < options.back().first) {
      options.emplace_back(chunk, cost(chunk));
      best_cost = std::min(best_cost, options.back().second);
    }
    if (chunk == min_chunk) break;
  }
  const auto chosen = std::find_if(options.begin(), options.end(),
                                   [&](const auto& o) { return o.second <= best_cost * 1.02; });
  if (chosen->first < longest) {
    lim.kv_chunk_blocks = int(chosen->first);
    return lim;
  }
  // Unsplit: the requests of a partly filled last wave may still be cut (only they pay the merge).
  std::vector<std::int64_t> q_pairs(blocks.size());
  for (int b = 0; b < B; ++b) q_pairs[b] = std::int64_t(batch.q_len(b)) * num_heads;
  lim.request_chunk_blocks =
      tail_split(kv_blocks, blocks, q_pairs, block_size, min_chunk, sm_count);
  return lim;
}

bool bulk_copies_fit(int block_size) {
  return block_size >= 16 && (block_size % kBulkBoxRows == 0 || kBulkBoxRows % block_size == 0);
}

bool kv_mostly_shared(const Plan& plan, int tile_pairs) {
  const std::int64_t H = plan.config.num_heads;
  std::int64_t shared = 0, alone = 0;
  for (const WorkItem& w : plan.work) {
    const std::int64_t tokens = std::int64_t(w.kv_end) - w.kv_begin;
    (std::int64_t(w.num_rows) * H > tile_pairs ? shared : alone) += tokens;
  }
  return shared > alone;
}

LaunchPlan build_launch_plan(const Plan& plan, int tile_pairs) {
  require(tile_pairs >= 1, ErrorCode::invalid_argument, "tile_pairs", ">= 1",
          std::to_string(tile_pairs));
  const std::int64_t H = plan.config.num_heads;
  LaunchPlan lp;
  // Every work item's thread blocks, item after item, and per item its range of them and its KV
  // walk in tiles of kTileKeys tokens (the longest of its blocks'), the sort key below.
  struct ItemBlocks {
    std::int64_t walk = 0;
    std::size_t begin = 0, end = 0;
  };
  std::vector<DecodeTile> tiles;
  std::vector<ItemBlocks> items;
  items.reserve(plan.work.size());
  for (const WorkItem& w : plan.work) {
    const std::int64_t pairs = std::int64_t(w.num_rows) * H;
    require(pairs <= std::numeric_limits<std::int32_t>::max(), ErrorCode::unsupported,
            fmt::format("work item of request {}", w.request), "at most 2^31 - 1 (row, head) pairs",
            fmt::format("{} rows x {} heads", w.num_rows, H));
    ItemBlocks& item = items.emplace_back();
    item.begin = tiles.size();
    for (std::int64_t pb = 0; pb < pairs; pb += tile_pairs) {
      const std::int64_t np = std::min<std::int64_t>(tile_pairs, pairs - pb);
      // Rows the tile touches: its pairs are row-major, so rows [pb / H, (pb + np - 1) / H].
      std::int32_t visible = w.kv_begin;
      for (std::int64_t j = pb / H; j <= (pb + np - 1) / H; ++j) {
        const std::int32_t bound = plan.row_local_bound[std::size_t(w.row_begin + j)];
        visible = std::max(visible, std::min(bound, w.kv_end));
      }
      tiles.push_back({w.request, w.row_begin, std::int32_t(pb), std::int32_t(np), w.kv_begin,
                       w.kv_end, visible, w.partial_row});
      item.walk =
          std::max<std::int64_t>(item.walk, (visible - w.kv_begin + kTileKeys - 1) / kTileKeys);
    }
    item.end = tiles.size();
  }
  // Longest walk first, so the long blocks do not start last and form the tail; but a work
  // item's blocks stay together, so they run at once and read each KV tile from DRAM once
  // between them (sorting blocks apart put the rows of a causal item in different waves, each
  // reading the KV from DRAM again: docs/design/decode-kernel.md).
  // The order never changes what a block computes.
  std::stable_sort(items.begin(), items.end(),
                   [](const ItemBlocks& a, const ItemBlocks& b) { return a.walk > b.walk; });
  lp.tiles.reserve(tiles.size());
  for (const ItemBlocks& item : items) {
    lp.tiles.insert(lp.tiles.end(), tiles.begin() + std::ptrdiff_t(item.begin),
                    tiles.begin() + std::ptrdiff_t(item.end));
  }
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

LaunchCapacity capacity_of(const LaunchPlan& lp, const Plan& plan) {
  return {std::int64_t(lp.tiles.size()), std::int64_t(lp.merge_rows.size()), plan.num_rows};
}

LaunchCapacity max_capacity(const LaunchCapacity& a, const LaunchCapacity& b) {
  return {std::max(a.tiles, b.tiles), std::max(a.merge_rows, b.merge_rows),
          std::max(a.rows, b.rows)};
}

void pack_launch_plan(const LaunchPlan& lp, const Plan& plan, const LaunchCapacity& capacity,
                      PackedLaunchPlan& out) {
  const LaunchCapacity need = capacity_of(lp, plan);
  require(
      capacity.holds(need), ErrorCode::invalid_argument, "capacity",
      fmt::format(">= {} tiles, {} merge rows, {} rows", need.tiles, need.merge_rows, need.rows),
      fmt::format("{} tiles, {} merge rows, {} rows", capacity.tiles, capacity.merge_rows,
                  capacity.rows));
  const std::size_t tiles = lp.tiles.size() * sizeof(DecodeTile);
  const std::size_t merges = lp.merge_rows.size() * sizeof(MergeRow);
  const std::size_t bounds = plan.row_local_bound.size() * sizeof(std::int32_t);
  out.header_offset = 0;
  out.tiles_offset = align16(sizeof(PlanHeader));
  out.merge_rows_offset =
      out.tiles_offset + align16(std::size_t(capacity.tiles) * sizeof(DecodeTile));
  out.row_bound_offset =
      out.merge_rows_offset + align16(std::size_t(capacity.merge_rows) * sizeof(MergeRow));
  out.bytes.assign(
      out.row_bound_offset + align16(std::size_t(capacity.rows) * sizeof(std::int32_t)),
      std::byte{0});
  const PlanHeader header{std::int64_t(lp.tiles.size()), std::int64_t(lp.merge_rows.size()),
                          lp.padding_begin, lp.padding_end};
  std::memcpy(out.bytes.data() + out.header_offset, &header, sizeof header);
  if (tiles) std::memcpy(out.bytes.data() + out.tiles_offset, lp.tiles.data(), tiles);
  if (merges) std::memcpy(out.bytes.data() + out.merge_rows_offset, lp.merge_rows.data(), merges);
  if (bounds) {
    std::memcpy(out.bytes.data() + out.row_bound_offset, plan.row_local_bound.data(), bounds);
  }
}

}  // namespace dcpmla::cuda
