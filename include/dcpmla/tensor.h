// A non-owning view of a dense row-major buffer with its element type and shape; every buffer
// that crosses the library boundary is one of these, so shape and dtype are checked, not assumed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "dcpmla/types.h"

namespace dcpmla {

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;

  TensorRef() = default;
  TensorRef(void* d, DType t, std::vector<std::int64_t> s)
      : data(d), dtype(t), shape(std::move(s)) {}
  TensorRef(const void* d, DType t, std::vector<std::int64_t> s)
      : data(const_cast<void*>(d)), dtype(t), shape(std::move(s)) {}

  std::int64_t numel() const;
  std::size_t bytes() const;
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

std::string shape_string(const std::vector<std::int64_t>& shape);

// Throws Error naming `argument` unless t is non-null, of dtype `dtype` and of exactly `shape`.
void check_tensor(const TensorRef& t, const std::string& argument, DType dtype,
                  std::initializer_list<std::int64_t> shape);
// Same, accepting any of `dtypes`.
void check_tensor(const TensorRef& t, const std::string& argument,
                  std::initializer_list<DType> dtypes, std::initializer_list<std::int64_t> shape);

}  // namespace dcpmla
