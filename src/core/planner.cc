#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/plan_into.h"
#include "core/plan_rules.h"
#include "core/split_policy.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "dcpmla/types.h"

namespace dcpmla {
void validate_config(const PlanConfig& config) {
  DCPMLA_REQUIRE(config.block_size >= 1, ErrorCode::invalid_argument, "block_size", ">= 1",
                 std::to_string(config.block_size));
  config.sharding.validate(config.block_size);
  DCPMLA_REQUIRE(config.num_heads >= 1, ErrorCode::invalid_argument, "num_heads", ">= 1",
                 std::to_string(config.num_heads));
  DCPMLA_REQUIRE(config.num_blocks >= 1, ErrorCode::invalid_argument, "num_blocks", ">= 1",
                 std::to_string(config.num_blocks));
  const DeviceModel& m = config.model;
  DCPMLA_REQUIRE(m.workers >= 0, ErrorCode::invalid_argument, "model.workers",
                 ">= 0 (0 = never split)", std::to_string(m.workers));
  DCPMLA_REQUIRE(m.tile_pairs >= 0, ErrorCode::invalid_argument, "model.tile_pairs",
                 ">= 0 (0 = all pairs of a request)", std::to_string(m.tile_pairs));
  DCPMLA_REQUIRE(m.min_split_tokens >= 1, ErrorCode::invalid_argument, "model.min_split_tokens",
                 ">= 1", std::to_string(m.min_split_tokens));
  DCPMLA_REQUIRE(config.kv_chunk_blocks >= 0, ErrorCode::invalid_argument, "kv_chunk_blocks",
                 ">= 0 (0 = the model's choice)", std::to_string(config.kv_chunk_blocks));
}

void validate_batch(const Batch& batch, const PlanConfig& config) {
  validate_config(config);
  validate_layout(batch);
  // A work item's pairs are counted in int32.
  const std::int64_t max_q = std::numeric_limits<std::int32_t>::max() / config.num_heads;
  for (int b = 0; b < batch.num_requests(); ++b) {
    if (batch.q_len(b) <= max_q) continue;
    DCPMLA_REQUIRE(batch.q_len(b) <= max_q, ErrorCode::unsupported,
                   fmt::format("query_start_loc[{}]", b + 1),
                   fmt::format("at most {} rows a request ({} heads: 2^31 - 1 pairs)", max_q,
                               config.num_heads),
                   fmt::format("{} rows", batch.q_len(b)));
  }
}

void validate_block_ids(const Batch& batch, const PlanConfig& config) {
  validate_config(config);
  validate_layout(batch);
  const std::size_t B = batch.total_len.size();
  const Sharding sh{config.sharding.world, 0, config.sharding.interleave};
  for (std::size_t b = 0; b < B; ++b) {
    const auto needed = rules::ceil_div(sh.local_len(batch.total_len[b]), config.block_size);
    DCPMLA_REQUIRE(
        needed <= batch.max_blocks, ErrorCode::shape_mismatch, fmt::format("block_table row {}", b),
        fmt::format(">= {} blocks (T = {}: rank 0 holds the most)", needed, batch.total_len[b]),
        fmt::format("{} columns", batch.max_blocks));
    // A min/max scan (vectorised); the per-id loop below only runs to name a bad id.
    const auto row = batch.block_row(int(b));
    std::int32_t lo = 0, hi = 0;
    for (std::int64_t i = 0; i < needed; ++i) {
      lo = std::min(lo, row[i]);
      hi = std::max(hi, row[i]);
    }
    if (lo >= 0 && hi < config.num_blocks) continue;
    for (std::int64_t i = 0; i < needed; ++i) {
      DCPMLA_REQUIRE(row[i] >= 0 && row[i] < config.num_blocks, ErrorCode::out_of_range,
                     fmt::format("block_table[{}][{}]", b, i),
                     fmt::format("a block id in [0, {})", config.num_blocks),
                     std::to_string(row[i]));
    }
  }
}

Plan make_plan(const Batch& batch, const PlanConfig& config) {
  return make_plan_into(batch, config, [](Plan& plan, std::int64_t items) {
    plan.work.resize(std::size_t(items));
    return plan.work.data();
  });
}

Plan make_plan_into(const Batch& batch, const PlanConfig& config, const WorkItemSink& sink) {
  validate_batch(batch, config);
  const auto& sh = config.sharding;
  const int B = batch.num_requests();
  const int H = config.num_heads;
  const int bs = config.block_size;

  Plan plan;
  plan.config = config;
  plan.num_requests = B;
  plan.num_rows = batch.rows();
  plan.num_real_rows = batch.real_tokens();
  plan.row_local_bound.assign(std::size_t(plan.num_rows), 0);
  plan.request_local_len.resize(std::size_t(B));

  SplitInputs in;
  in.resize(B);
  const std::int64_t span = std::int64_t(sh.world) * sh.interleave;
  const std::int64_t own_begin = std::int64_t(sh.rank) * sh.interleave;
  const std::int64_t own_end = own_begin + sh.interleave;
  // Local lengths and Q x H are below 2^31 (validate_batch): dividers instead of divisions.
  const rules::CeilDivider blocks(bs);
  const int tile_pairs = config.model.tile_pairs;
  const rules::CeilDivider tiles(std::max(tile_pairs, 1));
  for (int b = 0; b < B; ++b) {
    const int Q = batch.q_len(b);
    const auto T = batch.total_len[b];
    const auto local = rules::local_len(T, sh.world, sh.rank, sh.interleave);
    plan.request_local_len[b] = std::int32_t(local);
    const auto fullest = rules::local_len(T, sh.world, 0, sh.interleave);
    plan.blocks_per_request = std::max(plan.blocks_per_request, std::int32_t(blocks.ceil(fullest)));
    in.q[b] = Q;
    in.kv_blocks[b] = blocks.ceil(local);
    // rules::tiles_per_split
    in.tiles[b] = tile_pairs > 0 ? std::max<std::int64_t>(1, tiles.ceil(std::int64_t(Q) * H)) : 1;
    // The visible prefix is local_len of the row's own global bound, never local(T) - offset.
    // Causal bounds of consecutive rows differ by one position, so local_len(bound + 1) is
    // local_len(bound) plus one when this rank owns position `bound`: no division per row.
    const bool full = batch.mask_of(b) == Mask::full;
    std::int32_t* bounds = plan.row_local_bound.data() + batch.query_start_loc[b];
    std::int64_t bound = full ? T : T - (Q - 1);
    std::int64_t local_bound = rules::local_len(bound, sh.world, sh.rank, sh.interleave);
    std::int64_t phase = bound % span;
    for (int j = 0; j < Q; ++j) {
      bounds[j] = std::int32_t(local_bound);
      if (full) continue;
      local_bound += (phase >= own_begin && phase < own_end) ? 1 : 0;
      if (++phase == span) phase = 0;
    }
  }

  const std::vector<std::int64_t> chunk_blocks = choose_chunks(in, config);

  // The request splits in request order, then in launch order (sorted by order_key).
  struct Split {
    std::uint64_t key;
    std::int32_t request, kv_begin, kv_end, partial_row;
  };
  std::vector<Split> splits;
  splits.reserve(std::size_t(B));
  constexpr std::int64_t kMaxPartialRows = std::numeric_limits<std::int32_t>::max();
  for (int b = 0; b < B; ++b) {
    const std::int64_t local = plan.request_local_len[b];
    const std::int64_t chunk = chunk_blocks[std::size_t(b)] * bs;
    const std::int64_t n = rules::splits_of(local, chunk);
    const std::int32_t row_begin = batch.query_start_loc[b];
    const std::int32_t Q = in.q[b];
    const std::int32_t* bounds = plan.row_local_bound.data() + row_begin;
    const std::int32_t max_bound = *std::max_element(bounds, bounds + Q);
    std::int64_t first_partial = -1;
    if (n > 1) {
      // Partial rows are indexed with int32. Only this rank's split can exceed it; its workspace
      // (over 4 TiB per head) could not be allocated either, so no group runs such a plan.
      DCPMLA_REQUIRE(plan.num_partial_rows + n * Q <= kMaxPartialRows, ErrorCode::out_of_range,
                     "kv_chunk_blocks",
                     fmt::format("a KV split of at most {} partial rows (splits x Q summed over "
                                 "the split requests; split less or plan fewer rows at once)",
                                 kMaxPartialRows),
                     fmt::format("{} after request {} ({} splits x {} rows)",
                                 plan.num_partial_rows + n * Q, b, n, Q));
      first_partial = plan.num_partial_rows;
      for (std::int32_t j = 0; j < Q; ++j) {
        plan.merges.push_back({row_begin + j, std::int32_t(first_partial + j), std::int32_t(n), Q});
      }
      plan.num_partial_rows += n * Q;
      plan.max_splits = std::max(plan.max_splits, std::int32_t(n));
    }
    for (std::int64_t s = 0; s < n; ++s) {
      const auto begin = std::int32_t(s * chunk);
      const auto end = std::int32_t(std::min(local, (s + 1) * chunk));
      const std::int32_t visible = std::max(begin, std::min(max_bound, end));
      const auto index = std::int64_t(splits.size());
      splits.push_back({rules::order_key(rules::walk_tiles(begin, visible), index), b, begin, end,
                        first_partial < 0 ? -1 : std::int32_t(first_partial + s * Q)});
    }
  }
  // Launch order: the keys alone (each holds its split's index) sort faster than the records.
  std::vector<std::uint64_t> order(splits.size());
  for (std::size_t i = 0; i < splits.size(); ++i) order[i] = splits[i].key;
  std::sort(order.begin(), order.end());

  // decode_workspace_bytes must not wrap around (a backend would under-allocate).
  constexpr std::uint64_t kRowHeadBytes = (kLatentDim + 1) * sizeof(float);
  const auto partial_rows = std::uint64_t(plan.num_partial_rows);
  constexpr std::uint64_t kMaxBytes = std::numeric_limits<std::size_t>::max();
  DCPMLA_REQUIRE(partial_rows == 0 || std::uint64_t(H) <= kMaxBytes / kRowHeadBytes / partial_rows,
                 ErrorCode::out_of_range, "num_heads",
                 fmt::format("a split-KV workspace of partial rows x num_heads x {} bytes that "
                             "fits in size_t ({} partial rows)",
                             kRowHeadBytes, partial_rows),
                 std::to_string(H));

  std::int64_t items = 0;
  for (const Split& s : splits) items += in.tiles[s.request];
  WorkItem* out = sink(plan, items);
  // An item's last row is floor(last pair / H): a multiply, so the items of a split are
  // independent of each other.
  const rules::CeilDivider rows_of(H);
  for (const std::uint64_t key : order) {
    const Split& s = splits[key & 0xffffffffu];
    const std::int32_t q = in.q[s.request];
    const std::int32_t row_begin = batch.query_start_loc[s.request];
    const std::int32_t pairs = q * H;
    const std::int32_t* bounds = plan.row_local_bound.data() + row_begin;
    const std::int32_t kv_begin = s.kv_begin, kv_end = s.kv_end, partial = s.partial_row;
    // in.tiles is ceil(pairs / tile_pairs) (1 without tiles); the items that hold a whole step.
    // In int64: a step near pairs / 2 with pairs near 2^31 puts tiles x step past int32.
    const std::int64_t tiles_of_request = in.tiles[s.request];
    const std::int32_t step = rules::tile_step(pairs, tiles_of_request, tile_pairs);
    const auto full_items =
        std::int32_t(tiles_of_request * step == pairs ? tiles_of_request : tiles_of_request - 1);
    for (std::int32_t t = 0; t < full_items; ++t, ++out) {
      const auto last_row = std::int32_t(rows_of.floor(std::int64_t(t) * step + step - 1));
      *out = {s.request,
              row_begin,
              t * step,
              step,
              kv_begin,
              kv_end,
              rules::clamp_visible(bounds[last_row], kv_begin, kv_end),
              partial};
    }
    const bool tail = full_items * step < pairs;
    if (tail) {
      *out++ = {s.request,
                row_begin,
                full_items * step,
                pairs - full_items * step,
                kv_begin,
                kv_end,
                rules::clamp_visible(bounds[q - 1], kv_begin, kv_end),
                partial};
    }
    (full_items + (tail ? 1 : 0) > 1 ? plan.kv_shared_tokens : plan.kv_alone_tokens) +=
        kv_end - kv_begin;
  }
  return plan;
}

std::size_t decode_workspace_bytes(std::int64_t partial_rows, int num_heads) {
  DCPMLA_REQUIRE(partial_rows >= 0, ErrorCode::invalid_argument, "partial_rows", ">= 0",
                 std::to_string(partial_rows));
  DCPMLA_REQUIRE(num_heads >= 1, ErrorCode::invalid_argument, "num_heads", ">= 1",
                 std::to_string(num_heads));
  const auto bytes = (unsigned __int128)(partial_rows)*std::uint64_t(num_heads) *
                     ((kLatentDim + 1) * sizeof(float));
  DCPMLA_REQUIRE(bytes <= std::numeric_limits<std::size_t>::max(), ErrorCode::out_of_range,
                 "partial_rows", fmt::format("a workspace below 2^64 bytes ({} heads)", num_heads),
                 std::to_string(partial_rows));
  return std::size_t(bytes);
}

}  // namespace dcpmla
