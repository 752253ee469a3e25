#include "dcpmla/testing/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dcpmla/error.h"
#include "dcpmla/numeric.h"
#include "dcpmla/sharding.h"

namespace dcpmla::testing {
namespace {

void validate_spec(const ScenarioSpec& s) {
  Sharding{s.world, 0, s.interleave}.validate(s.block_size);
  DCPMLA_REQUIRE(s.heads >= 1, ErrorCode::invalid_argument, "heads", ">= 1",
                 std::to_string(s.heads));
  DCPMLA_REQUIRE(s.requests >= 1, ErrorCode::invalid_argument, "requests", ">= 1",
                 std::to_string(s.requests));
  DCPMLA_REQUIRE(s.max_drafts >= 0, ErrorCode::invalid_argument, "max_drafts", ">= 0",
                 std::to_string(s.max_drafts));
  DCPMLA_REQUIRE(s.max_context >= s.max_drafts + 1, ErrorCode::invalid_argument, "max_context",
                 fmt::format(">= 1 + max_drafts = {}", s.max_drafts + 1),
                 std::to_string(s.max_context));
  DCPMLA_REQUIRE(s.padding_rows >= 0, ErrorCode::invalid_argument, "padding_rows", ">= 0",
                 std::to_string(s.padding_rows));
  DCPMLA_REQUIRE(s.extra_blocks >= 0, ErrorCode::invalid_argument, "extra_blocks", ">= 0",
                 std::to_string(s.extra_blocks));
  DCPMLA_REQUIRE(s.q_dtype == DType::f32 || s.q_dtype == DType::bf16, ErrorCode::dtype_mismatch,
                 "q_dtype", "fp32 or bf16", to_string(s.q_dtype));
}

// Builds the scenario of an explicit (Q, T, mask) list: block tables shared by all ranks (rank 0
// holds the most tokens of every request, every rank uses a prefix of the same row; ids are a
// random permutation of the cache and unused columns hold -1), then the query and the latents.
Scenario build(const ScenarioSpec& spec, std::span<const int> q_lens,
               std::span<const std::int64_t> total_lens, std::span<const Mask> masks,
               std::mt19937_64& rng) {
  const std::size_t B = q_lens.size();
  Scenario sc;
  sc.spec = spec;
  Batch& batch = sc.batch;
  batch.query_start_loc.push_back(0);
  for (std::size_t b = 0; b < B; ++b) {
    batch.query_start_loc.push_back(batch.query_start_loc.back() + q_lens[b]);
    batch.total_len.push_back(total_lens[b]);
    batch.mask.push_back(masks.empty() ? Mask::causal : masks[b]);
  }
  batch.num_tokens = batch.real_tokens() + spec.padding_rows;

  const Sharding rank0{spec.world, 0, spec.interleave};
  std::vector<std::int64_t> needed(B);
  std::int64_t total = 0;
  for (std::size_t b = 0; b < B; ++b) {
    needed[b] = (rank0.local_len(total_lens[b]) + spec.block_size - 1) / spec.block_size;
    total += needed[b];
  }
  batch.max_blocks = std::int32_t(*std::max_element(needed.begin(), needed.end()) + 1);
  sc.num_blocks = std::max<std::int64_t>(1, total + spec.extra_blocks);
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

  // Query ~ N(0, 0.5), latents ~ N(0, 1): with the DeepSeek scale the scores spread over a few
  // units, so the softmax is neither flat nor one-hot.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  sc.q.resize(std::size_t(batch.rows()) * spec.heads * kHeadDim);
  for (auto& x : sc.q) x = round_to(spec.q_dtype, 0.5f * normal(rng));
  sc.kv.resize(B);
  for (std::size_t b = 0; b < B; ++b) {
    sc.kv[b].resize(std::size_t(total_lens[b]) * kHeadDim);
    for (auto& x : sc.kv[b]) x = normal(rng);
  }
  return sc;
}

}  // namespace

float round_to(DType t, float x) {
  return t == DType::bf16 ? bf16_to_float(float_to_bf16(x)) : x;
}

double stored_value(float x, DType t, float k_scale) {
  switch (t) {
    case DType::f32:
      return x;
    case DType::bf16:
      return bf16_to_float(float_to_bf16(x));
    default:
      return double(fp8_e4m3_to_float(float_to_fp8_e4m3(x / k_scale))) * k_scale;
  }
}

Scenario make_scenario(const ScenarioSpec& spec) {
  validate_spec(spec);
  // Random scenarios are for DCP steps, which gather the query over heads.
  DCPMLA_REQUIRE(spec.heads % spec.world == 0, ErrorCode::invalid_argument, "heads",
                 fmt::format("a positive multiple of world {}", spec.world),
                 std::to_string(spec.heads));
  std::mt19937_64 rng(spec.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int B = spec.requests;
  std::vector<int> q_lens;
  std::vector<std::int64_t> total_lens;
  std::vector<Mask> masks;
  for (int b = 0; b < B; ++b) {
    // Draft counts differ per request: ragged by construction when max_drafts > 0.
    const int q_len = 1 + int(rng() % std::uint64_t(spec.max_drafts + 1));
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
    q_lens.push_back(q_len);
    total_lens.push_back(T);
    masks.push_back(unit(rng) < spec.full_mask_fraction ? Mask::full : Mask::causal);
  }
  return build(spec, q_lens, total_lens, masks, rng);
}

Scenario make_fixed_scenario(ScenarioSpec spec, std::span<const int> q_lens,
                             std::span<const std::int64_t> total_lens,
                             std::span<const Mask> masks) {
  const auto B = q_lens.size();
  DCPMLA_REQUIRE(B >= 1, ErrorCode::invalid_argument, "q_lens", "at least one request", "none");
  DCPMLA_REQUIRE(total_lens.size() == B, ErrorCode::shape_mismatch, "total_lens",
                 fmt::format("{} entries (one per request of q_lens)", B),
                 std::to_string(total_lens.size()));
  DCPMLA_REQUIRE(masks.empty() || masks.size() == B, ErrorCode::shape_mismatch, "masks",
                 fmt::format("0 or {} entries", B), std::to_string(masks.size()));
  for (std::size_t b = 0; b < B; ++b) {
    DCPMLA_REQUIRE(q_lens[b] >= 1, ErrorCode::invalid_argument, fmt::format("q_lens[{}]", b),
                   ">= 1", std::to_string(q_lens[b]));
    DCPMLA_REQUIRE(total_lens[b] >= q_lens[b], ErrorCode::inconsistent,
                   fmt::format("total_lens[{}]", b),
                   fmt::format(">= q_lens[{}] = {} (T includes the query tokens)", b, q_lens[b]),
                   std::to_string(total_lens[b]));
  }
  spec.requests = int(B);
  spec.max_drafts = *std::max_element(q_lens.begin(), q_lens.end()) - 1;
  spec.max_context = *std::max_element(total_lens.begin(), total_lens.end());
  spec.short_request = false;
  validate_spec(spec);
  std::mt19937_64 rng(spec.seed ^ 0x5eedf1dULL);
  return build(spec, q_lens, total_lens, masks, rng);
}

}  // namespace dcpmla::testing
