// Device side of OutputRows (kernels.h): where the final O and LSE of a (row, head) item go, in
// the plain [rows, H, 512] + [rows, H] layout or straight into the a2a send rows of a DCP step;
// and the head-grouped slots that layout shares with the gathered query of a DCP step.
#pragma once

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"

namespace dcpmla::cuda {

// The slot of item (row * H + h) in a layout grouped by head, [G, rows, Hl, ...] with Hl =
// group_heads = H / G: head h is local head h % Hl of group h / Hl. group_heads 0: the plain
// [rows, H, ...] layout, slot = item.
__device__ __forceinline__ std::int64_t grouped_slot(std::int64_t row, int h, int num_heads,
                                                     int group_heads, std::int64_t rows) {
  if (group_heads == 0) return row * num_heads + h;
  const int group = h / group_heads;
  return (group * rows + row) * group_heads + (h - group * group_heads);
}
__device__ __forceinline__ std::int64_t grouped_slot(std::int64_t item, int num_heads,
                                                     int group_heads, std::int64_t rows) {
  if (group_heads == 0) return item;
  const std::int64_t row = item / num_heads;
  return grouped_slot(row, int(item - row * num_heads), num_heads, group_heads, rows);
}

// Element offset in o.out of item (row * H + h)'s first O element. Plain: item * 512. Packed:
// the item's grouped slot, in rows of packed_row(dtype) slots.
__device__ __forceinline__ std::int64_t output_offset(const OutputRows& o, std::int64_t item,
                                                      int num_heads) {
  if (o.group_heads == 0) return item * kLatentDim;
  return grouped_slot(item, num_heads, o.group_heads, o.rows) *
         (o.bf16 ? kPackedRowBf16 : kPackedRow);
}

// Where item's LSE goes; `offset` is output_offset(o, item, H). Packed rows keep the fp32 LSE in
// their last slots: 4-byte aligned, as every packed row starts 4-byte aligned.
__device__ __forceinline__ float* output_lse(const OutputRows& o, std::int64_t item,
                                             std::int64_t offset) {
  if (o.group_heads == 0) return o.lse + item;
  if (o.bf16) return reinterpret_cast<float*>(static_cast<bf16_bits*>(o.out) + offset + kLatentDim);
  return static_cast<float*>(o.out) + offset + kLatentDim;
}

// Two consecutive O elements at element `at` (even within its row). Packed f32 rows are only
// 4-byte aligned (513 floats), so they take two scalar stores; bf16 pairs are one word in either
// layout.
__device__ __forceinline__ void store_output2(const OutputRows& o, std::int64_t at, float a,
                                              float b) {
  if (o.bf16) {
    *reinterpret_cast<std::uint32_t*>(static_cast<bf16_bits*>(o.out) + at) = bf16_pair(a, b);
  } else if (o.group_heads == 0) {
    *reinterpret_cast<float2*>(static_cast<float*>(o.out) + at) = make_float2(a, b);
  } else {
    static_cast<float*>(o.out)[at] = a;
    static_cast<float*>(o.out)[at + 1] = b;
  }
}

// Four consecutive O elements at element `at` (a multiple of 4 within its row).
__device__ __forceinline__ void store_output4(const OutputRows& o, std::int64_t at, float a,
                                              float b, float c, float d) {
  if (o.group_heads == 0) {
    store4(o.out, o.bf16, at, a, b, c, d);
  } else {
    store_output2(o, at, a, b);
    store_output2(o, at + 2, c, d);
  }
}

}  // namespace dcpmla::cuda
