#include "dcpmla/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>

#include "dcpmla/error.h"
#include "dcpmla/sharding.h"

namespace dcpmla {

void validate_layout(const Batch& batch) {
  const auto& qsl = batch.query_start_loc;
  const std::size_t B = batch.total_len.size();
  DCPMLA_REQUIRE(qsl.size() == B + 1, ErrorCode::shape_mismatch, "query_start_loc",
                 fmt::format("{} entries (total_len describes {} requests)", B + 1, B),
                 std::to_string(qsl.size()));
  DCPMLA_REQUIRE(qsl[0] == 0, ErrorCode::inconsistent, "query_start_loc[0]", "0",
                 std::to_string(qsl[0]));
  for (std::size_t b = 0; b < B; ++b) {
    // Error text is built only for a failing entry: these loops run over every request.
    if (qsl[b + 1] > qsl[b]) continue;
    DCPMLA_REQUIRE(qsl[b + 1] > qsl[b], ErrorCode::inconsistent,
                   fmt::format("query_start_loc[{}]", b + 1),
                   fmt::format("> query_start_loc[{}] = {} (every request has Q >= 1)", b, qsl[b]),
                   std::to_string(qsl[b + 1]));
  }
  DCPMLA_REQUIRE(batch.mask.empty() || batch.mask.size() == B, ErrorCode::shape_mismatch, "mask",
                 fmt::format("0 or {} entries", B), std::to_string(batch.mask.size()));
  DCPMLA_REQUIRE(batch.num_tokens == -1 || batch.num_tokens >= batch.real_tokens(),
                 ErrorCode::inconsistent, "num_tokens",
                 fmt::format("-1 or >= query_start_loc[B] = {}", batch.real_tokens()),
                 std::to_string(batch.num_tokens));
  constexpr std::int64_t kMaxLen = std::numeric_limits<std::int32_t>::max();
  // Rows are indexed with int32, as query_start_loc holds them.
  DCPMLA_REQUIRE(batch.num_tokens <= kMaxLen, ErrorCode::out_of_range, "num_tokens",
                 fmt::format("<= {}", kMaxLen), std::to_string(batch.num_tokens));
  for (std::size_t b = 0; b < B; ++b) {
    const int Q = batch.q_len(int(b));
    const auto T = batch.total_len[b];
    if (T >= Q && T <= kMaxLen) continue;
    DCPMLA_REQUIRE(T >= Q, ErrorCode::inconsistent, fmt::format("total_len[{}]", b),
                   fmt::format(">= its {} query tokens (T includes them)", Q), std::to_string(T));
    DCPMLA_REQUIRE(T <= kMaxLen, ErrorCode::out_of_range, fmt::format("total_len[{}]", b),
                   fmt::format("<= {}", kMaxLen), std::to_string(T));
  }
  DCPMLA_REQUIRE(batch.max_blocks >= 0, ErrorCode::invalid_argument, "max_blocks", ">= 0",
                 std::to_string(batch.max_blocks));
  DCPMLA_REQUIRE(
      batch.block_table.size() == B * std::size_t(batch.max_blocks), ErrorCode::shape_mismatch,
      "block_table",
      fmt::format("{} x {} = {} entries", B, batch.max_blocks, B * std::size_t(batch.max_blocks)),
      std::to_string(batch.block_table.size()));
}

Batch flatten(const Batch& batch) {
  validate_layout(batch);
  Batch flat;
  const auto rows = batch.real_tokens();
  flat.query_start_loc.resize(std::size_t(rows) + 1);
  flat.total_len.resize(std::size_t(rows));
  flat.mask.assign(std::size_t(rows), Mask::causal);
  flat.max_blocks = batch.max_blocks;
  flat.block_table.resize(std::size_t(rows) * batch.max_blocks);
  flat.num_tokens = batch.num_tokens;
  for (int b = 0; b < batch.num_requests(); ++b) {
    const int Q = batch.q_len(b);
    const auto row = batch.block_row(b);
    for (int j = 0; j < Q; ++j) {
      const std::size_t i = std::size_t(batch.query_start_loc[b]) + j;
      flat.query_start_loc[i + 1] = std::int32_t(i + 1);
      flat.total_len[i] = row_global_bound(batch.total_len[b], Q, j, batch.mask_of(b));
      std::copy(row.begin(), row.end(), flat.block_table.begin() + i * batch.max_blocks);
    }
  }
  return flat;
}

std::vector<std::int64_t> step_slot_mapping(const Batch& batch, const Sharding& sharding,
                                            int block_size) {
  validate_layout(batch);
  sharding.validate(block_size);
  std::vector<std::int64_t> slots(std::size_t(batch.rows()), -1);
  for (int b = 0; b < batch.num_requests(); ++b) {
    const int Q = batch.q_len(b);
    for (int j = 0; j < Q; ++j) {
      const std::int64_t p = batch.total_len[b] - Q + j;
      slots[std::size_t(batch.query_start_loc[b]) + j] =
          sharding.slot(p, batch.block_row(b), block_size);
    }
  }
  return slots;
}

std::vector<std::int32_t> row_requests(const Batch& batch) {
  validate_layout(batch);
  std::vector<std::int32_t> r(std::size_t(batch.rows()), -1);
  for (int b = 0; b < batch.num_requests(); ++b) {
    for (int j = 0; j < batch.q_len(b); ++j) r[std::size_t(batch.query_start_loc[b] + j)] = b;
  }
  return r;
}

std::vector<std::int64_t> row_global_bounds(const Batch& batch) {
  validate_layout(batch);
  std::vector<std::int64_t> r(std::size_t(batch.rows()), 0);
  for (int b = 0; b < batch.num_requests(); ++b) {
    const int Q = batch.q_len(b);
    for (int j = 0; j < Q; ++j) {
      r[std::size_t(batch.query_start_loc[b] + j)] =
          row_global_bound(batch.total_len[std::size_t(b)], Q, j, batch.mask_of(b));
    }
  }
  return r;
}

bool is_uniform(const Batch& batch) {
  validate_layout(batch);
  int max_q = 0;
  for (int b = 0; b < batch.num_requests(); ++b) max_q = std::max(max_q, batch.q_len(b));
  return batch.rows() == std::int64_t(batch.num_requests()) * max_q;
}

}  // namespace dcpmla
