#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "dcpmla/types.h"

namespace dcpmla {
namespace {

// 64-bit idiv costs tens of cycles here; block sizes and W * I are powers of two in practice.
std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  if ((b & (b - 1)) == 0) return (a + b - 1) >> __builtin_ctzll(std::uint64_t(b));
  return (a + b - 1) / b;
}

// Sharding::local_len (out of line, two 64-bit divisions) with shifts when W * I is a power of 2.
std::int64_t fast_local_len(const Sharding& sh, std::int64_t L) {
  const std::int64_t span = std::int64_t(sh.world) * sh.interleave;
  if ((span & (span - 1)) != 0) return sh.local_len(L);
  const std::int64_t rem = (L & (span - 1)) - std::int64_t(sh.rank) * sh.interleave;
  return (L >> __builtin_ctzll(std::uint64_t(span))) * sh.interleave +
         std::clamp<std::int64_t>(rem, 0, sh.interleave);
}

void validate_config(const PlanConfig& config) {
  require(config.block_size >= 1, ErrorCode::invalid_argument, "block_size", ">= 1",
          std::to_string(config.block_size));
  config.sharding.validate(config.block_size);
  require(config.num_heads >= 1, ErrorCode::invalid_argument, "num_heads", ">= 1",
          std::to_string(config.num_heads));
  require(config.num_blocks >= 1, ErrorCode::invalid_argument, "num_blocks", ">= 1",
          std::to_string(config.num_blocks));
  const auto& lim = config.limits;
  require(lim.kv_chunk_blocks >= 0, ErrorCode::invalid_argument, "limits.kv_chunk_blocks",
          ">= 0 (0 = automatic)", std::to_string(lim.kv_chunk_blocks));
  require(lim.target_work_items >= 0, ErrorCode::invalid_argument, "limits.target_work_items",
          ">= 0 (0 = no split)", std::to_string(lim.target_work_items));
  require(lim.min_chunk_blocks >= 1, ErrorCode::invalid_argument, "limits.min_chunk_blocks", ">= 1",
          std::to_string(lim.min_chunk_blocks));
}

// Checks the blocks rank 0 reads, the most any rank reads (every rank uses a prefix of the same
// row), so every rank of a group accepts or rejects a shared batch alike: a rank that alone
// rejected it would leave its peers waiting in the step's first collective.
void validate_block_table(const Batch& batch, const PlanConfig& config) {
  const std::size_t B = batch.total_len.size();
  const Sharding sh{config.sharding.world, 0, config.sharding.interleave};
  for (std::size_t b = 0; b < B; ++b) {
    const auto local = fast_local_len(sh, batch.total_len[b]);
    const auto needed = ceil_div(local, config.block_size);
    if (needed > batch.max_blocks) {
      require(needed <= batch.max_blocks, ErrorCode::shape_mismatch,
              fmt::format("block_table row {}", b),
              fmt::format(">= {} blocks ({} tokens of T = {} on rank 0, which holds the most)",
                          needed, local, batch.total_len[b]),
              fmt::format("{} columns", batch.max_blocks));
    }
    // A min/max scan (vectorised); the per-id loop below only runs to name a bad id.
    const auto row = batch.block_row(int(b));
    std::int32_t lo = 0, hi = 0;
    for (std::int64_t i = 0; i < needed; ++i) {
      lo = std::min(lo, row[i]);
      hi = std::max(hi, row[i]);
    }
    if (lo >= 0 && hi < config.num_blocks) continue;
    for (std::int64_t i = 0; i < needed; ++i) {
      if (row[i] >= 0 && row[i] < config.num_blocks) continue;
      require(row[i] >= 0 && row[i] < config.num_blocks, ErrorCode::out_of_range,
              fmt::format("block_table[{}][{}]", b, i),
              fmt::format("a block id in [0, {})", config.num_blocks), std::to_string(row[i]));
    }
  }
}

// Chunk size in blocks that cuts the batch's KV into about target_work_items pieces.
std::int64_t choose_chunk_blocks(const PlanLimits& lim, std::int64_t total_blocks) {
  if (lim.kv_chunk_blocks > 0) return lim.kv_chunk_blocks;
  if (lim.target_work_items == 0) return std::numeric_limits<std::int32_t>::max();
  return std::max<std::int64_t>(
      lim.min_chunk_blocks,
      ceil_div(std::max<std::int64_t>(total_blocks, 1), lim.target_work_items));
}

}  // namespace

void validate_batch(const Batch& batch, const PlanConfig& config) {
  validate_config(config);
  validate_layout(batch);
  const auto& chunks = config.limits.request_chunk_blocks;
  require(chunks.empty() || chunks.size() == std::size_t(batch.num_requests()),
          ErrorCode::shape_mismatch, "limits.request_chunk_blocks",
          fmt::format("empty or {} entries (one per request)", batch.num_requests()),
          fmt::format("{} entries", chunks.size()));
  for (std::size_t b = 0; b < chunks.size(); ++b) {
    require(chunks[b] >= 0, ErrorCode::invalid_argument,
            fmt::format("limits.request_chunk_blocks[{}]", b), ">= 0 (0 = the batch-wide chunk)",
            std::to_string(chunks[b]));
  }
  validate_block_table(batch, config);
}

Plan make_plan(const Batch& batch, const PlanConfig& config) {
  validate_batch(batch, config);
  const auto& sh = config.sharding;
  const int B = batch.num_requests();
  const int bs = config.block_size;

  Plan plan;
  plan.config = config;
  plan.num_requests = B;
  plan.num_rows = batch.rows();
  plan.num_real_rows = batch.real_tokens();
  plan.row_request.assign(std::size_t(plan.num_rows), -1);
  plan.row_global_bound.assign(std::size_t(plan.num_rows), 0);
  plan.row_local_bound.assign(std::size_t(plan.num_rows), 0);
  plan.request_local_len.resize(std::size_t(B));

  std::int64_t total_blocks = 0;
  for (int b = 0; b < B; ++b) {
    const int Q = batch.q_len(b);
    const auto T = batch.total_len[b];
    const auto local = fast_local_len(sh, T);
    plan.max_q = std::max(plan.max_q, Q);
    plan.request_local_len[b] = std::int32_t(local);
    plan.max_local_len = std::max(plan.max_local_len, std::int32_t(local));
    total_blocks += ceil_div(local, bs);
    // The visible prefix is local_len of the row's own global bound, never local(T) - offset.
    // Causal bounds of consecutive rows differ by one position, so local_len(bound + 1) is
    // local_len(bound) plus one when this rank owns position `bound`: no division per row.
    const Mask mask = batch.mask_of(b);
    const std::size_t first = std::size_t(batch.query_start_loc[b]);
    std::int64_t bound = row_global_bound(T, Q, 0, mask);
    std::int64_t local_bound = std::min(local, fast_local_len(sh, bound));
    const std::int64_t span = std::int64_t(sh.world) * sh.interleave;
    const std::int64_t own_begin = std::int64_t(sh.rank) * sh.interleave;
    const std::int64_t own_end = own_begin + sh.interleave;
    std::int64_t phase = (span & (span - 1)) == 0 ? (bound & (span - 1)) : bound % span;
    for (int j = 0; j < Q; ++j) {
      plan.row_request[first + j] = b;
      plan.row_global_bound[first + j] = bound;
      plan.row_local_bound[first + j] = std::int32_t(local_bound);
      if (mask == Mask::full) continue;
      local_bound += (phase >= own_begin && phase < own_end) ? 1 : 0;
      ++bound;
      if (++phase == span) phase = 0;
    }
  }
  // SPEC: uniform iff num_tokens == B * max_Q; padding rows count as tokens.
  plan.uniform = plan.num_rows == std::int64_t(B) * plan.max_q;

  const std::int64_t chunk_tokens = choose_chunk_blocks(config.limits, total_blocks) * bs;
  plan.work.reserve(std::size_t(B));
  for (int b = 0; b < B; ++b) {
    const std::int32_t row_begin = batch.query_start_loc[b];
    const std::int32_t Q = batch.q_len(b);
    const std::int64_t local = plan.request_local_len[b];
    const auto& own = config.limits.request_chunk_blocks;
    const std::int64_t chunk = own.empty() || own[std::size_t(b)] == 0
                                   ? chunk_tokens
                                   : std::int64_t(own[std::size_t(b)]) * bs;
    // local < 2^31, and chunk < local when dividing: 32-bit division suffices.
    const std::int64_t splits =
        local <= chunk ? 1 : std::uint32_t(local + chunk - 1) / std::uint32_t(chunk);
    if (splits == 1) {
      plan.work.push_back({b, row_begin, Q, 0, std::int32_t(local), -1});
      continue;
    }
    // Partial rows are indexed with int32 (WorkItem::partial_row, SplitMerge::first_partial_row).
    // Only this rank's split can exceed it; its workspace (over 4 TiB per head) could not be
    // allocated either, so no group runs such a plan.
    constexpr std::int64_t kMaxPartialRows = std::numeric_limits<std::int32_t>::max();
    if (plan.num_partial_rows + splits * Q > kMaxPartialRows) {
      throw Error(ErrorCode::out_of_range, "limits",
                  fmt::format("a KV split of at most {} partial rows (splits x Q summed over the "
                              "split requests; split less or plan fewer rows at once)",
                              kMaxPartialRows),
                  fmt::format("{} after request {} ({} splits x {} rows)",
                              plan.num_partial_rows + splits * Q, b, splits, Q));
    }
    const auto first = std::int32_t(plan.num_partial_rows);
    for (std::int64_t s = 0; s < splits; ++s) {
      const auto begin = s * chunk;
      const auto end = std::min(local, begin + chunk);
      plan.work.push_back(
          {b, row_begin, Q, std::int32_t(begin), std::int32_t(end), std::int32_t(first + s * Q)});
    }
    plan.merges.push_back({b, row_begin, Q, std::int32_t(splits), first});
    plan.num_partial_rows += splits * Q;
  }
  // decode_workspace_bytes must not wrap around (a backend would under-allocate).
  constexpr std::uint64_t kRowHeadBytes = (kLatentDim + 1) * sizeof(float);
  const auto partial = std::uint64_t(plan.num_partial_rows);
  constexpr std::uint64_t kMaxBytes = std::numeric_limits<std::size_t>::max();
  if (partial && std::uint64_t(config.num_heads) > kMaxBytes / kRowHeadBytes / partial) {
    throw Error(ErrorCode::out_of_range, "num_heads",
                fmt::format("a split-KV workspace of partial rows x num_heads x {} bytes that "
                            "fits in size_t ({} partial rows)",
                            kRowHeadBytes, partial),
                std::to_string(config.num_heads));
  }
  return plan;
}

std::size_t decode_workspace_bytes(const Plan& plan) {
  const auto rows = std::size_t(plan.num_partial_rows);
  const auto H = std::size_t(plan.config.num_heads);
  return rows * H * (kLatentDim + 1) * sizeof(float);
}

}  // namespace dcpmla
