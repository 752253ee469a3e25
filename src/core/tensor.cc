#include "dcpmla/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "dcpmla/error.h"

namespace dcpmla {

std::int64_t TensorRef::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::size_t TensorRef::bytes() const {
  return std::size_t(numel()) * dtype_size(dtype);
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

void check_tensor(const TensorRef& t, const std::string& argument,
                  std::initializer_list<DType> dtypes, std::initializer_list<std::int64_t> shape) {
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end()) {
    std::vector<std::string> names;
    for (auto d : dtypes) names.emplace_back(to_string(d));
    throw Error(ErrorCode::dtype_mismatch, argument,
                fmt::format("dtype {}", fmt::join(names, " or ")), to_string(t.dtype));
  }
  // Expected shapes come from other arguments' extents, so each extent is checked on its own: a
  // negative one, or a product past 2^62 elements, would wrap numel() and bytes().
  unsigned __int128 elements = 1;
  for (const std::int64_t d : t.shape) {
    DCPMLA_REQUIRE(d >= 0, ErrorCode::shape_mismatch, argument, "non-negative extents",
                   shape_string(t.shape));
    elements = elements * std::uint64_t(d);
    if (elements > (std::uint64_t(1) << 62)) elements = (std::uint64_t(1) << 62) + 1;
  }
  DCPMLA_REQUIRE(elements <= (std::uint64_t(1) << 62), ErrorCode::out_of_range, argument,
                 "at most 2^62 elements", shape_string(t.shape));
  const std::vector<std::int64_t> want(shape);
  DCPMLA_REQUIRE(t.shape == want, ErrorCode::shape_mismatch, argument,
                 "shape " + shape_string(want), shape_string(t.shape));
  DCPMLA_REQUIRE(t.data != nullptr || t.numel() == 0, ErrorCode::invalid_argument, argument,
                 "a non-null buffer", "null");
}

void check_tensor(const TensorRef& t, const std::string& argument, DType dtype,
                  std::initializer_list<std::int64_t> shape) {
  check_tensor(t, argument, {dtype}, shape);
}

}  // namespace dcpmla
