// The real decode kernel source (src/cuda/decode/fma/fma_kernel.cuh) run on the CPU through a host
// emulation of threads, barriers and shuffles (cuda_emulation.h): no GPU needed. Checks every
// (q, cache, out) dtype instantiation against the CPU backend, and that the flattened and the
// native form give the same bits. Built with the sanitizers, it also checks every shared and
// global memory access of the kernel.
#include "cuda_emulation.h"
// The emulation shims must come first.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "cuda/decode/fma/fma_kernel.cuh"
#include "emulated_decode.h"

namespace dcpmla::cuda {
namespace {

using namespace emulated;

template <class QS, CacheKind C>
void run_kernel(const DecodeParams& p, int num_tiles) {
  dcpmla_emu::run_grid(num_tiles, 256, Layout<QS, KStore<C>>::kBytes,
                       [&] { fma_decode_kernel<QS, C>(p); });
}

void run_tiles(const testing::ScenarioSpec& spec, const TileRun& run) {
  const DecodeParams& p = run.p;
  const int n = int(run.plan.work.size());
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

TEST(CudaDecodeEmulation, EveryInstantiationMatchesCpuBackend) {
  int seed = 1;
  const int heads[] = {1, 3, 16, 70};
  const int sizes[] = {1, 16, 64};
  for (DType q : {DType::f32, DType::bf16}) {
    for (DType kv : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
      for (DType out : {DType::f32, DType::bf16}) {
        if (out == DType::bf16 && q != DType::bf16) continue;
        const int H = heads[seed % 4], bs = sizes[seed % 3];
        const testing::Scenario sc = small_case(q, kv, H, bs, seed);
        Split limits;
        limits.kv_chunk_blocks = seed % 2 ? (bs == 1 ? 40 : 2) : 0;
        const int rank = seed % 2;
        ++seed;
        SCOPED_TRACE(testing::describe(sc.spec) + " out " + to_string(out) + " rank " +
                     std::to_string(rank) + " chunk " + std::to_string(limits.kv_chunk_blocks));
        const Result got = emulated_decode(sc, rank, sc.batch, limits, out, run_tiles);
        const Result want = cpu_decode(sc, rank, limits, out);
        const double tol = out == DType::bf16 ? 2e-2 : 1e-4;
        testing::expect_rows_close(got, want, tol, 1e-4);
        if (HasFatalFailure()) return;
        // And against the double-precision oracle, independent of the CPU backend.
        testing::expect_rank_matches_reference(sc, rank, got.out, got.lse, tol, 2e-4);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaDecodeEmulation, FlattenedAndNativeGiveTheSameBits) {
  int seed = 40;
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    for (int chunk : {0, 1}) {
      const testing::Scenario sc = small_case(DType::bf16, kv, seed % 2 ? 3 : 16, 16, seed);
      ++seed;
      Split limits;
      limits.kv_chunk_blocks = chunk;
      const Batch flat = flatten(sc.batch);
      for (int rank = 0; rank < 2; ++rank) {
        SCOPED_TRACE(testing::describe(sc.spec) + " rank " + std::to_string(rank) + " chunk " +
                     std::to_string(chunk));
        const Result native = emulated_decode(sc, rank, sc.batch, limits, DType::f32, run_tiles);
        const Result flattened = emulated_decode(sc, rank, flat, limits, DType::f32, run_tiles);
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
      const testing::Scenario sc = small_case(DType::bf16, DType::bf16, H, 16, seed++);
      const int W = H == 16 ? 4 : 3, rank = seed % 2;
      SCOPED_TRACE(testing::describe(sc.spec) + " payload " + to_string(payload));
      const Split no_split;  // the split merge is not part of the kernel
      const auto plain = prepare_tiles(sc, rank, sc.batch, no_split);
      ASSERT_TRUE(plain->plan.merges.empty());
      const std::int64_t rows = plain->plan.num_rows, real = plain->plan.num_real_rows;
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
      const testing::Scenario sc = small_case(q, DType::bf16, H, 16, seed++);
      const int W = H == 16 ? 4 : 3, rank = seed % 2;
      SCOPED_TRACE(testing::describe(sc.spec));
      Split split;
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
