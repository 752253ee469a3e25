#include "dcpmla/batch.h"

#include "dcpmla/sharding.h"

namespace dcpmla {

Batch flatten(const Batch& batch) {
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

}  // namespace dcpmla
