#include "arrays.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "dcpmla/error.h"

namespace nb = nanobind;

namespace dcpmla::python {
namespace {

// numpy.ndarray, or None where numpy cannot be imported (DLPack arrays still work then). Never
// released: a static Python reference must not be dropped after the interpreter has finalized.
nb::handle numpy_array_type() {
  static const nb::handle type = []() -> nb::handle {
    try {
      nb::object ndarray = nb::module_::import_("numpy").attr("ndarray");
      return ndarray.release();
    } catch (const nb::python_error&) {
      return nb::none().release();
    }
  }();
  return type;
}

bool is_numpy_array(nb::handle object) {
  const nb::handle type = numpy_array_type();
  return !type.is_none() && PyObject_IsInstance(object.ptr(), type.ptr()) == 1;
}

// The element types DLPack has no code for in numpy's export: ml_dtypes' bfloat16 and
// float8_e4m3fn arrays are read as their raw bits (a view, not a copy).
struct MlDtype {
  const char* name;
  const char* bits_dtype;
  DType dtype;
};
constexpr MlDtype kMlDtypes[] = {{"bfloat16", "uint16", DType::bf16},
                                 {"float8_e4m3fn", "uint8", DType::fp8_e4m3}};

std::optional<DType> dtype_of(nb::dlpack::dtype dt) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return std::nullopt;
  const auto code = Code(dt.code);
  if (code == Code::Float && dt.bits == 32) return DType::f32;
  if (code == Code::Bfloat && dt.bits == 16) return DType::bf16;
  if (code == Code::Float8_E4M3FN && dt.bits == 8) return DType::fp8_e4m3;
  if (code == Code::Int && dt.bits == 32) return DType::i32;
  if (code == Code::Int && dt.bits == 64) return DType::i64;
  return std::nullopt;
}

std::string dlpack_name(nb::dlpack::dtype dt) {
  using Code = nb::dlpack::dtype_code;
  const char* kind = nullptr;
  switch (Code(dt.code)) {
    case Code::Int:
      kind = "int";
      break;
    case Code::UInt:
      kind = "uint";
      break;
    case Code::Float:
      kind = "float";
      break;
    case Code::Bfloat:
      kind = "bfloat";
      break;
    case Code::Complex:
      kind = "complex";
      break;
    case Code::Bool:
      kind = "bool";
      break;
    default:
      return fmt::format("DLPack dtype code {} of {} bits", int(dt.code), int(dt.bits));
  }
  return fmt::format("{}{}", kind, int(dt.bits));
}

std::string dtypes_string(std::initializer_list<DType> dtypes) {
  std::vector<std::string> names;
  for (DType t : dtypes) names.emplace_back(numpy_name(t));
  return fmt::format("{}", fmt::join(names, " or "));
}

}  // namespace

std::string python_type_name(nb::handle object) {
  return nb::cast<std::string>(nb::type_name(object.type()));
}

const char* numpy_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::fp8_e4m3:
      return "float8_e4m3fn";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
  }
  return "?";
}

std::string tuple_string(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> dims;
  for (auto d : shape) dims.push_back(d < 0 ? "*" : std::to_string(d));
  if (dims.size() == 1) return fmt::format("({},)", dims[0]);
  return fmt::format("({})", fmt::join(dims, ", "));
}

namespace {

// An array imported without a copy, before any check of its dtype, shape or layout.
struct Imported {
  nb::object source;  // the object imported: `object`, or a raw-bits view of an ml_dtypes array
  nb::ndarray<nb::ro> view;
  std::optional<DType> dtype;  // none: a dtype the library has no name for
  std::string dtype_name;      // as numpy names it
  std::vector<std::int64_t> shape;
};

Imported import_array(nb::handle object, const std::string& name, const std::string& wanted) {
  Imported a{nb::borrow(object), {}, std::nullopt, {}, {}};
  const bool numpy = is_numpy_array(object);
  if (numpy) {
    const nb::object dtype = object.attr("dtype");
    a.dtype_name = nb::cast<std::string>(dtype.attr("name"));
    // numpy names a byte-swapped dtype as the native one (">i4" is "int32" too).
    if (!nb::cast<bool>(dtype.attr("isnative"))) {
      a.dtype_name +=
          fmt::format(" of non-native byte order ('{}')", nb::cast<std::string>(dtype.attr("str")));
    }
    for (const MlDtype& ml : kMlDtypes) {
      if (a.dtype_name == ml.name) {
        a.source = object.attr("view")(ml.bits_dtype);
        a.dtype = ml.dtype;
      }
    }
  }
  // A torch view with a pending negation or conjugation exports its storage without it (torch's
  // own __dlpack__ refuses such views; the fallback nanobind takes does not).
  if (nb::hasattr(object, "is_neg") && nb::hasattr(object, "is_conj")) {
    for (const char* lazy : {"is_neg", "is_conj"}) {
      DCPMLA_REQUIRE(!nb::cast<bool>(object.attr(lazy)()), ErrorCode::invalid_argument, name,
                     "a tensor without a pending negation or conjugation (resolve_neg(), "
                     "resolve_conj())",
                     fmt::format("a tensor whose {}() is True", lazy));
    }
  }
  if (!nb::try_cast(a.source, a.view, /*convert=*/false)) {
    throw Error(ErrorCode::dtype_mismatch, name,
                fmt::format("a numpy array or an object with __dlpack__, of dtype {}", wanted),
                numpy ? fmt::format("a numpy array of dtype {}", a.dtype_name)
                      : fmt::format("an object of type {}", python_type_name(object)));
  }
  if (!a.dtype) a.dtype = dtype_of(a.view.dtype());
  if (!numpy) a.dtype_name = a.dtype ? numpy_name(*a.dtype) : dlpack_name(a.view.dtype());
  a.shape.resize(a.view.ndim());
  for (std::size_t i = 0; i < a.view.ndim(); ++i) a.shape[i] = a.view.shape(i);
  return a;
}

}  // namespace

Array array_arg(nb::handle object, const std::string& name, std::initializer_list<DType> dtypes,
                const std::vector<std::int64_t>& shape, std::string_view layout, Access access) {
  const std::string wanted = dtypes_string(dtypes);
  Imported a = import_array(object, name, wanted);
  const nb::ndarray<nb::ro>& view = a.view;
  const std::optional<DType> dtype = a.dtype;
  DCPMLA_REQUIRE(dtype && std::find(dtypes.begin(), dtypes.end(), *dtype) != dtypes.end(),
                 ErrorCode::dtype_mismatch, name, fmt::format("dtype {}", wanted), a.dtype_name);

  const std::vector<std::int64_t>& found = a.shape;
  bool shape_ok = found.size() == shape.size();
  for (std::size_t i = 0; shape_ok && i < shape.size(); ++i) {
    shape_ok = shape[i] < 0 || shape[i] == found[i];
  }
  DCPMLA_REQUIRE(shape_ok, ErrorCode::shape_mismatch, name,
                 fmt::format("shape {} ({})", tuple_string(shape), layout), tuple_string(found));

  DCPMLA_REQUIRE(view.device_type() == nb::device::cpu::value, ErrorCode::invalid_argument, name,
                 "an array in CPU memory",
                 fmt::format("DLPack device type {}", view.device_type()));
  std::int64_t numel = 1, expected_stride = 1;
  for (auto d : found) numel *= d;
  bool contiguous = true;
  for (std::size_t i = found.size(); numel > 0 && i-- > 0;) {
    if (found[i] != 1 && view.stride(i) != expected_stride) contiguous = false;
    expected_stride *= found[i];
  }
  if (!contiguous) {
    std::vector<std::int64_t> strides(found.size());
    for (std::size_t i = 0; i < found.size(); ++i) strides[i] = view.stride(i);
    throw Error(ErrorCode::invalid_argument, name,
                "a C-contiguous array (read in place, never copied)",
                fmt::format("strides ({}) in elements", fmt::join(strides, ", ")));
  }
  const std::size_t element = dtype_size(*dtype);
  const auto address = reinterpret_cast<std::uintptr_t>(view.data());
  DCPMLA_REQUIRE(
      numel == 0 || address % element == 0, ErrorCode::invalid_argument, name,
      fmt::format("data aligned to its {}-byte elements", element),
      fmt::format("an address {} bytes past a multiple of {}", address % element, element));
  if (access == Access::write) {
    DCPMLA_REQUIRE(
        !nb::hasattr(object, "requires_grad") || !nb::cast<bool>(object.attr("requires_grad")),
        ErrorCode::invalid_argument, name,
        "a tensor that does not require grad (an output written in place, outside autograd)",
        "a tensor with requires_grad=True");
    nb::ndarray<> writable;
    DCPMLA_REQUIRE(nb::try_cast(a.source, writable, /*convert=*/false), ErrorCode::invalid_argument,
                   name, "a writable array (an output)", "a read-only array");
  }
  return {a.source, a.view, TensorRef(view.data(), *dtype, found)};
}

std::vector<std::int64_t> int_values(nb::handle object, const std::string& name,
                                     const std::vector<std::int64_t>& shape,
                                     std::string_view layout) {
  return int64_values(array_arg(object, name, {DType::i32, DType::i64}, shape, layout));
}

std::vector<std::int64_t> int64_values(const Array& a) {
  const std::int64_t n = a.tensor.numel();
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  if (a.tensor.dtype == DType::i64) {
    if (n > 0) std::memcpy(values.data(), a.tensor.data, std::size_t(n) * sizeof(std::int64_t));
  } else {
    const auto* v = a.tensor.as<const std::int32_t>();
    std::copy(v, v + n, values.begin());
  }
  return values;
}

void require_disjoint(const Array& first, const std::string& first_name, const Array& second,
                      const std::string& second_name) {
  const auto* a = static_cast<const std::uint8_t*>(first.tensor.data);
  const auto* b = static_cast<const std::uint8_t*>(second.tensor.data);
  const std::size_t a_bytes = first.tensor.bytes(), b_bytes = second.tensor.bytes();
  const bool overlap = a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
  DCPMLA_REQUIRE(!overlap, ErrorCode::invalid_argument, second_name,
                 fmt::format("an array whose memory does not overlap {}", first_name),
                 fmt::format("an array sharing memory with {}", first_name));
}

nb::tuple array_signature(nb::handle object, const std::string& name) {
  const Imported a = import_array(object, name, "any");
  nb::list shape;
  for (auto d : a.shape) shape.append(d);
  return nb::make_tuple(a.dtype_name, nb::tuple(shape));
}

}  // namespace dcpmla::python
