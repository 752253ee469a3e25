// Decodes one ragged speculative batch on the CPU backend of an installed dcpmla and checks every
// row against attention computed here in double precision. Exit status 0 on agreement.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/plan.h"
#include "dcpmla/version.h"

namespace {

// A fixed, irregular value for element i of a buffer.
float value(std::size_t i, float scale) {
  return scale * std::sin(0.37f * float(i) + 0.11f * float(i % 7));
}

}  // namespace

int main() {
  constexpr int kHeads = 2;
  constexpr int kBlockSize = 16;
  constexpr float kScale = 0.1352338f;

  // Two requests: 1 + 2 drafts at global length 20, and 1 token at length 7. One rank (W = 1).
  dcpmla::Batch batch;
  batch.query_start_loc = {0, 3, 4};
  batch.total_len = {20, 7};
  batch.max_blocks = 2;
  batch.block_table = {3, 0, 1, 2};  // request 0: blocks 3, 0; request 1: block 1
  dcpmla::PlanConfig config{.sharding = {.world = 1, .rank = 0, .interleave = 1},
                            .num_heads = kHeads,
                            .block_size = kBlockSize,
                            .num_blocks = 4};
  const dcpmla::Plan plan = dcpmla::make_plan(batch, config);

  dcpmla::HostKvCache cache(dcpmla::DType::f32, 4, kBlockSize);
  float* kv = static_cast<float*>(cache.ref().data);
  for (std::size_t i = 0; i < std::size_t(4) * kBlockSize * dcpmla::kHeadDim; ++i) {
    kv[i] = value(i, 1.0f);
  }
  const std::int64_t rows = plan.num_rows;
  std::vector<float> q(rows * kHeads * dcpmla::kHeadDim);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = value(i + 12345, 0.5f);
  std::vector<float> out(rows * kHeads * dcpmla::kLatentDim);
  std::vector<float> lse(rows * kHeads);
  std::vector<float> workspace(dcpmla::decode_workspace_bytes(plan) / sizeof(float) + 1);

  auto backend = dcpmla::make_cpu_backend(1);
  dcpmla::DecodeArgs args;
  args.plan = &plan;
  args.q = {q.data(), dcpmla::DType::f32, {rows, kHeads, dcpmla::kHeadDim}};
  args.cache = cache.ref();
  args.block_table = {batch.block_table.data(), dcpmla::DType::i32, {2, batch.max_blocks}};
  args.out = {out.data(), dcpmla::DType::f32, {rows, kHeads, dcpmla::kLatentDim}};
  args.lse = {lse.data(), dcpmla::DType::f32, {rows, kHeads}};
  args.softmax_scale = kScale;
  args.workspace = {workspace.data(), dcpmla::DType::f32, {std::int64_t(workspace.size())}};
  backend->decode(args, nullptr);

  // Row j of a request with Q tokens and length T sees global positions < T - (Q - 1 - j).
  const int request_of_row[] = {0, 0, 0, 1};
  const int bound_of_row[] = {18, 19, 20, 7};
  double worst = 0.0;
  for (int row = 0; row < 4; ++row) {
    const int b = request_of_row[row];
    for (int h = 0; h < kHeads; ++h) {
      const float* qv = &q[(std::size_t(row) * kHeads + h) * dcpmla::kHeadDim];
      std::vector<double> score(bound_of_row[row]);
      double max_score = -INFINITY;
      for (int t = 0; t < bound_of_row[row]; ++t) {
        const int block = batch.block_table[b * batch.max_blocks + t / kBlockSize];
        const float* k = kv + (std::size_t(block) * kBlockSize + t % kBlockSize) * dcpmla::kHeadDim;
        double s = 0.0;
        for (int d = 0; d < dcpmla::kHeadDim; ++d) s += double(qv[d]) * k[d];
        score[t] = s * kScale;
        max_score = std::max(max_score, score[t]);
      }
      double sum = 0.0;
      for (double& s : score) sum += (s = std::exp(s - max_score));
      const std::size_t item = std::size_t(row) * kHeads + h;
      worst = std::max(worst, std::abs(double(lse[item]) - (max_score + std::log(sum))));
      for (int d = 0; d < dcpmla::kLatentDim; ++d) {
        double o = 0.0;
        for (int t = 0; t < bound_of_row[row]; ++t) {
          const int block = batch.block_table[b * batch.max_blocks + t / kBlockSize];
          o += score[t] / sum *
               kv[(std::size_t(block) * kBlockSize + t % kBlockSize) * dcpmla::kHeadDim + d];
        }
        worst = std::max(worst, std::abs(double(out[item * dcpmla::kLatentDim + d]) - o));
      }
    }
  }
  std::printf("dcpmla %s: CPU decode of 4 rows x %d heads, max abs error %.3g\n",
              dcpmla::kVersionString, kHeads, worst);
  return worst < 1e-4 ? 0 : 1;
}
