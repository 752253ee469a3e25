// The output of the sm90 decode, shared by the wide and narrow tiles: a pair's LSE from the final
// m and l, its output scale, and the stores of a wide fragment's rows of O into the fp32 partials
// or the final rows.
#pragma once

#include <cstdint>

#include "cuda/decode/decode_tile.cuh"
#include "cuda/decode/sm90/smem_layout.cuh"
#include "cuda/decode/sm90/softmax.cuh"
#include "cuda/decode/sm90/tile_common.cuh"

namespace dcpmla::cuda::sm90 {

// The LSE of output item `item` into the partials or the final rows; packed: the final rows are
// the a2a send rows (OutputRows with group_heads).
__device__ __forceinline__ void store_lse(const DecodeParams& p, bool partial, bool packed,
                                          std::int64_t item, float lse) {
  if (partial) {
    p.partial_lse[item] = lse;
  } else if (packed) {
    *output_lse(p.final_rows, item, output_offset(p.final_rows, item, p.num_heads)) = lse;
  } else {
    p.final_rows.lse[item] = lse;
  }
}

// What O of a pair with exp-sum `total` is multiplied by (0 for a pair that saw no key, NaN for
// one whose exp-sum a non-finite score poisoned).
__device__ __forceinline__ float output_scale(const DecodeParams& p, float total) {
  return total == 0.0f ? 0.0f : p.out_scale / total;
}

// Writes accumulator row r (0 or 1) of a 64 x 256 wgmma fragment o, times scale, at element
// `at` (dim 2 quad of the thread's first column) of the partials or of the plain final rows:
// columns 8 j + {0, 1}.
__device__ __forceinline__ void store_output_row(const DecodeParams& p, bool partial,
                                                 std::int64_t at, const float (&o)[128], int r,
                                                 float scale) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float a = o[4 * j + 2 * r] * scale, b = o[4 * j + 2 * r + 1] * scale;
    if (partial) {
      *reinterpret_cast<float2*>(p.partial_out + at + 8 * j) = make_float2(a, b);
    } else if (p.final_rows.bf16) {
      *reinterpret_cast<std::uint32_t*>(static_cast<bf16_bits*>(p.final_rows.out) + at + 8 * j) =
          pack_bf16x2(a, b);
    } else {
      *reinterpret_cast<float2*>(static_cast<float*>(p.final_rows.out) + at + 8 * j) =
          make_float2(a, b);
    }
  }
}

// The same row into the packed a2a send rows (OutputRows with group_heads), from the element
// offset `at` of its slot's column: a function of its own, so that the partials' and plain rows'
// stores above stay free of the packed layout's branches.
__device__ __forceinline__ void store_packed_row(const DecodeParams& p, std::int64_t at,
                                                 const float (&o)[128], int r, float scale) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    store_output2(p.final_rows, at + 8 * j, o[4 * j + 2 * r] * scale, o[4 * j + 2 * r + 1] * scale);
  }
}

// Output rows in the plain layout (the fp32 partials, or the final rows in bf16 or fp32), staged: a
// wide fragment's rows go to shared memory first, then each warp copies its own rows' half out in
// 16-byte pieces. A tile's output items are consecutive rows, so a warp's store covers 512
// contiguous bytes instead of 4 or 8 bytes of each of 8 rows. E: bytes an element (2: bf16, 4:
// fp32). Rows lie a row's bytes and padding apart, so that one store of a warp (bf16: 4 bytes of 8
// rows; fp32: 8 bytes of 4 rows a half-warp) falls in distinct banks.
template <int E>
constexpr std::uint32_t kStagedRowBytes = std::uint32_t(E) * kLatentDim + (E == 2 ? 16 : 32);
template <int E>
constexpr std::uint32_t kStagedOutputBytes = std::uint32_t(kPairs) * kStagedRowBytes<E>;

// Accumulator row r (0 or 1) of a 64 x 256 wgmma fragment o, times scale, into staged row `row`
// from element `col` (dim 2 quad of the thread's first column): columns 8 j + {0, 1}.
template <int E>
__device__ __forceinline__ void stage_output_row(std::uint32_t staging, int row, int col,
                                                 const float (&o)[128], int r, float scale) {
  const std::uint32_t at =
      staging + std::uint32_t(row) * kStagedRowBytes<E> + std::uint32_t(E * col);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const float a = o[4 * j + 2 * r] * scale, b = o[4 * j + 2 * r + 1] * scale;
    if constexpr (E == 2) {
      st_shared4(at + 16u * std::uint32_t(j), pack_bf16x2(a, b));
    } else {
      st_shared8(at + 32u * std::uint32_t(j), make_uint2(float_bits(a), float_bits(b)));
    }
  }
}

// A warp's staged rows [row0, row0 + 16) below `rows`, its warpgroup's half of each (256
// elements from 256 wg on), into the rows of `out` (elements of E bytes) from row `first` on, by
// the warp's lanes: each store of the warp covers 512 contiguous bytes of one row.
template <int E>
__device__ __forceinline__ void copy_staged_half_rows(void* out, std::uint32_t staging,
                                                      std::int64_t first, int row0, int rows,
                                                      int wg, int lane) {
  constexpr int kHalf = kLatentDim / 2 * E;  // bytes of a half row
  constexpr int kPieces = kHalf / 16;        // its 16-byte pieces
  const int n = rows - row0 < 16 ? rows - row0 : 16;
  auto* base = static_cast<unsigned char*>(out) + (first + row0) * (kLatentDim * E) + wg * kHalf;
  const std::uint32_t src =
      staging + std::uint32_t(row0) * kStagedRowBytes<E> + std::uint32_t(wg * kHalf);
  for (int i = lane; i < n * kPieces; i += 32) {
    const int row = i / kPieces, piece = i % kPieces;
    const uint4 v = ld_shared16(src + std::uint32_t(row) * kStagedRowBytes<E> + 16u * piece);
    *reinterpret_cast<uint4*>(base + std::int64_t(row) * (kLatentDim * E) + 16 * piece) = v;
  }
}

}  // namespace dcpmla::cuda::sm90
