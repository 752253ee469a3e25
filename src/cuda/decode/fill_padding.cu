// Padding rows (past the batch's real tokens) belong to no request: O = 0, LSE = -inf, in the
// plain layout or in the a2a send rows (OutputRows).
#include <algorithm>

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "cuda/output_rows.cuh"
#include "gpu/check.h"
#include "gpu/grid_dependency.cuh"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 1024;

__global__ void fill_padding_kernel(const OutputRows o, const PlanHeader* header, int num_heads,
                                    std::int64_t rows) {
  // count = rows * H (row, head) items starting at item `first`; a faulted plan's rows are all
  // padding, and NaN (nothing downstream may take them for attention).
  const std::int64_t first = header->padding_begin * num_heads;
  const std::int64_t end = header->padding_end < rows ? header->padding_end : rows;
  const std::int64_t count = (end - header->padding_begin) * num_heads;
  const bool fault = header->fault != kNoFault;
  const float o_value = fault ? NAN : 0.0f, lse_value = fault ? NAN : -INFINITY;
  // Launched dependent on the previous kernel (launch_dependent): the header (uploaded before
  // the decode) is read before the wait, every store after it.
  gpu::wait_for_previous_grid();
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  const std::int64_t begin = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o.group_heads == 0) {
    for (std::int64_t i = begin; i < count * kLatentDim; i += stride) {
      store1(o.out, o.bf16, first * kLatentDim + i, o_value);
    }
    for (std::int64_t i = begin; i < count; i += stride) o.lse[first + i] = lse_value;
    return;
  }
  // Packed rows: pairs of elements (rows are 4-byte aligned), the LSE with the row's last pair.
  constexpr int kPairs = kLatentDim / 2;
  for (std::int64_t i = begin; i < count * kPairs; i += stride) {
    const std::int64_t item = first + i / kPairs;
    const std::int64_t at = output_offset(o, item, num_heads);
    const int d = 2 * int(i % kPairs);
    store_output2(o, at + d, o_value, o_value);
    if (d == 0) *output_lse(o, item, at) = lse_value;
  }
}

}  // namespace

void launch_fill_padding(const OutputRows& final_rows, const PlanHeader* header,
                         std::int64_t row_capacity, int num_heads, cudaStream_t s) {
  const std::int64_t count = row_capacity * num_heads;
  if (count <= 0) return;
  // The threads stride over the padding the header names: a capped grid covers any count, and
  // under a CUDA graph (launched for the row capacity) no longer runs tens of thousands of
  // mostly empty blocks every replay.
  const unsigned blocks = std::min(grid_blocks(count * kLatentDim, kThreads), kMaxBlocks);
  gpu::launch_dependent(fill_padding_kernel, dim3(blocks), kThreads, 0, s,
                        "fill_padding_kernel (cudaLaunchKernelEx)", final_rows, header, num_heads,
                        row_capacity);
}

}  // namespace dcpmla::cuda
