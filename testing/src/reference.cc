#include "dcpmla/testing/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dcpmla/error.h"
#include "dcpmla/types.h"

namespace dcpmla::testing {

ReferenceResult reference_attention(const ReferenceProblem& pb) {
  const Batch& batch = pb.batch;
  const int H = pb.num_heads;
  const std::int64_t rows = batch.rows();
  DCPMLA_REQUIRE(std::int64_t(pb.q.size()) == rows * H * kHeadDim, ErrorCode::shape_mismatch,
                 "reference q", "rows * H * 576 values", std::to_string(pb.q.size()));
  DCPMLA_REQUIRE(int(pb.kv.size()) == batch.num_requests(), ErrorCode::shape_mismatch,
                 "reference kv", "one entry per request", std::to_string(pb.kv.size()));

  ReferenceResult r;
  r.out.assign(std::size_t(rows) * H * kLatentDim, 0.0);
  r.lse.assign(std::size_t(rows) * H, -std::numeric_limits<double>::infinity());
  std::vector<double> scores;
  for (int b = 0; b < batch.num_requests(); ++b) {
    const std::int64_t begin = batch.query_start_loc[b], end = batch.query_start_loc[b + 1];
    const std::int64_t Q = end - begin, T = batch.total_len[b];
    const auto& kv = pb.kv[b];
    DCPMLA_REQUIRE(std::int64_t(kv.size()) == T * kHeadDim, ErrorCode::shape_mismatch,
                   "reference kv", "T * 576 values", std::to_string(kv.size()));
    const bool full = !batch.mask.empty() && batch.mask[b] == Mask::full;
    for (std::int64_t j = 0; j < Q; ++j) {
      // Query token j sits at global position T - Q + j and sees every position up to itself.
      const std::int64_t visible = full ? T : T - Q + j + 1;
      const std::int64_t row = begin + j;
      if (visible <= 0) continue;
      scores.resize(std::size_t(visible));
      for (int h = 0; h < H; ++h) {
        const double* q = &pb.q[(std::size_t(row) * H + h) * kHeadDim];
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t g = 0; g < visible; ++g) {
          double s = 0.0;
          for (int d = 0; d < kHeadDim; ++d) s += q[d] * kv[std::size_t(g) * kHeadDim + d];
          scores[g] = s * pb.softmax_scale;
          mx = std::max(mx, scores[g]);
        }
        double sum = 0.0;
        for (std::int64_t g = 0; g < visible; ++g) sum += std::exp(scores[g] - mx);
        double* o = &r.out[(std::size_t(row) * H + h) * kLatentDim];
        for (std::int64_t g = 0; g < visible; ++g) {
          const double p = std::exp(scores[g] - mx) / sum;
          for (int d = 0; d < kLatentDim; ++d) o[d] += p * kv[std::size_t(g) * kHeadDim + d];
        }
        r.lse[std::size_t(row) * H + h] = mx + std::log(sum);
      }
    }
  }
  return r;
}

}  // namespace dcpmla::testing
