// The sharding helpers of the Python package: local lengths, slot mapping, per-row positions and
// bounds, all computed by the library's Sharding and batch functions (SPEC sections 2 and 3).
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <optional>
#include <string>

#include "arrays.h"
#include "batch_args.h"
#include "bindings.h"
#include "dcpmla/error.h"
#include "dcpmla/sharding.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dcpmla::python {
namespace {

// world / rank / interleave as the helpers name them; interleave divides any block size here.
Sharding sharding_of(int world, int rank, int interleave) {
  const Sharding sh{world, rank, interleave};
  sh.validate(interleave >= 1 ? interleave : 1);
  return sh;
}

// [B] for one rank, or [B, world] (every rank) when rank is None; seq_lens' integer dtype.
nb::object local_seq_lens(nb::handle seq_lens, int world, std::optional<int> rank, int interleave) {
  const Array lens_array = array_arg(seq_lens, "seq_lens", {DType::i32, DType::i64}, {-1}, "[B]");
  const auto lens = int64_values(lens_array);
  const Sharding sh = sharding_of(world, rank.value_or(0), interleave);
  const std::size_t B = lens.size(), ranks = rank ? 1 : std::size_t(world);
  for (std::size_t b = 0; b < B; ++b) {
    DCPMLA_REQUIRE(lens[b] >= 0, ErrorCode::invalid_argument, fmt::format("seq_lens[{}]", b),
                   ">= 0", std::to_string(lens[b]));
  }
  std::vector<std::int64_t> local(B * ranks);
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t r = 0; r < ranks; ++r) {
      local[b * ranks + r] = sh.local_len_of(rank ? *rank : int(r), lens[b]);
    }
  }
  const bool per_rank = !rank;
  if (lens_array.tensor.dtype == DType::i64) {
    return per_rank ? nb::cast(to_numpy(std::move(local), {B, ranks}))
                    : nb::cast(to_numpy(std::move(local), {B}));
  }
  std::vector<std::int32_t> narrow(local.begin(), local.end());
  return per_rank ? nb::cast(to_numpy(std::move(narrow), {B, ranks}))
                  : nb::cast(to_numpy(std::move(narrow), {B}));
}

// Cache slots of tokens (req_indices[i], positions[i]) on `rank`: -1 where another rank owns the
// position or req_indices[i] is -1 (a padding row).
nb::object slot_mapping(nb::handle block_table, nb::handle req_indices, nb::handle positions,
                        int block_size, int world, int rank, int interleave) {
  DCPMLA_REQUIRE(block_size >= 1, ErrorCode::invalid_argument, "block_size", ">= 1",
                 std::to_string(block_size));
  const Sharding sh{world, rank, interleave};
  sh.validate(block_size);
  const Array table =
      array_arg(block_table, "block_table", {DType::i32}, {-1, -1}, "[B, max_blocks]");
  const auto requests = int_values(req_indices, "req_indices", {-1}, "[num_tokens]");
  const auto n = std::int64_t(requests.size());
  const auto pos = int_values(positions, "positions", {n}, "[num_tokens], as req_indices");
  const std::int64_t B = table.tensor.shape[0], columns = table.tensor.shape[1];
  const auto* ids = table.tensor.as<const std::int32_t>();
  std::vector<std::int64_t> slots(static_cast<std::size_t>(n), -1);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto b = requests[std::size_t(i)];
    if (b == -1) continue;
    DCPMLA_REQUIRE(b >= 0 && b < B, ErrorCode::out_of_range, fmt::format("req_indices[{}]", i),
                   fmt::format("-1 (padding) or a request in [0, {}) (block_table rows)", B),
                   std::to_string(b));
    const auto p = pos[std::size_t(i)];
    DCPMLA_REQUIRE(p >= 0, ErrorCode::invalid_argument, fmt::format("positions[{}]", i), ">= 0",
                   std::to_string(p));
    try {
      slots[std::size_t(i)] = sh.slot(p, {ids + b * columns, std::size_t(columns)}, block_size);
    } catch (const Error& e) {
      // The library names "block_table row" or "block_table row [k]": name the row read.
      const std::string column = e.argument().substr(std::string("block_table row").size());
      throw Error(e.code(),
                  fmt::format("block_table[{}]{}", b, column.empty() ? "" : column.substr(1)),
                  e.expected(), fmt::format("{} (position {} of token {})", e.actual(), p, i));
    }
  }
  return nb::cast(to_numpy(std::move(slots), {std::size_t(n)}));
}

// Per query row: request (-1 for padding), global position (-1), global bound (0) and this rank's
// local bound local_len(rank, global bound) (0).
nb::tuple rows(nb::handle query_start_loc, nb::handle seq_lens,
               std::optional<std::int64_t> num_tokens, nb::handle mask, int world, int rank,
               int interleave) {
  const Sharding sh = sharding_of(world, rank, interleave);
  const Batch batch =
      read_batch({query_start_loc, seq_lens, num_tokens, mask, /*block_table=*/nb::none()});
  const auto n = std::size_t(batch.rows());
  std::vector<std::int32_t> request(n, -1);
  std::vector<std::int64_t> position(n, -1), global_bound(n, 0), local_bound(n, 0);
  for (int b = 0; b < batch.num_requests(); ++b) {
    const int Q = batch.q_len(b);
    const auto T = batch.total_len[std::size_t(b)];
    for (int j = 0; j < Q; ++j) {
      const std::size_t i = std::size_t(batch.query_start_loc[std::size_t(b)]) + std::size_t(j);
      request[i] = b;
      position[i] = T - Q + j;
      global_bound[i] = row_global_bound(T, Q, j, batch.mask_of(b));
      local_bound[i] = sh.local_len(global_bound[i]);
    }
  }
  return nb::make_tuple(to_numpy(std::move(request), {n}), to_numpy(std::move(position), {n}),
                        to_numpy(std::move(global_bound), {n}),
                        to_numpy(std::move(local_bound), {n}));
}

}  // namespace

void register_sharding(nb::module_& m) {
  m.def("local_seq_lens", &local_seq_lens, "seq_lens"_a.none(), "world"_a, "rank"_a.none(),
        "interleave"_a);
  m.def("slot_mapping", &slot_mapping, "block_table"_a.none(), "req_indices"_a.none(),
        "positions"_a.none(), "block_size"_a, "world"_a, "rank"_a, "interleave"_a);
  m.def("rows", &rows, "query_start_loc"_a.none(), "seq_lens"_a.none(), "num_tokens"_a.none(),
        "mask"_a.none(), "world"_a, "rank"_a, "interleave"_a);
}

}  // namespace dcpmla::python
