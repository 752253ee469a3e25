// The oracle: a deliberately naive MLA decode in global coordinates and double precision.
// No sharding, no paging, no splitting: for the tests, the demo and `dcpmla check`.
#pragma once

#include <cstdint>
#include <vector>

#include "dcpmla/batch.h"

namespace dcpmla::testing {

struct ReferenceProblem {
  // Only query_start_loc, total_len, mask and num_tokens are read (no block table).
  Batch batch;
  int num_heads = 0;
  double softmax_scale = 0.0;           // the full score scale (softmax_scale * q_scale)
  std::vector<double> q;                // [rows, H, 576]
  std::vector<std::vector<double>> kv;  // per request: [T_b, 576] in global position order
};

struct ReferenceResult {
  std::vector<double> out;  // [rows, H, 512]; 0 for empty and padding rows
  std::vector<double> lse;  // [rows, H] natural log; -inf for empty and padding rows
};

ReferenceResult reference_attention(const ReferenceProblem& problem);

}  // namespace dcpmla::testing
