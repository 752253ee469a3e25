#include "fixed_scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "dcpmla/error.h"
#include "dcpmla/numeric.h"
#include "dcpmla/sharding.h"

namespace dcpmla::tool {

sim::Scenario make_fixed_scenario(sim::ScenarioSpec spec, std::span<const int> q_lens,
                                  std::span<const std::int64_t> total_lens,
                                  std::span<const Mask> masks) {
  const auto B = q_lens.size();
  require(B >= 1, ErrorCode::invalid_argument, "q_lens", "at least one request", "none");
  require(total_lens.size() == B, ErrorCode::shape_mismatch, "total_lens",
          fmt::format("{} entries (one per request of q_lens)", B),
          std::to_string(total_lens.size()));
  require(masks.empty() || masks.size() == B, ErrorCode::shape_mismatch, "masks",
          fmt::format("0 or {} entries", B), std::to_string(masks.size()));
  for (std::size_t b = 0; b < B; ++b) {
    require(q_lens[b] >= 1, ErrorCode::invalid_argument, fmt::format("q_lens[{}]", b), ">= 1",
            std::to_string(q_lens[b]));
    require(total_lens[b] >= q_lens[b], ErrorCode::inconsistent, fmt::format("total_lens[{}]", b),
            fmt::format(">= q_lens[{}] = {} (T includes the query tokens)", b, q_lens[b]),
            std::to_string(total_lens[b]));
  }
  spec.requests = int(B);
  spec.max_drafts = *std::max_element(q_lens.begin(), q_lens.end()) - 1;
  spec.max_context = *std::max_element(total_lens.begin(), total_lens.end());
  spec.short_request = false;
  Sharding{spec.world, 0, spec.interleave}.validate(spec.block_size);
  require(spec.heads >= 1 && spec.heads % spec.world == 0, ErrorCode::invalid_argument, "heads",
          fmt::format("a positive multiple of world {}", spec.world), std::to_string(spec.heads));
  require(spec.padding_rows >= 0, ErrorCode::invalid_argument, "padding_rows", ">= 0",
          std::to_string(spec.padding_rows));
  require(spec.extra_blocks >= 0, ErrorCode::invalid_argument, "extra_blocks", ">= 0",
          std::to_string(spec.extra_blocks));
  require(spec.q_dtype == DType::f32 || spec.q_dtype == DType::bf16, ErrorCode::dtype_mismatch,
          "q_dtype", "fp32 or bf16", to_string(spec.q_dtype));

  sim::Scenario sc;
  sc.spec = spec;
  Batch& batch = sc.batch;
  batch.query_start_loc.push_back(0);
  for (std::size_t b = 0; b < B; ++b) {
    batch.query_start_loc.push_back(batch.query_start_loc.back() + q_lens[b]);
    batch.total_len.push_back(total_lens[b]);
    batch.mask.push_back(masks.empty() ? Mask::causal : masks[b]);
  }
  batch.num_tokens = batch.real_tokens() + spec.padding_rows;

  std::mt19937_64 rng(spec.seed ^ 0x5eedf1dULL);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Sharding rank0{spec.world, 0, spec.interleave};
  std::vector<std::int64_t> needed(B);
  std::int64_t total = 0;
  for (std::size_t b = 0; b < B; ++b) {
    needed[b] = (rank0.local_len(total_lens[b]) + spec.block_size - 1) / spec.block_size;
    total += needed[b];
  }
  batch.max_blocks = std::int32_t(*std::max_element(needed.begin(), needed.end()) + 1);
  sc.num_blocks = total + spec.extra_blocks;
  std::vector<std::int32_t> ids(std::size_t(sc.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  batch.block_table.assign(B * std::size_t(batch.max_blocks), -1);
  std::size_t next = 0;
  for (std::size_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < needed[b]; ++i) {
      batch.block_table[b * std::size_t(batch.max_blocks) + std::size_t(i)] = ids[next++];
    }
  }

  sc.q.resize(std::size_t(batch.rows()) * spec.heads * kHeadDim);
  for (auto& x : sc.q) {
    x = 0.5f * normal(rng);
    if (spec.q_dtype == DType::bf16) x = bf16_to_float(float_to_bf16(x));
  }
  sc.kv.assign(B, {});
  for (std::size_t b = 0; b < B; ++b) {
    sc.kv[b].resize(std::size_t(total_lens[b]) * kHeadDim);
    for (auto& x : sc.kv[b]) x = normal(rng);
  }
  return sc;
}

}  // namespace dcpmla::tool
