#include "batch_args.h"

#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include <limits>
#include <string>

#include "arrays.h"
#include "dcpmla/error.h"
#include "errors.h"

namespace nb = nanobind;

namespace dcpmla::python {
namespace {

std::vector<Mask> read_masks(nb::handle mask, std::size_t B) {
  if (mask.is_none()) return {};
  if (nb::isinstance<nb::str>(mask)) {
    return std::vector<Mask>(B, parse_mask(nb::cast<std::string>(mask), "mask"));
  }
  DCPMLA_REQUIRE(nb::isinstance<nb::sequence>(mask), ErrorCode::dtype_mismatch, "mask",
                 "None, 'causal', 'full' or a sequence of them (one per request)",
                 python_type_name(mask));
  const std::size_t n = nb::len(mask);
  DCPMLA_REQUIRE(n == B, ErrorCode::shape_mismatch, "mask",
                 fmt::format("{} entries (one per request of seq_lens)", B),
                 fmt::format("{} entries", n));
  std::vector<Mask> masks;
  for (std::size_t b = 0; b < B; ++b) {
    const nb::object m = mask[b];
    const std::string name = fmt::format("mask[{}]", b);
    DCPMLA_REQUIRE(nb::isinstance<nb::str>(m), ErrorCode::dtype_mismatch, name,
                   "'causal' or 'full'", python_type_name(m));
    masks.push_back(parse_mask(nb::cast<std::string>(m), name));
  }
  return masks;
}

}  // namespace

Batch read_batch(const BatchInputs& in) {
  constexpr std::int64_t kMaxLen = std::numeric_limits<std::int32_t>::max();
  const auto lens = int_values(in.seq_lens, "seq_lens", {-1}, "[B]: one global length a request");
  const std::size_t B = lens.size();
  const auto starts = int_values(in.query_start_loc, "query_start_loc", {std::int64_t(B) + 1},
                                 fmt::format("[B + 1]; B = {} requests from seq_lens", B));
  DCPMLA_REQUIRE(starts[0] == 0, ErrorCode::inconsistent, "query_start_loc[0]", "0",
                 std::to_string(starts[0]));
  Batch batch;
  batch.query_start_loc.push_back(0);
  for (std::size_t b = 0; b < B; ++b) {
    DCPMLA_REQUIRE(
        starts[b + 1] > starts[b] && starts[b + 1] <= kMaxLen, ErrorCode::inconsistent,
        fmt::format("query_start_loc[{}]", b + 1),
        fmt::format("> query_start_loc[{}] = {} (every request has Q >= 1 tokens)", b, starts[b]),
        std::to_string(starts[b + 1]));
    batch.query_start_loc.push_back(std::int32_t(starts[b + 1]));
    const std::int64_t Q = starts[b + 1] - starts[b];
    DCPMLA_REQUIRE(lens[b] >= Q, ErrorCode::inconsistent, fmt::format("seq_lens[{}]", b),
                   fmt::format(">= its Q = {} query tokens (the global length includes them)", Q),
                   std::to_string(lens[b]));
    DCPMLA_REQUIRE(lens[b] <= kMaxLen, ErrorCode::out_of_range, fmt::format("seq_lens[{}]", b),
                   fmt::format("<= {}", kMaxLen), std::to_string(lens[b]));
  }
  batch.total_len = lens;
  batch.mask = read_masks(in.mask, B);
  if (in.num_tokens) {
    DCPMLA_REQUIRE(
        *in.num_tokens >= batch.real_tokens() && *in.num_tokens <= kMaxLen,
        ErrorCode::invalid_argument, "num_tokens",
        fmt::format("None or in [query_start_loc[-1] = {}, {}] (real tokens + padding rows)",
                    batch.real_tokens(), kMaxLen),
        std::to_string(*in.num_tokens));
    batch.num_tokens = *in.num_tokens;
  }
  if (!in.block_table.is_none()) {
    const Array table =
        array_arg(in.block_table, "block_table", {DType::i32}, {std::int64_t(B), -1},
                  fmt::format("[B, max_blocks]; B = {} from seq_lens", B));
    DCPMLA_REQUIRE(table.tensor.shape[1] <= kMaxLen, ErrorCode::out_of_range, "block_table",
                   fmt::format("at most {} columns", kMaxLen),
                   std::to_string(table.tensor.shape[1]));
    batch.max_blocks = std::int32_t(table.tensor.shape[1]);
    const auto* ids = table.tensor.as<const std::int32_t>();
    batch.block_table.assign(ids, ids + table.tensor.numel());
  }
  with_python_names({{"total_len", "seq_lens"}, {"max_blocks", "block_table"}},
                    [&] { validate_layout(batch); });
  return batch;
}

}  // namespace dcpmla::python
