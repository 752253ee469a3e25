#include "grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "dcpmla/sharding.h"

namespace dcpmla::bench {

std::string Shape::name() const {
  return fmt::format("T={} H={} Q={} B={}", context, heads, q_label(), batch);
}

std::vector<int> default_batches(std::int64_t context) {
  if (context <= 8192) return {1, 16, 64};
  if (context <= 32768) return {1, 32};
  return {1, 8};
}

std::vector<Shape> make_grid(const GridOptions& o) {
  std::vector<Shape> grid;
  for (std::int64_t context : o.contexts) {
    const std::vector<int> batches = o.batches.empty() ? default_batches(context) : o.batches;
    for (int batch : batches) {
      for (int heads : o.heads) {
        for (bool ragged : {false, true}) grid.push_back({context, heads, ragged, batch});
      }
    }
  }
  return grid;
}

ShapeBatch make_batch(const Shape& shape, int world, int block_size) {
  ShapeBatch out;
  Batch& b = out.batch;
  std::mt19937_64 rng(std::uint64_t(shape.batch) * 7919 + std::uint64_t(shape.context));
  b.query_start_loc.push_back(0);
  for (int r = 0; r < shape.batch; ++r) {
    const int q = shape.ragged ? 1 + int(rng() % 8) : 1;
    b.query_start_loc.push_back(b.query_start_loc.back() + q);
    b.total_len.push_back(shape.context);
    out.flops += 2176.0 * shape.heads * q * double(shape.context);
  }
  const Sharding rank0{world, 0, 1};
  const std::int64_t per_request = (rank0.local_len(shape.context) + block_size - 1) / block_size;
  b.max_blocks = std::int32_t(per_request);
  out.num_blocks = per_request * shape.batch;
  b.block_table.resize(std::size_t(out.num_blocks));
  std::iota(b.block_table.begin(), b.block_table.end(), 0);
  std::shuffle(b.block_table.begin(), b.block_table.end(), rng);
  return out;
}

}  // namespace dcpmla::bench
