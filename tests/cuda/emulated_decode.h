// The host side of an emulated decode launch (decode_emulation_test.cc: the FMA kernel,
// tc_emulation_test.cc: the tensor-core kernels): the rank's cache, plan, launch plan, query and
// kernel parameters, the split merge and padding fill done on the host as split_merge.cu and
// fill_padding.cu do them, and the CPU backend's result for comparison. Include it after the
// emulation shims (cuda_emulation.h).
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "cuda/decode/launch_plan.h"
#include "cuda/kernels.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/merge.h"
#include "dcpmla/plan.h"
#include "testing/test_support.h"

namespace dcpmla::cuda::emulated {

struct Result {
  std::vector<float> out;  // [rows, H, 512] (bf16 outputs widened)
  std::vector<float> lse;
};

// The rank cache as the sim writes it: NaN pages, then every position through the slot mapping.
inline HostKvCache make_cache(const testing::Scenario& sc, int rank) {
  const auto& spec = sc.spec;
  const float k_scale = spec.kv_dtype == DType::fp8_e4m3 ? spec.k_scale : 1.0f;
  HostKvCache cache(spec.kv_dtype, sc.num_blocks, spec.block_size, k_scale);
  cache.poison();
  const Sharding sh{spec.world, rank, spec.interleave};
  std::vector<float> latents;
  std::vector<std::int64_t> slots;
  for (int b = 0; b < sc.batch.num_requests(); ++b) {
    for (std::int64_t p = 0; p < sc.batch.total_len[b]; ++p) {
      latents.insert(latents.end(), sc.kv[b].begin() + p * kHeadDim,
                     sc.kv[b].begin() + (p + 1) * kHeadDim);
      slots.push_back(sh.slot(p, sc.batch.block_row(b), spec.block_size));
    }
  }
  const auto n = std::int64_t(slots.size());
  make_cpu_backend(1)->write_kv({TensorRef(latents.data(), DType::f32, {n, kHeadDim}),
                                 TensorRef(slots.data(), DType::i64, {n}), cache.ref()},
                                nullptr);
  return cache;
}

// How a test's plans split KV: the device model (tile_pairs must be the kernels' kTilePairs;
// workers 0: no split unless kv_chunk_blocks) and a forced chunk (> 0).
struct Split {
  DeviceModel model{0, kTilePairs, 256};
  int kv_chunk_blocks = 0;
};

inline PlanConfig plan_config(const testing::Scenario& sc, int rank, const Split& split) {
  const auto& spec = sc.spec;
  PlanConfig c;
  c.sharding = {spec.world, rank, spec.interleave};
  c.num_heads = spec.heads;
  c.block_size = spec.block_size;
  c.num_blocks = sc.num_blocks;
  c.model = split.model;
  c.kv_chunk_blocks = split.kv_chunk_blocks;
  return c;
}

inline std::vector<std::uint8_t> encode_q(const testing::Scenario& sc) {
  const DType t = sc.spec.q_dtype;
  std::vector<std::uint8_t> q(sc.q.size() * dtype_size(t));
  for (std::size_t i = 0; i < sc.q.size(); ++i) {
    if (t == DType::bf16) {
      const std::uint16_t h = float_to_bf16(sc.q[i]);
      std::memcpy(&q[i * 2], &h, 2);
    } else {
      std::memcpy(&q[i * 4], &sc.q[i], 4);
    }
  }
  return q;
}

inline Result widen(const std::vector<std::uint8_t>& out, DType t, std::vector<float> lse) {
  Result r;
  r.out.resize(out.size() / dtype_size(t));
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    if (t == DType::bf16) {
      std::uint16_t h;
      std::memcpy(&h, &out[i * 2], 2);
      r.out[i] = bf16_to_float(h);
    } else {
      std::memcpy(&r.out[i], &out[i * 4], 4);
    }
  }
  r.lse = std::move(lse);
  return r;
}

// One emulated launch of the decode tiles: the rank's cache, plan (its work items are the
// tiles, in launch order), query and workspace, and the kernel parameters over them, final rows
// unset.
struct TileRun {
  HostKvCache cache;
  Plan plan;
  std::vector<std::uint8_t> q;
  std::vector<float> ws;
  DecodeParams p{};
};

inline std::unique_ptr<TileRun> prepare_tiles(const testing::Scenario& sc, int rank,
                                              const Batch& rb, const Split& split) {
  const auto& spec = sc.spec;
  auto run = std::make_unique<TileRun>(
      TileRun{make_cache(sc, rank), make_plan(rb, plan_config(sc, rank, split)), encode_q(sc), {}});
  run->ws.assign(decode_workspace_bytes(run->plan) / 4 + 1, 77.0f);
  const int H = spec.heads;
  const bool fp8 = spec.kv_dtype == DType::fp8_e4m3;
  const KvCacheRef ref = run->cache.ref();
  DecodeParams& p = run->p;
  p.header = nullptr;  // every tile runs
  p.tiles = run->plan.work.data();
  p.row_bound = run->plan.row_local_bound.data();
  p.q = run->q.data();
  p.cache = ref.data;
  p.block_table = rb.block_table.data();
  p.max_blocks = rb.max_blocks;
  p.num_blocks = sc.num_blocks;
  p.block_size = spec.block_size;
  p.num_heads = H;
  p.score_scale = spec.softmax_scale * (fp8 ? ref.k_scale : 1.0f);
  p.out_scale = fp8 ? ref.k_scale : 1.0f;
  p.partial_out = run->ws.data();
  p.partial_lse = run->ws.data() + std::size_t(run->plan.num_partial_rows) * H * kLatentDim;
  return run;
}

// Runs the kernel under test over every tile of a prepared launch.
using TileRunner = std::function<void(const testing::ScenarioSpec&, const TileRun&)>;

// The CUDA decode path with the kernel emulated: the plan's work items as tiles, then the split
// merge and the padding fill done on the host the way split_merge.cu and fill_padding.cu do them.
inline Result emulated_decode(const testing::Scenario& sc, int rank, const Batch& rb,
                              const Split& split, DType out_dtype, const TileRunner& run_tiles) {
  const auto run = prepare_tiles(sc, rank, rb, split);
  const int H = sc.spec.heads;
  const std::int64_t rows = run->plan.num_rows;
  std::vector<std::uint8_t> out(std::size_t(rows) * H * kLatentDim * dtype_size(out_dtype), 0xee);
  std::vector<float> lse(std::size_t(rows) * H, 123.0f);
  DecodeParams& p = run->p;
  p.final_rows = {out.data(), lse.data(), out_dtype == DType::bf16, 0, 0};
  run_tiles(sc.spec, *run);
  for (const MergeRow& m : run->plan.merges) {
    for (int h = 0; h < H; ++h) {
      const std::int64_t first = std::int64_t(m.first_partial_row) * H + h;
      const long stride = long(m.split_stride_rows) * H;
      float merged[kLatentDim];
      const std::int64_t row = std::int64_t(m.out_row) * H + h;
      lse[row] = merge::merge_partials(m.num_splits, p.partial_out + first * kLatentDim,
                                       stride * kLatentDim, p.partial_lse + first, stride,
                                       kLatentDim, merged, [](float x) { return x; });
      for (int d = 0; d < kLatentDim; ++d) {
        if (p.final_rows.bf16) {
          const std::uint16_t v = float_to_bf16(merged[d]);
          std::memcpy(&out[(row * kLatentDim + d) * 2], &v, 2);
        } else {
          std::memcpy(&out[(row * kLatentDim + d) * 4], &merged[d], 4);
        }
      }
    }
  }
  for (std::int64_t i = run->plan.num_real_rows * H; i < run->plan.num_rows * H; ++i) {
    std::memset(&out[i * kLatentDim * dtype_size(out_dtype)], 0,
                kLatentDim * dtype_size(out_dtype));
    lse[i] = -INFINITY;
  }
  return widen(out, out_dtype, std::move(lse));
}

inline Result cpu_decode(const testing::Scenario& sc, int rank, const Split& split,
                         DType out_dtype) {
  const auto& spec = sc.spec;
  HostKvCache cache = make_cache(sc, rank);
  const Plan plan = make_plan(sc.batch, plan_config(sc, rank, split));
  const int H = spec.heads;
  const std::int64_t rows = plan.num_rows;
  auto q = encode_q(sc);
  std::vector<std::uint8_t> out(std::size_t(rows) * H * kLatentDim * dtype_size(out_dtype));
  std::vector<float> lse(std::size_t(rows) * H);
  std::vector<std::uint8_t> ws(decode_workspace_bytes(plan));
  DecodeArgs a;
  a.plan = &plan;
  a.q = TensorRef(q.data(), spec.q_dtype, {rows, H, kHeadDim});
  a.cache = cache.ref();
  a.block_table = TensorRef(sc.batch.block_table.data(), DType::i32,
                            {sc.batch.num_requests(), sc.batch.max_blocks});
  a.out = TensorRef(out.data(), out_dtype, {rows, H, kLatentDim});
  a.lse = TensorRef(lse.data(), DType::f32, {rows, H});
  a.softmax_scale = spec.softmax_scale;
  a.workspace = TensorRef(ws.data(), DType::fp8_e4m3, {std::int64_t(ws.size())});
  make_cpu_backend(2)->decode(a, nullptr);
  return widen(out, out_dtype, std::move(lse));
}

// A small DCP batch: 4 requests with Q 5, 1, 2, 3 (causal but the last), 2 padding rows.
inline testing::Scenario small_case(DType q, DType kv, int H, int bs, std::uint64_t seed) {
  testing::ScenarioSpec spec;
  spec.world = 2;
  spec.heads = H;
  spec.block_size = bs;
  spec.kv_dtype = kv;
  spec.q_dtype = q;
  spec.seed = seed;
  return testing::custom_scenario(spec, {5, 1, 2, 3}, {5, 1, 150, 70},
                                  {Mask::causal, Mask::causal, Mask::causal, Mask::full},
                                  /*padding=*/2);
}

}  // namespace dcpmla::cuda::emulated
