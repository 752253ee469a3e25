// The query of the round decode for an fp8 cache: its MMAs take f16 (the wideners convert e4m3
// to f16 in one instruction a pair, round_widening.cuh), so the consumers turn the tile's bf16 Q
// into f16 in place once it has landed. f16 holds every bf16 significand but only exponents
// -24 .. 15, so Q is scaled by 2^s first, s chosen from the tile's largest |q| (its top lands in
// [2^14, 2^15)); the scores' scale takes 2^-s back. Scaling by a power of two commutes with
// every rounding of S's sums, so S * scale has the bits of the bf16 path unless an element of Q
// lies more than 2^38 below the tile's largest (its f16 is then rounded or zero).
#pragma once

#include <cstdint>

#include "cuda/conversions.cuh"
#include "cuda/decode/sm90/round_layout.cuh"
#include "cuda/decode/sm90/tile_common.cuh"

namespace dcpmla::cuda::sm90::rounds {

// The exponent s for a tile whose largest bf16 magnitude has the bits `top` (sign cleared): 0
// for a tile of zeros or one holding inf or NaN (they stay what they are), else 14 minus top's
// exponent, within [-64, 64] so that 2^s and the scale's 2^-s stay normal floats.
__device__ __forceinline__ int query_exponent(std::uint32_t top) {
  if (top == 0 || top >= 0x7f80u) return 0;
  const int e = int(top >> 7) - 127;
  const int s = 14 - e;
  return s < -64 ? -64 : (s > 64 ? 64 : s);
}

// 2^s as a float, s in [-126, 127].
__device__ __forceinline__ float pow2(int s) {
  return bits_float(std::uint32_t(s + 127) << 23);
}

// Q's 9 chunks (64 rows x 576 bf16 at sm.q; rows from `pairs` on are not the tile's: zeros, or
// the next pairs of q where its boxes brought it) -> f16 x 2^s in place, s from the tile's own
// rows, by the consumers' threads (tid < kConsumerThreads), each on the units of load_q's
// partition, once Q has landed; returns s. The caller's barrier (kQLoaded) orders the stores before
// the MMAs' reads and the scratch slots before anyone rewrites m.
__device__ __forceinline__ int query_to_f16(const RoundSmem& sm, int tid, int pairs) {
  constexpr int kRowUnits = kHeadDim * 2 / 16;  // 72 units of 8 values a row, as load_q
  constexpr int kUnits = kPairs * kRowUnits;
  auto unit_at = [&](int u) {
    const int r = u / kRowUnits, rem = u - r * kRowUnits;
    return sm.q + std::uint32_t(rem >> 3) * kChunkBytes +
           hopper::swizzled_offset(std::uint32_t(r), std::uint32_t(rem & 7));
  };
  std::uint32_t top = 0;
  for (int u = tid; u < pairs * kRowUnits; u += kConsumerThreads) {
    const uint4 v = ld_shared16(unit_at(u));
    const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      top = max(top, max(w[i] & 0x7fffu, (w[i] >> 16) & 0x7fffu));
    }
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) top = max(top, __shfl_xor_sync(0xffffffffu, top, d));
  // m's first 8 slots are free until the first tile's softmax, past kQLoaded.
  auto* slots = reinterpret_cast<std::uint32_t*>(sm.m);
  if ((tid & 31) == 0) slots[tid >> 5] = top;
  named_barrier_sync(kQScaled, kConsumerThreads);
#pragma unroll
  for (int w = 0; w < kConsumerThreads / 32; ++w) top = max(top, slots[w]);
  const int s = query_exponent(top);
  const float scale = pow2(s);
  for (int u = tid; u < kUnits; u += kConsumerThreads) {
    const std::uint32_t at = unit_at(u);
    const uint4 v = ld_shared16(at);
    st_shared16(at, make_uint4(pack_f16x2(bf16_lo(v.x) * scale, bf16_hi(v.x) * scale),
                               pack_f16x2(bf16_lo(v.y) * scale, bf16_hi(v.y) * scale),
                               pack_f16x2(bf16_lo(v.z) * scale, bf16_hi(v.z) * scale),
                               pack_f16x2(bf16_lo(v.w) * scale, bf16_hi(v.w) * scale)));
  }
  return s;
}

}  // namespace dcpmla::cuda::sm90::rounds
