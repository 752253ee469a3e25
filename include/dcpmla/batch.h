// One decode step's batch, described explicitly: request boundaries are never inferred from shapes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dcpmla/types.h"

namespace dcpmla {

// Request b owns query rows [query_start_loc[b], query_start_loc[b+1]): its Q_b = 1 + drafts
// tokens. total_len[b] = T_b is its global length including those Q_b tokens (their KV is
// written before attention runs). Rows past query_start_loc[B] up to num_tokens are padding
// (CUDA-graph capture sizes): they belong to no request and produce O = 0, LSE = -inf.
struct Batch {
  std::vector<std::int32_t> query_start_loc;  // [B + 1], starts at 0, non-decreasing
  std::vector<std::int64_t> total_len;        // [B], T_b >= Q_b
  std::vector<Mask> mask;                     // [B], or empty for all causal
  std::vector<std::int32_t> block_table;      // [B, max_blocks] row-major physical block ids
  std::int32_t max_blocks = 0;                // columns of block_table
  std::int64_t num_tokens = -1;               // query rows incl. padding; -1 = no padding

  int num_requests() const { return int(total_len.size()); }
  std::int64_t real_tokens() const { return query_start_loc.empty() ? 0 : query_start_loc.back(); }
  std::int64_t rows() const { return num_tokens < 0 ? real_tokens() : num_tokens; }
  int q_len(int b) const { return query_start_loc[b + 1] - query_start_loc[b]; }
  Mask mask_of(int b) const { return mask.empty() ? Mask::causal : mask[b]; }
  std::span<const std::int32_t> block_row(int b) const {
    return {block_table.data() + std::size_t(b) * max_blocks, std::size_t(max_blocks)};
  }
};

// Checks that the batch describes itself consistently (query_start_loc, total_len, mask,
// num_tokens and block_table sizes); throws Error naming the first bad argument.
void validate_layout(const Batch& batch);

// Exclusive global bound of query row j of request b: T - (Q - 1 - j) (causal) or T (full).
inline std::int64_t row_global_bound(std::int64_t T, int Q, int j, Mask mask) {
  return mask == Mask::full ? T : T - (Q - 1 - j);
}

// Per query row (incl. padding): its request (-1 for padding) and its exclusive global bound
// (0 for padding). SPEC section 3's definitions, for tests and tools; planners compute the local
// bounds directly.
std::vector<std::int32_t> row_requests(const Batch& batch);
std::vector<std::int64_t> row_global_bounds(const Batch& batch);
// SPEC: uniform iff num_tokens == B * max_Q (padding rows count as tokens).
bool is_uniform(const Batch& batch);

// The single-token-row view a one-query-per-item kernel needs: every real row becomes a request
// with Q = 1, T = its own bound, and a copy of its request's block table row. Padding is kept.
Batch flatten(const Batch& batch);

// Slots of this step's new tokens (the query rows) on this rank: [rows], -1 for tokens another
// rank owns and for padding rows. Row j of request b is global position T_b - Q_b + j.
std::vector<std::int64_t> step_slot_mapping(const Batch& batch, const struct Sharding& sharding,
                                            int block_size);

}  // namespace dcpmla
