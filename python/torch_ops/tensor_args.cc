#include "tensor_args.h"

#include <fmt/format.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <optional>

#include "dcpmla/error.h"

namespace dcpmla::torch_ops {
namespace {

using torch::headeronly::ScalarType;

// The library's dtype of a torch dtype.
std::optional<DType> library_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return DType::f32;
    case ScalarType::BFloat16:
      return DType::bf16;
    case ScalarType::Float8_e4m3fn:
      return DType::fp8_e4m3;
    case ScalarType::Int:
      return DType::i32;
    case ScalarType::Long:
      return DType::i64;
    default:
      return std::nullopt;
  }
}

const char* torch_name(DType t) {
  switch (t) {
    case DType::f32:
      return "torch.float32";
    case DType::bf16:
      return "torch.bfloat16";
    case DType::fp8_e4m3:
      return "torch.float8_e4m3fn";
    case DType::i32:
      return "torch.int32";
    case DType::i64:
      return "torch.int64";
  }
  return "?";
}

// The name Python spells a torch dtype with (c10's own names are Float, Long, Half, ...).
std::string torch_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return "torch.float32";
    case ScalarType::Double:
      return "torch.float64";
    case ScalarType::Half:
      return "torch.float16";
    case ScalarType::BFloat16:
      return "torch.bfloat16";
    case ScalarType::Float8_e4m3fn:
      return "torch.float8_e4m3fn";
    case ScalarType::Float8_e5m2:
      return "torch.float8_e5m2";
    case ScalarType::Byte:
      return "torch.uint8";
    case ScalarType::Char:
      return "torch.int8";
    case ScalarType::Short:
      return "torch.int16";
    case ScalarType::Int:
      return "torch.int32";
    case ScalarType::Long:
      return "torch.int64";
    case ScalarType::Bool:
      return "torch.bool";
    case ScalarType::ComplexFloat:
      return "torch.complex64";
    case ScalarType::ComplexDouble:
      return "torch.complex128";
    default:
      return fmt::format("torch {}", torch::headeronly::toString(t));
  }
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += i ? ", " : "";
    s += shape[i] < 0 ? "*" : std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::vector<std::int64_t> sizes_of(const Tensor& t) {
  const auto sizes = t.sizes();
  return {sizes.begin(), sizes.end()};
}

void require_defined(const Tensor& t, const std::string& name) {
  DCPMLA_REQUIRE(t.defined(), ErrorCode::invalid_argument, name, "a tensor", "an undefined tensor");
}

// Row-major contiguity (strides of extent-1 dimensions, and of an empty tensor, do not matter).
bool row_major(const Tensor& t) {
  if (t.numel() == 0) return true;
  std::int64_t expected = 1;
  for (std::int64_t d = t.dim() - 1; d >= 0; --d) {
    const std::int64_t n = t.size(d);
    if (n != 1 && t.stride(d) != expected) return false;
    expected *= n;
  }
  return true;
}

void check_layout(const Tensor& t, const std::string& name, std::size_t alignment, Place place) {
  DCPMLA_REQUIRE(row_major(t), ErrorCode::invalid_argument, name,
                 "a contiguous tensor (row-major strides; the library reads it in place)",
                 fmt::format("strides {}", shape_text({t.strides().begin(), t.strides().end()})));
  const auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  DCPMLA_REQUIRE(t.numel() == 0 || address % alignment == 0, ErrorCode::invalid_argument, name,
                 fmt::format("data aligned to {} bytes", alignment),
                 fmt::format("address {:#x} (storage offset {})", address, t.storage_offset()));
  const Place p = place_of(t, name);
  DCPMLA_REQUIRE(p == place, ErrorCode::invalid_argument, name,
                 fmt::format("a tensor on {}", describe(place)),
                 fmt::format("a tensor on {}", describe(p)));
}

}  // namespace

Place place_of(const Tensor& t, const std::string& name) {
  require_defined(t, name);
  if (t.is_cpu()) return {-1};
  DCPMLA_REQUIRE(t.is_cuda(), ErrorCode::invalid_argument, name, "a CPU or CUDA tensor",
                 "a tensor on another device");
  return {int(t.get_device_index())};
}

std::string describe(Place p) {
  return p.cuda() ? fmt::format("cuda:{}", p.device) : "cpu";
}

namespace {

// tensor_arg; byte_buffer: a torch.uint8 tensor is taken as raw bytes (the schedule's and the
// workspace's memory, typed fp8_e4m3 for its size), which no other argument is.
TensorRef checked_tensor(const Tensor& t, const std::string& name,
                         std::initializer_list<DType> dtypes,
                         const std::vector<std::int64_t>& shape, std::string_view layout,
                         Place place, std::size_t alignment, bool byte_buffer) {
  require_defined(t, name);
  const ScalarType st = t.scalar_type();
  const std::optional<DType> dtype =
      byte_buffer && st == ScalarType::Byte ? DType::fp8_e4m3 : library_dtype(st);
  if (!dtype || std::find(dtypes.begin(), dtypes.end(), *dtype) == dtypes.end()) {
    std::string want;
    for (DType d : dtypes) {
      const std::string n = torch_name(d);
      if (want.find(n) == std::string::npos) want += (want.empty() ? "" : " or ") + n;
    }
    throw Error(ErrorCode::dtype_mismatch, name, fmt::format("dtype {}", want), torch_name(st));
  }
  const std::vector<std::int64_t> sizes = sizes_of(t);
  bool shape_ok = sizes.size() == shape.size();
  for (std::size_t i = 0; shape_ok && i < shape.size(); ++i) {
    shape_ok = shape[i] < 0 || shape[i] == sizes[i];
  }
  DCPMLA_REQUIRE(shape_ok, ErrorCode::shape_mismatch, name,
                 fmt::format("shape {} {}", shape_text(shape), layout), shape_text(sizes));
  check_layout(t, name, alignment ? alignment : t.element_size(), place);
  return TensorRef(t.data_ptr(), *dtype, sizes);
}

}  // namespace

TensorRef tensor_arg(const Tensor& t, const std::string& name, std::initializer_list<DType> dtypes,
                     const std::vector<std::int64_t>& shape, std::string_view layout, Place place,
                     std::size_t alignment) {
  return checked_tensor(t, name, dtypes, shape, layout, place, alignment, false);
}

TensorRef bytes_arg(const Tensor& t, const std::string& name, Place place, std::size_t alignment) {
  require_defined(t, name);
  DCPMLA_REQUIRE(t.scalar_type() == ScalarType::Byte, ErrorCode::dtype_mismatch, name,
                 "dtype torch.uint8 (a byte buffer)", torch_name(t.scalar_type()));
  return checked_tensor(t, name, {DType::fp8_e4m3}, {-1}, "[bytes]", place, alignment, true);
}

void require_disjoint(const TensorRef& first, const std::string& first_name,
                      const TensorRef& second, const std::string& second_name) {
  const auto* a = static_cast<const std::byte*>(first.data);
  const auto* b = static_cast<const std::byte*>(second.data);
  const std::size_t na = first.bytes(), nb = second.bytes();
  const bool overlap = na && nb && a < b + nb && b < a + na;
  DCPMLA_REQUIRE(!overlap, ErrorCode::invalid_argument, second_name,
                 fmt::format("memory disjoint from {}", first_name),
                 fmt::format("a tensor overlapping {}", first_name));
}

}  // namespace dcpmla::torch_ops
