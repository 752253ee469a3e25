// Arrays crossing into the library: numpy arrays (bfloat16 and float8_e4m3fn through ml_dtypes)
// or any object with __dlpack__, read and written in place. Anything the library could not use
// in place is refused, naming the argument, and never copied: a wrong dtype is a TypeError; a
// wrong shape, strides, alignment or device, or a read-only output, a ValueError.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "dcpmla/tensor.h"

namespace dcpmla::python {

enum class Access { read, write };

// The library's view of an argument, valid while the imported array (`view`, which references
// `source`) lives.
struct Array {
  nanobind::object source;
  nanobind::ndarray<nanobind::ro> view;
  TensorRef tensor;
};

// Imports `object` as the argument `name` and checks it: one of `dtypes`, exactly `shape` (-1
// accepts any extent; `layout` names the dimensions for the message, e.g. "[num_tokens, heads,
// 576]"), C-contiguous, aligned to its element size, in CPU memory, and writable for
// Access::write.
Array array_arg(nanobind::handle object, const std::string& name,
                std::initializer_list<DType> dtypes, const std::vector<std::int64_t>& shape,
                std::string_view layout, Access access = Access::read);

// (dtype name as numpy spells it, shape) of an array, imported as array_arg imports it: what the
// Python layer needs to allocate matching outputs.
nanobind::tuple array_signature(nanobind::handle object, const std::string& name);

// The values of an int32 or int64 array as int64.
std::vector<std::int64_t> int64_values(const Array& a);

// An int32 or int64 array of `shape` as int64 values (small metadata: request lengths, starts).
std::vector<std::int64_t> int_values(nanobind::handle object, const std::string& name,
                                     const std::vector<std::int64_t>& shape,
                                     std::string_view layout);

// The element type's name as numpy spells it: float32, bfloat16, float8_e4m3fn, int32, int64.
const char* numpy_name(DType t);

// The name of object's Python type, e.g. "list".
std::string python_type_name(nanobind::handle object);

// "(9, 16, 576)", or "(9, *, 576)" for shapes with -1 extents.
std::string tuple_string(const std::vector<std::int64_t>& shape);

// A numpy array that owns `values`, of `shape`.
template <class T>
nanobind::ndarray<nanobind::numpy, T> to_numpy(std::vector<T>&& values,
                                               std::initializer_list<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nanobind::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nanobind::ndarray<nanobind::numpy, T>(owned->data(), shape, owner);
}

// Throws Error naming `second` when the bytes of two arrays overlap (an output over an input, or
// two outputs over each other, would be read and written at once).
void require_disjoint(const Array& first, const std::string& first_name, const Array& second,
                      const std::string& second_name);

}  // namespace dcpmla::python
