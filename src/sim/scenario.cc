#include "dcpmla/sim/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dcpmla/error.h"
#include "dcpmla/numeric.h"
#include "dcpmla/sharding.h"

namespace dcpmla::sim {
namespace {

void validate_spec(const ScenarioSpec& s) {
  Sharding{s.world, 0, s.interleave}.validate(s.block_size);
  require(s.heads >= 1 && s.heads % s.world == 0, ErrorCode::invalid_argument, "heads",
          fmt::format("a positive multiple of world {}", s.world), std::to_string(s.heads));
  require(s.requests >= 1, ErrorCode::invalid_argument, "requests", ">= 1",
          std::to_string(s.requests));
  require(s.max_drafts >= 0, ErrorCode::invalid_argument, "max_drafts", ">= 0",
          std::to_string(s.max_drafts));
  require(s.max_context >= s.max_drafts + 1, ErrorCode::invalid_argument, "max_context",
          fmt::format(">= 1 + max_drafts = {}", s.max_drafts + 1), std::to_string(s.max_context));
  require(s.padding_rows >= 0, ErrorCode::invalid_argument, "padding_rows", ">= 0",
          std::to_string(s.padding_rows));
  require(s.q_dtype == DType::f32 || s.q_dtype == DType::bf16, ErrorCode::dtype_mismatch,
          "q_dtype", "fp32 or bf16", to_string(s.q_dtype));
}

float round_to(DType t, float x) { return t == DType::bf16 ? bf16_to_float(float_to_bf16(x)) : x; }

}  // namespace

Scenario make_scenario(const ScenarioSpec& spec) {
  validate_spec(spec);
  std::mt19937_64 rng(spec.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  Scenario sc;
  sc.spec = spec;
  Batch& batch = sc.batch;
  const int B = spec.requests;
  batch.query_start_loc.push_back(0);
  for (int b = 0; b < B; ++b) {
    // Draft counts differ per request: ragged by construction when max_drafts > 0.
    const int q_len = 1 + int(rng() % std::uint64_t(spec.max_drafts + 1));
    batch.query_start_loc.push_back(batch.query_start_loc.back() + q_len);
    std::int64_t T;
    if (b == 0 && spec.short_request) {
      T = q_len + std::int64_t(rng() % std::uint64_t(spec.world));  // T < W + Q
    } else if (b == B - 1) {
      T = spec.max_context;  // one request at the full context length
    } else {
      const double lo = std::log(double(q_len)), hi = std::log(double(spec.max_context));
      T = std::clamp<std::int64_t>(std::int64_t(std::exp(lo + (hi - lo) * unit(rng))), q_len,
                                   spec.max_context);
    }
    batch.total_len.push_back(T);
    batch.mask.push_back(unit(rng) < spec.full_mask_fraction ? Mask::full : Mask::causal);
  }
  batch.num_tokens = batch.real_tokens() + spec.padding_rows;

  // Block tables: rank 0 holds the most tokens of every request; every rank uses a prefix of the
  // same row. Ids are a random permutation of the cache, and unused columns hold -1.
  const Sharding rank0{spec.world, 0, spec.interleave};
  std::vector<std::int64_t> needed(B);
  std::int64_t total = 0;
  for (int b = 0; b < B; ++b) {
    needed[b] = (rank0.local_len(batch.total_len[b]) + spec.block_size - 1) / spec.block_size;
    total += needed[b];
  }
  const std::int64_t max_needed = *std::max_element(needed.begin(), needed.end());
  batch.max_blocks = std::int32_t(max_needed + 1);
  sc.num_blocks = total + spec.extra_blocks;
  std::vector<std::int32_t> ids(std::size_t(sc.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  batch.block_table.assign(std::size_t(B) * batch.max_blocks, -1);
  std::size_t next = 0;
  for (int b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < needed[b]; ++i) {
      batch.block_table[std::size_t(b) * batch.max_blocks + i] = ids[next++];
    }
  }

  // Query ~ N(0, 0.5), latents ~ N(0, 1): with the DeepSeek scale the scores spread over a few
  // units, so the softmax is neither flat nor one-hot.
  const std::int64_t rows = batch.rows();
  sc.q.resize(std::size_t(rows) * spec.heads * kHeadDim);
  for (auto& x : sc.q) x = round_to(spec.q_dtype, 0.5f * normal(rng));
  sc.kv.resize(std::size_t(B));
  for (int b = 0; b < B; ++b) {
    sc.kv[b].resize(std::size_t(batch.total_len[b]) * kHeadDim);
    for (auto& x : sc.kv[b]) x = normal(rng);
  }
  return sc;
}

}  // namespace dcpmla::sim
