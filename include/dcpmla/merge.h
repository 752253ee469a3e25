// The one merge algebra for partial attention results (SPEC section 5), used by split-KV merges,
// the DCP combine and the online softmax, on the host and on the device.
//
// A partial result of one row and head is (O, L): O normalised over its keys, L = ln sum exp(s).
// The empty state (a row that saw no key, known from its bounds) is exactly (0, -inf); a partial
// that saw a key has L >= its largest score, so -inf marks emptiness and nothing else. A NaN or
// +inf L comes from non-finite inputs and poisons every merge it enters (O = NaN, L = NaN): a
// corrupted partial is never dropped in favour of a plausible result over the other partials. A
// payload behind a zero weight is never read into the sum, so garbage behind empty partials
// cannot leak.
#pragma once

#include <cmath>
#include <cstdint>

#include "dcpmla/numeric.h"

namespace dcpmla::merge {

DCPMLA_HD float neg_inf() {
  return -INFINITY;
}

// True for an L that only non-finite inputs produce (NaN or +inf).
DCPMLA_HD bool poisoned_lse(float l) {
  return !(l < INFINITY);
}

// Running max and sum of exp for merging lse values one at a time. A poisoned term makes the
// state (NaN, NaN) for good: NaN compares false and absorbs every later term.
struct LseAccumulator {
  float m = -INFINITY;
  float s = 0.0f;

  DCPMLA_HD void add(float lse) {
    if (poisoned_lse(lse)) {
      m = s = NAN;
      return;
    }
    if (lse == -INFINITY) return;
    if (lse > m) {
      s = s * expf(m - lse) + 1.0f;  // expf(-inf) = 0 on the first term
      m = lse;
    } else {
      s += expf(lse - m);
    }
  }
  // ln sum exp(L_r); -inf when every term was empty, NaN when one was poisoned.
  DCPMLA_HD float lse() const { return s == 0.0f ? -INFINITY : m + logf(s); }
};

// Weight w_r / S of a partial with lse `l` in a merge whose merged lse is `merged`: 0 if the
// partial is empty, NaN if the merge is poisoned (merged is NaN) and the partial is not empty.
DCPMLA_HD float weight(float l, float merged) {
  if (l == -INFINITY || merged == -INFINITY) return 0.0f;
  return expf(l - merged);
}

// A partial's O element as a float: fp32 as it is, bf16 (its raw bits) widened exactly.
DCPMLA_HD float partial_value(float x) {
  return x;
}
DCPMLA_HD float partial_value(std::uint16_t bf16) {
  return bf16_to_float(bf16);
}

// Merges n partials of one row and head: o[r * o_stride + d] (fp32, or bf16 bits), lse[r *
// lse_stride]. out[d] = sum_r weight_r * o_r[d] in fp32, skipping zero weights (a NaN weight is
// not skipped: a poisoned merge gives O = NaN); returns the merged lse.
template <class InT, class OutT, class Store>
DCPMLA_HD float merge_partials(int n, const InT* o, long o_stride, const float* lse,
                               long lse_stride, int dim, OutT* out, Store store) {
  LseAccumulator acc;
  for (int r = 0; r < n; ++r) acc.add(lse[r * lse_stride]);
  const float merged = acc.lse();
  for (int d = 0; d < dim; ++d) {
    float sum = 0.0f;
    for (int r = 0; r < n; ++r) {
      const float w = weight(lse[r * lse_stride], merged);
      if (w != 0.0f) sum += w * partial_value(o[r * o_stride + d]);
    }
    out[d] = store(sum);
  }
  return merged;
}

// Online softmax state for one query row and head while keys stream by.
struct OnlineSoftmax {
  float m = -INFINITY;  // running max of scores
  float s = 0.0f;       // running sum of exp(score - m)

  // Folds in a tile whose max score is tile_max; returns the factor the accumulator must be
  // multiplied by before adding the tile's exp(score - m) * v terms.
  DCPMLA_HD float rescale_for(float tile_max) {
    if (tile_max <= m) return 1.0f;
    const float factor = (m == -INFINITY) ? 0.0f : expf(m - tile_max);
    s *= factor;
    m = tile_max;
    return factor;
  }
  DCPMLA_HD bool empty() const { return s == 0.0f; }
  // -inf when no key was seen; NaN when a score was NaN (s is then NaN).
  DCPMLA_HD float lse() const { return s == 0.0f ? -INFINITY : m + logf(s); }
  DCPMLA_HD float inv_sum() const { return s == 0.0f ? 0.0f : 1.0f / s; }
};

}  // namespace dcpmla::merge
