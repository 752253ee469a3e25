// torch tensors crossing into the library: zero-copy views, checked. A tensor the library could
// not use in place (another dtype, shape or device, non-contiguous or misaligned) is refused with
// an Error naming the argument, never copied.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "dcpmla/tensor.h"

namespace dcpmla::torch_ops {

using Tensor = torch::stable::Tensor;

// Where a tensor lives: device -1 is the CPU, otherwise a CUDA device index.
struct Place {
  int device = -1;
  bool cuda() const { return device >= 0; }
  friend bool operator==(Place, Place) = default;
};
// Throws Error naming `name` for a tensor on neither the CPU nor a CUDA device.
Place place_of(const Tensor& t, const std::string& name);
std::string describe(Place p);  // "cpu" or "cuda:N"

// The library's view of `t` as argument `name`: one of `dtypes` (a torch.uint8 tensor is none of
// them; byte buffers are bytes_arg's), exactly `shape` (-1 accepts
// any extent; `layout` names the dimensions for the message, e.g. "[num_tokens, heads, 576]"),
// C-contiguous, aligned to `alignment` bytes (0: its element size) and on `place`.
TensorRef tensor_arg(const Tensor& t, const std::string& name, std::initializer_list<DType> dtypes,
                     const std::vector<std::int64_t>& shape, std::string_view layout, Place place,
                     std::size_t alignment = 0);

// A byte buffer (uint8, 1-D, contiguous) on `place`, aligned to `alignment` bytes.
TensorRef bytes_arg(const Tensor& t, const std::string& name, Place place, std::size_t alignment);

// Throws Error naming `second` when the bytes of two views overlap.
void require_disjoint(const TensorRef& first, const std::string& first_name,
                      const TensorRef& second, const std::string& second_name);

}  // namespace dcpmla::torch_ops
