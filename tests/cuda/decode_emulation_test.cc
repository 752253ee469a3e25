// The real decode kernel source (src/cuda/decode_kernel.cuh) run on the CPU through a host
// emulation of threads, barriers and shuffles (cuda_emulation.h): no GPU needed. Checks every
// (q, cache, out) dtype instantiation against the CPU backend, and that the flattened and the
// native form give the same bits. Built with the sanitizers, it also checks every shared and
// global memory access of the kernel.
#include "cuda_emulation.h"
// The emulation shims must come first.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

#include "cuda/decode_kernel.cuh"
#include "cuda/launch_plan.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/merge.h"
#include "dcpmla/plan.h"
#include "sim/test_support.h"

namespace dcpmla::cuda {
namespace {

struct Result {
  std::vector<float> out;  // [rows, H, 512] (bf16 outputs widened)
  std::vector<float> lse;
};

// The rank cache as the sim writes it: NaN pages, then every position through the slot mapping.
HostKvCache make_cache(const sim::Scenario& sc, int rank) {
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

std::vector<std::uint8_t> encode_q(const sim::Scenario& sc) {
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

Result widen(const std::vector<std::uint8_t>& out, DType t, std::vector<float> lse) {
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

template <class QS, CacheKind C>
void run_kernel(const DecodeParams& p, int num_tiles) {
  dcpmla_emu::run_grid(num_tiles, 256, Layout<QS, KStore<C>>::kBytes,
                       [&] { decode_kernel<QS, C>(p); });
}

// One emulated launch of the decode tiles: the rank's cache, plan, launch plan, query and
// workspace, and the kernel parameters over them, final rows unset.
struct TileRun {
  HostKvCache cache;
  Plan plan;
  LaunchPlan lp;
  std::vector<std::uint8_t> q;
  std::vector<float> ws;
  DecodeParams p{};
};

std::unique_ptr<TileRun> prepare_tiles(const sim::Scenario& sc, int rank, const Batch& rb,
                                       const PlanLimits& limits) {
  const auto& spec = sc.spec;
  auto run = std::make_unique<TileRun>(TileRun{make_cache(sc, rank),
                                               make_plan(rb, {{spec.world, rank, spec.interleave},
                                                              spec.heads,
                                                              spec.block_size,
                                                              sc.num_blocks,
                                                              limits}),
                                               {},
                                               encode_q(sc),
                                               {}});
  run->lp = build_launch_plan(run->plan);
  run->ws.assign(decode_workspace_bytes(run->plan) / 4 + 1, 77.0f);
  const int H = spec.heads;
  const bool fp8 = spec.kv_dtype == DType::fp8_e4m3;
  const KvCacheRef ref = run->cache.ref();
  DecodeParams& p = run->p;
  p.tiles = run->lp.tiles.data();
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

void run_tiles(const sim::ScenarioSpec& spec, const TileRun& run) {
  const DecodeParams& p = run.p;
  const int n = int(run.lp.tiles.size());
  const bool qb = spec.q_dtype == DType::bf16;
  switch (spec.kv_dtype) {
    case DType::f32:
      qb ? run_kernel<bf16_bits, CacheKind::f32>(p, n) : run_kernel<float, CacheKind::f32>(p, n);
      break;
    case DType::bf16:
      qb ? run_kernel<bf16_bits, CacheKind::bf16>(p, n) : run_kernel<float, CacheKind::bf16>(p, n);
      break;
    default:
      qb ? run_kernel<bf16_bits, CacheKind::fp8>(p, n) : run_kernel<float, CacheKind::fp8>(p, n);
      break;
  }
}

// The CUDA decode path with the kernel emulated: launch plan, tiles, then the split merge and
// the padding fill done on the host the way split_merge.cu and fill_padding.cu do them.
Result emulated_decode(const sim::Scenario& sc, int rank, const Batch& rb, const PlanLimits& limits,
                       DType out_dtype) {
  const auto run = prepare_tiles(sc, rank, rb, limits);
  const int H = sc.spec.heads;
  const std::int64_t rows = run->plan.num_rows;
  std::vector<std::uint8_t> out(std::size_t(rows) * H * kLatentDim * dtype_size(out_dtype), 0xee);
  std::vector<float> lse(std::size_t(rows) * H, 123.0f);
  DecodeParams& p = run->p;
  p.final_rows = {out.data(), lse.data(), out_dtype == DType::bf16, 0, 0};
  run_tiles(sc.spec, *run);
  for (const MergeRow& m : run->lp.merge_rows) {
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
  for (std::int64_t i = run->lp.padding_begin * H; i < run->lp.padding_end * H; ++i) {
    std::memset(&out[i * kLatentDim * dtype_size(out_dtype)], 0,
                kLatentDim * dtype_size(out_dtype));
    lse[i] = -INFINITY;
  }
  return widen(out, out_dtype, std::move(lse));
}

Result cpu_decode(const sim::Scenario& sc, int rank, const PlanLimits& limits, DType out_dtype) {
  const auto& spec = sc.spec;
  HostKvCache cache = make_cache(sc, rank);
  const Plan plan = make_plan(
      sc.batch,
      {{spec.world, rank, spec.interleave}, spec.heads, spec.block_size, sc.num_blocks, limits});
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

sim::Scenario small_case(DType q, DType kv, int H, int bs, std::uint64_t seed) {
  sim::ScenarioSpec spec;
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

TEST(CudaDecodeEmulation, EveryInstantiationMatchesCpuBackend) {
  int seed = 1;
  const int heads[] = {1, 3, 16, 70};
  const int sizes[] = {1, 16, 64};
  for (DType q : {DType::f32, DType::bf16}) {
    for (DType kv : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
      for (DType out : {DType::f32, DType::bf16}) {
        if (out == DType::bf16 && q != DType::bf16) continue;
        const int H = heads[seed % 4], bs = sizes[seed % 3];
        const sim::Scenario sc = small_case(q, kv, H, bs, seed);
        PlanLimits limits;
        limits.kv_chunk_blocks = seed % 2 ? (bs == 1 ? 40 : 2) : 0;
        const int rank = seed % 2;
        ++seed;
        SCOPED_TRACE(testing::describe(sc.spec) + " out " + to_string(out) + " rank " +
                     std::to_string(rank) + " chunk " + std::to_string(limits.kv_chunk_blocks));
        const Result got = emulated_decode(sc, rank, sc.batch, limits, out);
        const Result want = cpu_decode(sc, rank, limits, out);
        const double tol = out == DType::bf16 ? 2e-2 : 1e-4;
        testing::expect_rows_close(got, want, tol, 1e-4);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaDecodeEmulation, FlattenedAndNativeGiveTheSameBits) {
  int seed = 40;
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    for (int chunk : {0, 1}) {
      const sim::Scenario sc = small_case(DType::bf16, kv, seed % 2 ? 3 : 16, 16, seed);
      ++seed;
      PlanLimits limits;
      limits.kv_chunk_blocks = chunk;
      const Batch flat = flatten(sc.batch);
      for (int rank = 0; rank < 2; ++rank) {
        SCOPED_TRACE(testing::describe(sc.spec) + " rank " + std::to_string(rank) + " chunk " +
                     std::to_string(chunk));
        const Result native = emulated_decode(sc, rank, sc.batch, limits, DType::f32);
        const Result flattened = emulated_decode(sc, rank, flat, limits, DType::f32);
        ASSERT_EQ(std::memcmp(native.out.data(), flattened.out.data(), native.out.size() * 4), 0);
        ASSERT_EQ(std::memcmp(native.lse.data(), flattened.lse.data(), native.lse.size() * 4), 0);
      }
    }
  }
}

// The other output form (DecodeArgs::send): the kernel writes each unsplit row's O and LSE
// straight into the a2a send rows. They must hold exactly what combine_pack makes of the plain
// f32 decode (bf16 payload: the same rounding of the same floats; f32: the same floats).
TEST(CudaDecodeEmulation, SendRowsAreThePackOfThePlainDecode) {
  int seed = 60;
  for (DType payload : {DType::bf16, DType::f32}) {
    for (int H : {16, 3}) {
      const sim::Scenario sc = small_case(DType::bf16, DType::bf16, H, 16, seed++);
      const int W = H == 16 ? 4 : 3, rank = seed % 2;
      SCOPED_TRACE(testing::describe(sc.spec) + " payload " + to_string(payload));
      const PlanLimits no_split;  // the split merge is not part of the kernel
      const auto plain = prepare_tiles(sc, rank, sc.batch, no_split);
      ASSERT_TRUE(plain->lp.merge_rows.empty());
      const std::int64_t rows = plain->plan.num_rows, real = plain->lp.padding_begin;
      std::vector<float> out(std::size_t(rows) * H * kLatentDim), lse(std::size_t(rows) * H);
      plain->p.final_rows = {out.data(), lse.data(), false, 0, 0};
      run_tiles(sc.spec, *plain);
      const std::int64_t row = packed_row(payload), slots = W * rows * (H / W) * row;
      const std::size_t bytes = std::size_t(slots) * dtype_size(payload);
      std::vector<std::uint8_t> want(bytes, 0xee), got(bytes, 0xee);
      make_cpu_backend(1)->combine_pack(
          {W, TensorRef(out.data(), DType::f32, {rows, H, kLatentDim}),
           TensorRef(lse.data(), DType::f32, {rows, H}),
           TensorRef(want.data(), payload, {W, rows, H / W, row})},
          nullptr);
      const auto packed = prepare_tiles(sc, rank, sc.batch, no_split);
      packed->p.final_rows = {got.data(), nullptr, payload == DType::bf16, H / W, rows};
      run_tiles(sc.spec, *packed);
      // The kernel writes the real rows; padding rows are the padding fill's.
      const std::size_t row_bytes = std::size_t(row) * dtype_size(payload);
      for (std::int64_t n = 0; n < real; ++n) {
        for (int h = 0; h < H; ++h) {
          const std::size_t at = std::size_t(((h / (H / W)) * rows + n) * (H / W) + h % (H / W));
          ASSERT_EQ(std::memcmp(&got[at * row_bytes], &want[at * row_bytes], row_bytes), 0)
              << "row " << n << " head " << h;
        }
      }
    }
  }
}

// The gathered query of a DCP step ([W, rows, H / W, 576], DecodeParams::q_group_heads) read in
// place gives the bits of the plain query, split requests included.
TEST(CudaDecodeEmulation, GatheredQueryGivesThePlainBits) {
  int seed = 70;
  for (DType q : {DType::bf16, DType::f32}) {
    for (int H : {16, 6}) {
      const sim::Scenario sc = small_case(q, DType::bf16, H, 16, seed++);
      const int W = H == 16 ? 4 : 3, rank = seed % 2;
      SCOPED_TRACE(testing::describe(sc.spec));
      PlanLimits split;
      split.kv_chunk_blocks = 2;
      auto run = [&](bool gathered) {
        auto t = prepare_tiles(sc, rank, sc.batch, split);
        const std::int64_t rows = t->plan.num_rows;
        if (gathered) {
          t->q = testing::gather_layout(t->q, rows, H, W);
          t->p.q = t->q.data();
          t->p.q_group_heads = H / W;
          t->p.q_rows = rows;
        }
        std::vector<float> out(std::size_t(rows) * H * (kLatentDim + 1), 3.0f);
        t->p.final_rows = {out.data(), out.data() + rows * H * kLatentDim, false, 0, 0};
        run_tiles(sc.spec, *t);
        out.insert(out.end(), t->ws.begin(), t->ws.end());  // the split rows' partials
        return out;
      };
      const auto plain = run(false), in_place = run(true);
      ASSERT_EQ(std::memcmp(in_place.data(), plain.data(), plain.size() * 4), 0);
    }
  }
}

}  // namespace
}  // namespace dcpmla::cuda
