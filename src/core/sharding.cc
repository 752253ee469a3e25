#include "dcpmla/sharding.h"

#include <algorithm>
#include <string>

#include "dcpmla/error.h"

namespace dcpmla {

void Sharding::validate(int block_size) const {
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
  DCPMLA_REQUIRE(rank >= 0 && rank < world, ErrorCode::out_of_range, "rank",
                 "in [0, " + std::to_string(world) + ")", std::to_string(rank));
  DCPMLA_REQUIRE(interleave >= 1, ErrorCode::invalid_argument, "interleave", ">= 1",
                 std::to_string(interleave));
  DCPMLA_REQUIRE(block_size >= 1, ErrorCode::invalid_argument, "block_size", ">= 1",
                 std::to_string(block_size));
  DCPMLA_REQUIRE(block_size % interleave == 0, ErrorCode::invalid_argument, "interleave",
                 "a divisor of block_size " + std::to_string(block_size),
                 std::to_string(interleave));
}

std::int64_t Sharding::local_len_of(int r, std::int64_t L) const {
  const std::int64_t span = std::int64_t(world) * interleave;
  const std::int64_t rem = L % span - std::int64_t(r) * interleave;
  return (L / span) * interleave + std::clamp<std::int64_t>(rem, 0, interleave);
}

std::int64_t Sharding::slot(std::int64_t p, std::span<const std::int32_t> block_table_row,
                            int block_size) const {
  if (owner(p) != rank) return -1;
  const std::int64_t li = local_index(p);
  const std::int64_t block = li / block_size;
  DCPMLA_REQUIRE(block < std::int64_t(block_table_row.size()), ErrorCode::shape_mismatch,
                 "block_table row", "at least " + std::to_string(block + 1) + " blocks",
                 std::to_string(block_table_row.size()));
  const std::int32_t id = block_table_row[block];
  // A missing entry must not become a negative slot, which writers read as "not mine, skip".
  DCPMLA_REQUIRE(id >= 0, ErrorCode::out_of_range,
                 "block_table row [" + std::to_string(block) + "]",
                 "a block id >= 0 for a position this rank owns", std::to_string(id));
  return std::int64_t(id) * block_size + li % block_size;
}

}  // namespace dcpmla
