// dcpmla.reference_attend: the library's double-precision reference attention (global
// coordinates: no sharding, no paging, no splitting), for checking any implementation.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <optional>
#include <vector>

#include "arrays.h"
#include "batch_args.h"
#include "bindings.h"
#include "dcpmla/error.h"
#include "dcpmla/testing/reference.h"
#include "dcpmla/types.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dcpmla::python {
namespace {

// The Python wrapper passes float64 C-contiguous arrays (it converts explicitly).
using Float64Array = nb::ndarray<const double, nb::c_contig, nb::device::cpu>;

std::vector<std::int64_t> shape_of(const Float64Array& a) {
  std::vector<std::int64_t> s(a.ndim());
  for (std::size_t i = 0; i < a.ndim(); ++i) s[i] = a.shape(i);
  return s;
}

// q: [rows, H, 576]; kv: one [T_b, 576] array a request, positions 0..T_b-1 in order.
// Returns out [rows, H, 512] and natural-log lse [rows, H] in float64.
nb::tuple reference_attend(Float64Array q, std::vector<Float64Array> kv, nb::handle query_start_loc,
                           nb::handle seq_lens, double softmax_scale,
                           std::optional<std::int64_t> num_tokens, nb::handle mask) {
  testing::ReferenceProblem problem;
  problem.batch = read_batch({query_start_loc, seq_lens, num_tokens, mask, nb::none()});
  const Batch& batch = problem.batch;
  const std::int64_t rows = batch.rows();
  const auto q_shape = shape_of(q);
  DCPMLA_REQUIRE(
      q_shape.size() == 3 && q_shape[0] == rows && q_shape[1] >= 1 && q_shape[2] == kHeadDim,
      ErrorCode::shape_mismatch, "q",
      fmt::format("shape ({}, *, {}) ([num_tokens, heads, 576]; num_tokens = {})", rows, kHeadDim,
                  rows),
      tuple_string(q_shape));
  DCPMLA_REQUIRE(std::isfinite(softmax_scale) && softmax_scale > 0, ErrorCode::invalid_argument,
                 "softmax_scale", "finite and > 0", fmt::format("{}", softmax_scale));
  DCPMLA_REQUIRE(kv.size() == std::size_t(batch.num_requests()), ErrorCode::shape_mismatch, "kv",
                 fmt::format("{} arrays (one per request of seq_lens)", batch.num_requests()),
                 fmt::format("{} arrays", kv.size()));
  for (std::size_t b = 0; b < kv.size(); ++b) {
    const std::vector<std::int64_t> want{batch.total_len[b], kHeadDim};
    DCPMLA_REQUIRE(shape_of(kv[b]) == want, ErrorCode::shape_mismatch, fmt::format("kv[{}]", b),
                   fmt::format("shape {} ([seq_lens[{}], 576])", tuple_string(want), b),
                   tuple_string(shape_of(kv[b])));
  }
  problem.num_heads = int(q_shape[1]);
  problem.softmax_scale = softmax_scale;
  problem.q.assign(q.data(), q.data() + q.size());
  for (const auto& request : kv)
    problem.kv.emplace_back(request.data(), request.data() + request.size());

  testing::ReferenceResult result;
  {
    nb::gil_scoped_release released;
    result = testing::reference_attention(problem);
  }
  const auto H = std::size_t(problem.num_heads);
  return nb::make_tuple(to_numpy(std::move(result.out), {std::size_t(rows), H, kLatentDim}),
                        to_numpy(std::move(result.lse), {std::size_t(rows), H}));
}

}  // namespace

void register_reference(nb::module_& m) {
  m.def("reference_attend", &reference_attend, "q"_a, "kv"_a, "query_start_loc"_a.none(),
        "seq_lens"_a.none(), "softmax_scale"_a, "num_tokens"_a.none(), "mask"_a.none());
}

}  // namespace dcpmla::python
