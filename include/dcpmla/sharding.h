// How the KV cache of every request is spread over the W ranks of a DCP group (SPEC section 2).
#pragma once

#include <cstdint>
#include <span>

namespace dcpmla {

// Token at global position p lives on rank floor(p / I) mod W, at a dense, order-preserving
// local index. All functions are pure; validate() checks the invariants once.
struct Sharding {
  int world = 1;       // W >= 1
  int rank = 0;        // 0 <= rank < W
  int interleave = 1;  // I >= 1, divides the block size

  // Throws Error naming world / rank / interleave / block_size when inconsistent.
  void validate(int block_size) const;

  int owner(std::int64_t p) const { return int((p / interleave) % world); }
  std::int64_t local_index(std::int64_t p) const {
    return (p / (std::int64_t(world) * interleave)) * interleave + p % interleave;
  }
  // Number of positions < L owned by rank r.
  std::int64_t local_len_of(int r, std::int64_t L) const;
  std::int64_t local_len(std::int64_t L) const { return local_len_of(rank, L); }

  // Cache slot of global position p on this rank, or -1 when another rank owns p.
  // block_table_row maps local block index -> physical block id (shared by all ranks).
  std::int64_t slot(std::int64_t p, std::span<const std::int32_t> block_table_row,
                    int block_size) const;
};

}  // namespace dcpmla
