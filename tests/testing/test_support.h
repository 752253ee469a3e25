// Shared helpers of the test suites: hand-built scenarios with explicit (Q, T) per request, a
// single-rank decode harness over a host cache, a per-rank double-precision oracle, and printing.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dcpmla/backend.h"
#include "dcpmla/cache.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/numeric.h"
#include "dcpmla/plan.h"
#include "dcpmla/sharding.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"

namespace dcpmla::testing {

// One CPU thread per simulated rank: the suites parallelise over ctest processes instead.
inline BackendFactory cpu1() {
  return [](int) { return make_cpu_backend(1); };
}

// A scenario with exactly the given query lengths, global lengths and masks (empty: causal), plus
// `padding` padding rows (testing::make_fixed_scenario with spec.padding_rows = padding).
inline testing::Scenario custom_scenario(testing::ScenarioSpec spec, const std::vector<int>& q_lens,
                                         const std::vector<std::int64_t>& total_len,
                                         const std::vector<Mask>& masks = {}, int padding = 0) {
  spec.padding_rows = padding;
  return testing::make_fixed_scenario(spec, q_lens, total_len, masks);
}

// The SPEC's end-to-end batches (query lengths, global lengths, masks; empty masks = causal): the
// warm-up (8, 1) T = [100, 40], the ragged (3, 1) T = [31, 35] causal, non-causal and mixed,
// and the ragged (8, 2) T = [100, 40].
struct SpecBatch {
  std::vector<int> q;
  std::vector<std::int64_t> t;
  std::vector<Mask> masks;
};
inline std::vector<SpecBatch> spec_batches() {
  return {{{8, 1}, {100, 40}, {}},
          {{3, 1}, {31, 35}, {}},
          {{3, 1}, {31, 35}, {Mask::full, Mask::full}},
          {{3, 1}, {31, 35}, {Mask::causal, Mask::full}},
          {{8, 2}, {100, 40}, {}}};
}

// One decode's rows against another's (each with .out [rows * H * 512] and .lse [rows * H] as
// floats): rows empty in `want` must be exactly O = 0, LSE = -inf in `got`; the others within
// out_tol and lse_tol.
template <class Result>
void expect_rows_close(const Result& got, const Result& want, double out_tol, double lse_tol) {
  ASSERT_EQ(got.lse.size(), want.lse.size());
  for (std::size_t k = 0; k < want.lse.size(); ++k) {
    if (std::isinf(want.lse[k])) {
      ASSERT_EQ(got.lse[k], want.lse[k]) << "(row, head) " << k;
      for (int d = 0; d < kLatentDim; ++d) {
        ASSERT_EQ(got.out[k * kLatentDim + d], 0.0f) << "(row, head) " << k;
      }
      continue;
    }
    ASSERT_NEAR(got.lse[k], want.lse[k], lse_tol) << "(row, head) " << k;
    for (int d = 0; d < kLatentDim; ++d) {
      ASSERT_NEAR(got.out[k * kLatentDim + d], want.out[k * kLatentDim + d], out_tol)
          << "(row, head) " << k << " dim " << d;
    }
  }
}

// Each request's second half of latents scaled by `factor`: a row's running max then rises on
// later KV tiles, so decoders rescale their partial O between tiles (random latents alone seldom
// make a lazy rescale fire after the first tile).
inline void raise_second_halves(testing::Scenario& sc, float factor) {
  for (auto& latents : sc.kv) {
    for (std::size_t i = latents.size() / kHeadDim / 2 * kHeadDim; i < latents.size(); ++i) {
      latents[i] *= factor;
    }
  }
}

// The same problem with every physical block id renamed through a random permutation of the
// cache (num_blocks unchanged): the results must not change by a single bit.
inline testing::Scenario permute_block_ids(const testing::Scenario& sc, std::uint64_t seed) {
  // A random cyclic permutation (one n-cycle): no id keeps its place when num_blocks >= 2.
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> order(std::size_t(sc.num_blocks)), perm(order.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::size_t k = 0; k < order.size(); ++k) perm[order[k]] = order[(k + 1) % order.size()];
  testing::Scenario out = sc;
  for (auto& id : out.batch.block_table) {
    if (id >= 0) id = perm[std::size_t(id)];
  }
  return out;
}

inline std::string describe(const testing::ScenarioSpec& s) {
  return fmt::format(
      "ScenarioSpec{{world={}, interleave={}, heads={}, requests={}, max_drafts={}, "
      "block_size={}, max_context={}, short_request={}, full_mask_fraction={}, padding_rows={}, "
      "extra_blocks={}, kv_dtype={}, q_dtype={}, k_scale={}, softmax_scale={}, seed={}}}",
      s.world, s.interleave, s.heads, s.requests, s.max_drafts, s.block_size, s.max_context,
      s.short_request, s.full_mask_fraction, s.padding_rows, s.extra_blocks, to_string(s.kv_dtype),
      to_string(s.q_dtype), s.k_scale, s.softmax_scale, s.seed);
}

inline std::string describe(const testing::RunOptions& o) {
  const std::string model =
      o.model ? fmt::format("{{workers={}, tile_pairs={}, min_split_tokens={}}}", o.model->workers,
                            o.model->tile_pairs, o.model->min_split_tokens)
              : std::string("the backend's");
  return fmt::format(
      "RunOptions{{combine={}, combine_payload={}, model={}, kv_chunk_blocks={}, device_plan={}, "
      "poison={}, flatten={}, see_future={}}}",
      to_string(o.combine), to_string(o.combine_payload), model, o.kv_chunk_blocks, o.device_plan,
      o.poison, o.flatten, o.see_future);
}

inline std::string describe_batch(const Batch& b) {
  std::string s = "Q/T:";
  for (int i = 0; i < b.num_requests(); ++i) {
    s += fmt::format(" {}/{}{}", b.q_len(i), b.total_len[i],
                     b.mask_of(i) == Mask::full ? "(full)" : "");
  }
  return s + fmt::format(", rows {}", b.rows());
}

// A run's scenario, options and batch, for a failure message.
inline std::string describe_run(const testing::Scenario& sc, const testing::RunOptions& o) {
  return describe(sc.spec) + "\n" + describe(o) + "\n" + describe_batch(sc.batch);
}

inline std::string describe(const testing::Comparison& c) {
  std::string s = fmt::format("max|dO| {:.3e} max|dLSE| {:.3e} padding_exact {}", c.max_out_error,
                              c.max_lse_error, c.padding_exact);
  for (std::size_t b = 0; b < c.requests.size(); ++b) {
    const auto& r = c.requests[b];
    if (!r.pass) {
      s += fmt::format("\n  request {} (Q {}, T {}): dO {:.3e} dLSE {:.3e} empty_rows_exact {}", b,
                       r.q_len, r.total_len, r.max_out_error, r.max_lse_error, r.empty_rows_exact);
    }
  }
  return s;
}

// One rank's decode run directly on a CPU backend over a host cache (no collectives): the
// per-rank partial result for all H heads.
// Rank `rank`'s cache of a scenario: every position of every request goes through the slot
// mapping and the CPU writer; only the owner writes. Unused pages stay NaN when poisoned.
inline HostKvCache rank_cache(const testing::Scenario& sc, int rank, bool poison = true) {
  const auto& spec = sc.spec;
  const Batch& batch = sc.batch;
  const Sharding sh{spec.world, rank, spec.interleave};
  const float k_scale = spec.kv_dtype == DType::fp8_e4m3 ? spec.k_scale : 1.0f;
  HostKvCache cache(spec.kv_dtype, sc.num_blocks, spec.block_size, k_scale);
  if (poison) cache.poison();
  std::vector<float> latents;
  std::vector<std::int64_t> slots;
  for (int b = 0; b < batch.num_requests(); ++b) {
    for (std::int64_t p = 0; p < batch.total_len[b]; ++p) {
      latents.insert(latents.end(), sc.kv[b].begin() + p * kHeadDim,
                     sc.kv[b].begin() + (p + 1) * kHeadDim);
      slots.push_back(sh.slot(p, batch.block_row(b), spec.block_size));
    }
  }
  const auto n = std::int64_t(slots.size());
  make_cpu_backend(1)->write_kv({TensorRef(latents.data(), DType::f32, {n, kHeadDim}),
                                 TensorRef(slots.data(), DType::i64, {n}), cache.ref()},
                                nullptr);
  return cache;
}

// How decode_rank plans: the device model (the default, workers = 0, never splits) and a fixed
// chunk (> 0: every request's local KV in chunks of this many blocks).
struct PlanChoice {
  DeviceModel model = {};
  int kv_chunk_blocks = 0;
};

struct RankDecode {
  Plan plan;
  std::vector<float> out;  // [rows, H, 512]
  std::vector<float> lse;  // [rows, H]
};

inline RankDecode decode_rank(const testing::Scenario& sc, int rank, const PlanChoice& choice = {},
                              bool poison = true, const Batch* run_batch = nullptr) {
  const auto& spec = sc.spec;
  const Batch& batch = sc.batch;
  const Batch& rb = run_batch ? *run_batch : batch;
  const Sharding sh{spec.world, rank, spec.interleave};
  HostKvCache cache = rank_cache(sc, rank, poison);
  auto backend = make_cpu_backend(1);

  RankDecode r;
  r.plan = make_plan(
      rb, {sh, spec.heads, spec.block_size, sc.num_blocks, choice.model, choice.kv_chunk_blocks});
  const std::int64_t rows = rb.rows();
  const int H = spec.heads;
  r.out.assign(std::size_t(rows) * H * kLatentDim, NAN);
  r.lse.assign(std::size_t(rows) * H, NAN);
  std::vector<std::uint8_t> ws(decode_workspace_bytes(r.plan));
  DecodeArgs args;
  args.plan = &r.plan;
  args.q = TensorRef(sc.q.data(), DType::f32, {rows, H, kHeadDim});
  args.cache = cache.ref();
  args.block_table =
      TensorRef(rb.block_table.data(), DType::i32, {rb.num_requests(), rb.max_blocks});
  args.out = TensorRef(r.out.data(), DType::f32, {rows, H, kLatentDim});
  args.lse = TensorRef(r.lse.data(), DType::f32, {rows, H});
  args.softmax_scale = spec.softmax_scale;
  args.workspace = TensorRef(ws.data(), DType::fp8_e4m3, {std::int64_t(ws.size())});
  backend->decode(args, nullptr);
  return r;
}

// Double-precision attention of one row and head over the global positions g < bound that
// `rank` owns (brute force over positions, no local-index arithmetic). Returns (O, LSE);
// (0, -inf) when the rank owns none of them.
struct LocalRef {
  std::vector<double> out;
  double lse;
};
inline LocalRef local_reference(const testing::Scenario& sc, int rank, int b, std::int64_t row,
                                int h, std::int64_t bound) {
  const auto& spec = sc.spec;
  const float k_scale = spec.kv_dtype == DType::fp8_e4m3 ? spec.k_scale : 1.0f;
  const float* q = &sc.q[(std::size_t(row) * spec.heads + h) * kHeadDim];
  std::vector<double> scores;
  std::vector<std::int64_t> pos;
  for (std::int64_t g = 0; g < bound; ++g) {
    if ((g / spec.interleave) % spec.world != rank) continue;
    double s = 0;
    for (int d = 0; d < kHeadDim; ++d) {
      s += double(q[d]) *
           stored_value(sc.kv[b][std::size_t(g) * kHeadDim + d], spec.kv_dtype, k_scale);
    }
    scores.push_back(s * spec.softmax_scale);
    pos.push_back(g);
  }
  LocalRef r{std::vector<double>(kLatentDim, 0.0), -INFINITY};
  if (scores.empty()) return r;
  const double mx = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double s : scores) sum += std::exp(s - mx);
  for (std::size_t k = 0; k < scores.size(); ++k) {
    const double p = std::exp(scores[k] - mx) / sum;
    for (int d = 0; d < kLatentDim; ++d) {
      r.out[d] +=
          p * stored_value(sc.kv[b][std::size_t(pos[k]) * kHeadDim + d], spec.kv_dtype, k_scale);
    }
  }
  r.lse = mx + std::log(sum);
  return r;
}

// True when (row, head h) is exactly O = 0 and LSE = -inf.
inline bool row_is_empty(const std::vector<float>& out, const std::vector<float>& lse, int H,
                         std::int64_t row, int h) {
  const std::size_t rh = std::size_t(row) * H + h;
  if (!(std::isinf(lse[rh]) && lse[rh] < 0)) return false;
  for (int d = 0; d < kLatentDim; ++d) {
    if (!(out[rh * kLatentDim + d] == 0.0f)) return false;
  }
  return true;
}

// One rank's decode result (out [rows, H, 512], lse [rows, H], floats) against local_reference
// in double: every real (row, head) within the absolute tolerances, or exactly O = 0,
// LSE = -inf where the row sees no key on the rank; padding rows exactly O = 0, LSE = -inf.
// The row's bound is SPEC section 3 written out, not the library's row_global_bound.
inline void expect_rank_matches_reference(const testing::Scenario& sc, int rank,
                                          const std::vector<float>& out,
                                          const std::vector<float>& lse, double out_tol,
                                          double lse_tol) {
  const Batch& batch = sc.batch;
  const int H = sc.spec.heads;
  for (int b = 0; b < batch.num_requests(); ++b) {
    const int Q = batch.q_len(b);
    const std::int64_t T = batch.total_len[b];
    for (int j = 0; j < Q; ++j) {
      const std::int64_t row = batch.query_start_loc[b] + j;
      const std::int64_t bound = batch.mask_of(b) == Mask::full ? T : T - Q + 1 + j;
      for (int h = 0; h < H; ++h) {
        const LocalRef want = local_reference(sc, rank, b, row, h, bound);
        const std::size_t rh = std::size_t(row) * H + h;
        if (std::isinf(want.lse)) {
          ASSERT_TRUE(row_is_empty(out, lse, H, row, h))
              << "row " << row << " head " << h << " sees no key on rank " << rank
              << " but is not exactly O = 0, LSE = -inf (lse " << lse[rh] << ")";
          continue;
        }
        ASSERT_NEAR(lse[rh], want.lse, lse_tol) << "row " << row << " head " << h;
        double err = 0;
        for (int d = 0; d < kLatentDim; ++d) {
          const double e = std::abs(out[rh * kLatentDim + d] - want.out[d]);
          err = std::max(err, std::isnan(e) ? INFINITY : e);
        }
        ASSERT_LE(err, out_tol) << "row " << row << " head " << h;
      }
    }
  }
  for (std::int64_t row = batch.real_tokens(); row < batch.rows(); ++row) {
    for (int h = 0; h < H; ++h) {
      ASSERT_TRUE(row_is_empty(out, lse, H, row, h)) << "padding row " << row;
    }
  }
}

// q [rows, H, 576] (any element size) -> the gathered [W, rows, H / W, 576] layout.
inline std::vector<std::uint8_t> gather_layout(const std::vector<std::uint8_t>& q,
                                               std::int64_t rows, int H, int W) {
  const std::size_t pair = q.size() / std::size_t(rows * H), Hl = std::size_t(H / W);
  std::vector<std::uint8_t> g(q.size());
  for (std::int64_t n = 0; n < rows; ++n) {
    for (int h = 0; h < H; ++h) {
      const std::size_t slot =
          (std::size_t(h) / Hl * std::size_t(rows) + std::size_t(n)) * Hl + std::size_t(h) % Hl;
      std::memcpy(&g[slot * pair], &q[(std::size_t(n) * H + std::size_t(h)) * pair], pair);
    }
  }
  return g;
}

}  // namespace dcpmla::testing
