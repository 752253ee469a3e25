// The CUDA backend's pieces, one at a time, against the CPU backend: memory, KV write, decode of
// one rank (every dtype combination, splits, padding), the combine kernels, the merge vectors of
// the SPEC, streams, graph capture and the argument checks.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "dcpmla/error.h"
#include "dcpmla/merge.h"
#include "gpu_test_support.h"

namespace dcpmla {
namespace {

using gpu_testing::decode_values;
using gpu_testing::DecodeForm;
using gpu_testing::encode;
using gpu_testing::make_backend;
using gpu_testing::on_cpu;
using gpu_testing::run_decode;
using gpu_testing::to_device;
using gpu_testing::to_host;
using testing::custom_scenario;

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// LSE values with the awkward cases mixed in: -inf (empty), NaN and +inf (garbage = empty).
std::vector<float> random_lse(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(2.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    switch (rng() % 8) {
      case 0:
        x = -INFINITY;
        break;
      case 1:
        x = NAN;
        break;
      case 2:
        x = INFINITY;
        break;
      default:
        x = normal(rng);
        break;
    }
  }
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << what << "[" << i << "]: " << got[i] << " vs " << want[i];
      continue;
    }
    ASSERT_LE(std::abs(double(got[i]) - want[i]), rel * std::max(1.0, std::abs(double(want[i]))))
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

// One rank-0 decode of a scenario's batch on a backend: bf16 query, cache (from host values),
// output and LSE, a block table and a workspace of `workspace_bytes`, and the DecodeArgs over
// them (plan left to the caller).
struct Bf16Decode {
  Bf16Decode(Backend& be_, const testing::Scenario& sc,
             const std::vector<std::uint16_t>& cache_host, std::size_t workspace_bytes)
      : be(be_),
        rows(sc.batch.rows()),
        heads(sc.spec.heads),
        cache(to_device(be, cache_host)),
        q(to_device(be, encode(sc.q, DType::bf16))),
        bt(to_device(be, sc.batch.block_table)),
        out(be, std::size_t(rows) * heads * kLatentDim * 2),
        lse(be, std::size_t(rows) * heads * 4),
        ws(be, workspace_bytes) {
    args.q = q.tensor(DType::bf16, {rows, heads, kHeadDim});
    args.cache = {cache.data(), DType::bf16, sc.num_blocks, sc.spec.block_size, 1.0f};
    args.block_table = bt.tensor(DType::i32, {sc.batch.num_requests(), sc.batch.max_blocks});
    args.out = out.tensor(DType::bf16, {rows, heads, kLatentDim});
    args.lse = lse.tensor(DType::f32, {rows, heads});
    args.softmax_scale = sc.spec.softmax_scale;
    args.workspace = ws.tensor(DType::fp8_e4m3, {std::int64_t(ws.bytes())});
  }
  std::vector<std::uint8_t> out_bytes() {
    return to_host<std::uint8_t>(be, out.data(), out.bytes());
  }
  std::vector<float> lse_values() {
    return to_host<float>(be, lse.data(), std::size_t(rows) * heads);
  }
  // Sets out and LSE to garbage on s (so a run that writes nothing is caught).
  void poison(cudaStream_t s) {
    EXPECT_EQ(cudaMemsetAsync(out.data(), 0xff, out.bytes(), s), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(lse.data(), 0xff, lse.bytes(), s), cudaSuccess);
  }

  Backend& be;
  std::int64_t rows;
  int heads;
  DeviceBuffer cache, q, bt, out, lse, ws;
  DecodeArgs args;
};

TEST(CudaBackend, AvailableAndNamed) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  if (!on_cpu()) {
    EXPECT_EQ(be->name(), "cuda");
  }
}

TEST(CudaBackend, MemoryUploadDownloadCopyAccumulate) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  EXPECT_EQ(DeviceBuffer(*be, 0).data(), nullptr);
  const auto a = random_floats(1000, 1), b = random_floats(1000, 2);
  const DeviceBuffer da = to_device(*be, a);
  const DeviceBuffer db = to_device(*be, b);
  DeviceBuffer dc(*be, a.size() * 4);
  be->copy(dc.data(), da.data(), a.size() * 4, nullptr);
  EXPECT_EQ(to_host<float>(*be, dc.data(), a.size()), a);
  be->accumulate(static_cast<float*>(dc.data()), static_cast<const float*>(db.data()), 999,
                 nullptr);
  const auto c = to_host<float>(*be, dc.data(), a.size());
  for (std::size_t i = 0; i < 999; ++i) ASSERT_EQ(c[i], a[i] + b[i]);
  EXPECT_EQ(c[999], a[999]);  // count is respected
}

// Negative and out-of-range slots are skipped (the device cannot throw); every written entry is
// bit-identical to the CPU backend's for every latent and cache dtype.
TEST(CudaBackend, WriteKvMatchesCpuAndSkipsBadSlots) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  auto cpu = make_cpu_backend(1);
  const std::int64_t num_blocks = 3, bs = 4, capacity = num_blocks * bs;
  const std::vector<std::int64_t> slots = {-1, 3, capacity, 5, -7, 11, capacity + 100, 0};
  std::vector<std::int64_t> valid = slots;
  for (auto& s : valid) {
    if (s < 0 || s >= capacity) s = -1;
  }
  const auto n = std::int64_t(slots.size());
  const auto latents = random_floats(std::size_t(n) * kHeadDim, 3, 0.5f);
  for (DType lat : {DType::f32, DType::bf16}) {
    for (DType kv : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
      SCOPED_TRACE(std::string(to_string(lat)) + " -> " + to_string(kv));
      const float k_scale = kv == DType::fp8_e4m3 ? 0.0625f : 1.0f;
      HostKvCache host(kv, num_blocks, int(bs), k_scale);
      KvCacheRef ref = host.ref();
      std::vector<std::uint8_t> pattern(ref.bytes(), 0x11);
      std::memcpy(ref.data, pattern.data(), pattern.size());
      const auto lat_bytes = encode(latents, lat);
      cpu->write_kv({TensorRef(lat_bytes.data(), lat, {n, kHeadDim}),
                     TensorRef(valid.data(), DType::i64, {n}), ref},
                    nullptr);
      const std::vector<std::uint8_t> want(static_cast<std::uint8_t*>(ref.data),
                                           static_cast<std::uint8_t*>(ref.data) + ref.bytes());

      const DeviceBuffer dcache = to_device(*be, pattern);
      const DeviceBuffer dlat = to_device(*be, lat_bytes);
      const DeviceBuffer dslots = to_device(*be, on_cpu() ? valid : slots);
      KvCacheRef dref{dcache.data(), kv, num_blocks, int(bs), k_scale};
      be->write_kv({dlat.tensor(lat, {n, kHeadDim}), dslots.tensor(DType::i64, {n}), dref},
                   nullptr);
      EXPECT_EQ(to_host<std::uint8_t>(*be, dcache.data(), want.size()), want);
    }
  }
}

// The log-sum-exp merge of S partial states of any width, f32 and bf16 payloads and outputs,
// natural and base-2 LSE: the CPU backend's result, up to the rounding of fused multiply-adds;
// empty states (L = -inf, NaN payload) skipped, pairs without a state O = 0 / L = -inf.
TEST(CudaBackend, MergeStatesMatchesCpu) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  auto cpu = make_cpu_backend(1);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (const auto& [S, D] : {std::pair{2, 512}, std::pair{7, 96}, std::pair{1, 5}}) {
    const std::int64_t N = 3, H = 5, pairs = N * H;
    auto v = random_floats(std::size_t(S * pairs * D), std::uint64_t(S * 100 + D));
    auto s = random_floats(std::size_t(S * pairs), std::uint64_t(S + D), 3.0f);
    s[0] = -kInf;  // state 0 of pair 0 is empty: its payload is never read
    for (int d = 0; d < D; ++d) v[std::size_t(d)] = NAN;
    for (int r = 0; r < S; ++r) s[std::size_t(r * pairs + 1)] = -kInf;  // pair 1: no state
    for (DType in : {DType::f32, DType::bf16}) {
      for (DType out : {DType::f32, in}) {
        for (bool base_e : {true, false}) {
          SCOPED_TRACE(fmt::format("S {} D {} {} -> {}, base e {}", S, D, to_string(in),
                                   to_string(out), base_e));
          const auto v_bytes = encode(v, in);
          std::vector<std::uint8_t> want_out(std::size_t(pairs * D) * dtype_size(out));
          std::vector<float> want_lse(static_cast<std::size_t>(pairs));
          MergeStatesArgs a;
          a.v = TensorRef(v_bytes.data(), in, {S, N, H, D});
          a.s = TensorRef(s.data(), DType::f32, {S, N, H});
          a.v_out = TensorRef(want_out.data(), out, {N, H, D});
          a.s_out = TensorRef(want_lse.data(), DType::f32, {N, H});
          a.lse_base_e = base_e;
          cpu->merge_states(a, nullptr);

          const DeviceBuffer dv = to_device(*be, v_bytes), ds = to_device(*be, s);
          const DeviceBuffer dout(*be, want_out.size()), dlse(*be, want_lse.size() * 4);
          MergeStatesArgs g = a;
          g.v = dv.tensor(in, {S, N, H, D});
          g.s = ds.tensor(DType::f32, {S, N, H});
          g.v_out = dout.tensor(out, {N, H, D});
          g.s_out = dlse.tensor(DType::f32, {N, H});
          be->merge_states(g, nullptr);
          const auto got_lse = to_host<float>(*be, dlse.data(), want_lse.size());
          const auto got_out =
              decode_values(to_host<std::uint8_t>(*be, dout.data(), want_out.size()), out);
          const auto want_values = decode_values(want_out, out);
          for (std::size_t i = 0; i < want_lse.size(); ++i) {
            if (std::isinf(want_lse[i])) {
              EXPECT_EQ(got_lse[i], want_lse[i]) << "pair " << i;
            } else {
              EXPECT_NEAR(got_lse[i], want_lse[i], 1e-5f * (1.0f + std::abs(want_lse[i])));
            }
          }
          const float tol = out == DType::bf16 ? 1.6e-2f : 1e-5f;
          for (std::size_t i = 0; i < want_values.size(); ++i) {
            ASSERT_NEAR(got_out[i], want_values[i], tol * (1.0f + std::abs(want_values[i])))
                << "element " << i;
          }
          for (int d = 0; d < D; ++d) EXPECT_EQ(got_out[std::size_t(D + d)], 0.0f);
        }
      }
    }
  }
}

// fp8 stores e4m3(x / k_scale), a division: for the latents drawn here (found on the host)
// e4m3(x * (1 / k_scale)) is a different value, so a writer that multiplies fails.
TEST(CudaBackend, Fp8WriteDividesByTheScale) {
  DCPMLA_REQUIRE_GPU();
  const float k_scale = 0.04f;  // not a power of two: 1 / k_scale is inexact
  // Candidates: floats within a few ulps of k_scale times a midpoint between two e4m3 values.
  std::vector<float> found;
  for (int code = 8; code < 0x7e; ++code) {
    const float mid =
        0.5f * (fp8_e4m3_to_float(std::uint8_t(code)) + fp8_e4m3_to_float(std::uint8_t(code + 1)));
    float x = mid * k_scale;
    for (int i = 0; i < 4; ++i) x = std::nextafter(x, 0.0f);
    for (int i = 0; i < 8; ++i, x = std::nextafter(x, 1e9f)) {
      if (float_to_fp8_e4m3(x / k_scale) != float_to_fp8_e4m3(x * (1.0f / k_scale))) {
        found.push_back(x);
        found.push_back(-x);
      }
    }
  }
  ASSERT_FALSE(found.empty());
  std::vector<float> latents(kHeadDim);
  for (std::size_t i = 0; i < latents.size(); ++i) latents[i] = found[i % found.size()];
  auto be = make_backend();
  auto cpu = make_cpu_backend(1);
  const std::vector<std::int64_t> slots = {0};
  HostKvCache host(DType::fp8_e4m3, 1, 1, k_scale);
  cpu->write_kv({TensorRef(latents.data(), DType::f32, {1, kHeadDim}),
                 TensorRef(slots.data(), DType::i64, {1}), host.ref()},
                nullptr);
  const auto* want = static_cast<const std::uint8_t*>(host.ref().data);
  const DeviceBuffer dcache = to_device(*be, std::vector<std::uint8_t>(kHeadDim, 0));
  const DeviceBuffer dlat = to_device(*be, latents);
  const DeviceBuffer dslots = to_device(*be, slots);
  be->write_kv({dlat.tensor(DType::f32, {1, kHeadDim}), dslots.tensor(DType::i64, {1}),
                KvCacheRef{dcache.data(), DType::fp8_e4m3, 1, 1, k_scale}},
               nullptr);
  EXPECT_EQ(to_host<std::uint8_t>(*be, dcache.data(), kHeadDim),
            std::vector<std::uint8_t>(want, want + kHeadDim));
}

// One rank's decode, every (q, out, cache) dtype combination, head counts that do and do not
// fill a 64-pair tile, block sizes 1..64, splits and padding: against the CPU backend.
TEST(CudaBackend, DecodeMatchesCpuBackend) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  auto cpu = make_cpu_backend(4);
  std::mt19937_64 rng(17);
  int seed = 1;
  for (DType q : {DType::f32, DType::bf16}) {
    for (DType out : {DType::f32, DType::bf16}) {
      if (out == DType::bf16 && q != DType::bf16) continue;  // out is f32 or q's dtype
      for (DType kv : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
        for (int H : {1, 3, 16, 128}) {
          testing::ScenarioSpec spec;
          spec.world = 2;
          spec.heads = H;
          spec.block_size = std::vector<int>{1, 16, 64}[rng() % 3];
          spec.kv_dtype = kv;
          spec.q_dtype = q;
          spec.seed = seed++;
          const std::vector<int> q_lens = {16, 1, 3, 7};
          const std::vector<std::int64_t> lens = {16, 2, 300, H >= 64 ? 200 : 1500};
          const std::vector<Mask> masks = {Mask::causal, Mask::causal, Mask::full, Mask::causal};
          const testing::Scenario sc = custom_scenario(spec, q_lens, lens, masks, /*padding=*/3);
          gpu_testing::Split limits;
          limits.kv_chunk_blocks = int(rng() % 3);
          const int rank = int(rng() % 2);
          SCOPED_TRACE(testing::describe(spec) + " out " + to_string(out) + " rank " +
                       std::to_string(rank) + " chunk " + std::to_string(limits.kv_chunk_blocks));
          const auto got = run_decode(*be, sc, rank, limits, out);
          const auto want = run_decode(*cpu, sc, rank, limits, out);
          // The tensor-core kernel (bf16 q with a bf16 or fp8 cache) multiplies bf16-rounded
          // probabilities into V: |dO| <= 2^-8 max_k |v_k| at worst (bf16 unit roundoff, ~0.03
          // for the N(0, 1) latents here), but the rounding errors have random signs: seen
          // 4.5e-3 at |O| = 2.5, so 1e-2. The FMA kernel keeps them in fp32.
          const bool tensor_cores = q == DType::bf16 && kv != DType::f32 && !on_cpu();
          const double out_tol = out == DType::bf16 ? 2e-2 : tensor_cores ? 1e-2 : 1e-4;
          testing::expect_rows_close(got, want, out_tol, 1e-4);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Rows whose running max rises on later KV tiles (each request's second half of latents 6x
// larger), so every decoder rescales O between tiles, which random latents seldom make the lazy
// rescale do after the first tile: narrow, partial and whole tiles, split and unsplit, bf16 and
// fp8 caches.
TEST(CudaBackend, RisingScoresRescaleBetweenTiles) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  auto cpu = make_cpu_backend(4);
  int seed = 300;
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    for (int H : {16, 70, 128}) {
      for (int chunk_blocks : {0, 2}) {
        testing::ScenarioSpec spec;
        spec.world = 2;
        spec.heads = H;
        spec.block_size = 64;
        spec.kv_dtype = kv;
        spec.q_dtype = DType::bf16;
        spec.k_scale = 0.25f;  // fp8: the 6x latents stay inside e4m3's range (448 x scale)
        spec.seed = seed++;
        testing::Scenario sc = custom_scenario(spec, {3, 1, 8}, {1400, 9, 600},
                                               {Mask::causal, Mask::causal, Mask::full}, 1);
        testing::raise_second_halves(sc, 6.0f);
        gpu_testing::Split limits;
        limits.kv_chunk_blocks = chunk_blocks;
        const int rank = seed % 2;
        SCOPED_TRACE(testing::describe(spec) + " rank " + std::to_string(rank) + " chunk " +
                     std::to_string(chunk_blocks));
        const auto got = run_decode(*be, sc, rank, limits, DType::f32);
        const auto want = run_decode(*cpu, sc, rank, limits, DType::f32);
        // bf16 probabilities into V (DecodeMatchesCpuBackend's 1e-2), here for latents up to ~25.
        testing::expect_rows_close(got, want, on_cpu() ? 1e-4 : 8e-2, 1e-4);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The bulk tensor copy path of bf16 caches (block size 16, 32 or a multiple of 64: up to four
// boxes per chunk; whole tiles inside the visible range, the last tile by the threads' copies;
// block sizes 48 and 96 take the threads' copies throughout), with splits that start tiles
// inside pages, against the CPU backend.
TEST(CudaBackend, BulkCopyBlockSizesMatchCpuBackend) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  auto cpu = make_cpu_backend(4);
  int seed = 100;
  for (int bs : {16, 32, 48, 64, 96, 128, 256}) {
    for (int H : {16, 128}) {
      for (int chunk_blocks : {0, 1, 3}) {
        testing::ScenarioSpec spec;
        spec.world = 2;
        spec.heads = H;
        spec.block_size = bs;
        spec.kv_dtype = DType::bf16;
        spec.q_dtype = DType::bf16;
        spec.seed = seed++;
        const std::vector<int> q_lens = {1, 4, 8};
        const std::vector<std::int64_t> lens = {700, 2049, H >= 64 ? 400 : 3000};
        const std::vector<Mask> masks = {Mask::causal, Mask::full, Mask::causal};
        const testing::Scenario sc = custom_scenario(spec, q_lens, lens, masks, /*padding=*/1);
        gpu_testing::Split limits;
        limits.kv_chunk_blocks = chunk_blocks;
        SCOPED_TRACE(testing::describe(spec) + " chunk " + std::to_string(chunk_blocks));
        const auto got = run_decode(*be, sc, 1, limits, DType::f32);
        const auto want = run_decode(*cpu, sc, 1, limits, DType::f32);
        // bf16 probabilities into V on the tensor cores: see DecodeMatchesCpuBackend.
        testing::expect_rows_close(got, want, on_cpu() ? 1e-4 : 1e-2, 1e-4);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The decode's other forms on the GPU, for the tensor-core and the FMA kernels, split requests
// (the split merge writes those rows) and padding rows: the decode that writes the a2a send rows
// itself (DecodeArgs::send) gives the bytes of the decode into f32 rows followed by combine_pack,
// for both payloads; the decode of the gathered query [W, rows, H / W, 576] gives the bytes of
// the decode of the plain one, in either output form.
TEST(CudaBackend, DecodeIntoSendRowsEqualsDecodeThenPack) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  int seed = 300;
  for (DType q : {DType::bf16, DType::f32}) {
    for (int H : {128, 16, 6}) {
      for (int chunk_blocks : {0, 1}) {
        testing::ScenarioSpec spec;
        spec.world = 2;
        spec.heads = H;
        spec.block_size = 64;
        spec.kv_dtype = DType::bf16;
        spec.q_dtype = q;
        spec.seed = seed++;
        const testing::Scenario sc = custom_scenario(spec, {1, 8, 3}, {900, 5000, 70},
                                                     {Mask::causal, Mask::causal, Mask::full},
                                                     /*padding=*/2);
        gpu_testing::Split limits;
        limits.kv_chunk_blocks = chunk_blocks;
        for (DType payload : {DType::bf16, DType::f32}) {
          const int W = H == 6 ? 3 : 2;
          SCOPED_TRACE(testing::describe(spec) + " chunk " + std::to_string(chunk_blocks) +
                       " payload " + to_string(payload));
          const DecodeForm fused{W, payload, true}, separate{W, payload, false};
          const auto got = run_decode(*be, sc, 1, limits, DType::f32, true, nullptr, fused);
          const auto want = run_decode(*be, sc, 1, limits, DType::f32, true, nullptr, separate);
          ASSERT_EQ(got.send.size(), want.send.size());
          ASSERT_EQ(std::memcmp(got.send.data(), want.send.data(), got.send.size()), 0);
          if (chunk_blocks == 1) {
            EXPECT_GT(got.plan.num_partial_rows, 0);
          }
          DecodeForm gathered = fused;
          gathered.q_world = W;
          const auto in_place = run_decode(*be, sc, 1, limits, DType::f32, true, nullptr, gathered);
          ASSERT_EQ(std::memcmp(in_place.send.data(), want.send.data(), want.send.size()), 0);
        }
        const auto plain = run_decode(*be, sc, 1, limits, q);
        const auto in_place =
            run_decode(*be, sc, 1, limits, q, true, nullptr, {.q_world = H == 6 ? 3 : 2});
        ASSERT_EQ(std::memcmp(in_place.out.data(), plain.out.data(), plain.out.size() * 4), 0);
        ASSERT_EQ(std::memcmp(in_place.lse.data(), plain.lse.data(), plain.lse.size() * 4), 0);
      }
    }
  }
}

// Bigger plans after smaller ones (device buffers grow), the same plan again (no upload), and
// identical bits each time.
// bf16 and fp8 caches on pages of 64: by default the warp-specialised form's narrow tiles and
// the round decode's wide tiles (the sanitizers' small decode, scripts/device_gpu.sh), split
// (fp32 partials) and whole (fp32 or bf16 rows).
TEST(CudaBackend, DecodeRepeatsAndGrowsItsPlanBuffers) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    SCOPED_TRACE(to_string(kv));
    testing::ScenarioSpec spec;
    spec.heads = 16;
    spec.kv_dtype = kv;
    spec.seed = 3;
    const testing::Scenario small = custom_scenario(spec, {2}, {40});
    spec.seed = 4;
    const testing::Scenario big = custom_scenario(spec, {8, 1, 4, 2, 3}, {900, 10, 2000, 64, 5});
    gpu_testing::Split limits;
    limits.kv_chunk_blocks = 1;
    // fp32 rows and bf16 ones (the staged output rows of either width).
    for (DType out : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(to_string(out));
      const auto a1 = run_decode(*be, small, 0, limits, out);
      const auto b1 = run_decode(*be, big, 0, limits, out);
      const auto b2 = run_decode(*be, big, 0, limits, out);
      const auto a2 = run_decode(*be, small, 0, limits, out);
      EXPECT_EQ(a1.out, a2.out);
      EXPECT_EQ(a1.lse, a2.lse);
      EXPECT_EQ(b1.out, b2.out);
      EXPECT_EQ(b1.lse, b2.lse);
    }
  }
}

// A gathered query ([W, rows, H / W, 576], as the DCP step decodes it) gives the plain query's
// bits: at H 128 the round decode takes it by 4-D boxes of one group of 64 heads (W 2) or four
// of 16 (W 8), for bf16 and fp8 caches, fp32 and bf16 rows, split items (staged fp32 partials)
// beside whole ones. Small enough for the sanitizers (scripts/device_gpu.sh).
TEST(CudaBackend, GatheredQueryGivesThePlainQuerysBits) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  int seed = 40;
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    testing::ScenarioSpec spec;
    spec.heads = 128;
    spec.kv_dtype = kv;
    spec.seed = seed++;
    const testing::Scenario sc = custom_scenario(spec, {2, 1, 1}, {150, 70, 40});
    gpu_testing::Split limits;
    limits.kv_chunk_blocks = 1;
    for (DType out : {DType::f32, DType::bf16}) {
      const auto plain = run_decode(*be, sc, 0, limits, out);
      EXPECT_GT(plain.plan.num_partial_rows, 0);
      for (int W : {2, 8}) {
        SCOPED_TRACE(std::string(to_string(kv)) + " " + to_string(out) + " W " + std::to_string(W));
        const auto gathered = run_decode(*be, sc, 0, limits, out, true, nullptr, {.q_world = W});
        ASSERT_EQ(std::memcmp(gathered.out.data(), plain.out.data(), plain.out.size() * 4), 0);
        ASSERT_EQ(std::memcmp(gathered.lse.data(), plain.lse.data(), plain.lse.size() * 4), 0);
      }
    }
  }
}

// Decode on a non-default stream, then the same decode captured in a CUDA graph (through a
// schedule) and replayed: the same bits. A host plan under capture is refused, not mis-recorded;
// writing the schedule after the capture makes the graph replay the new plan.
TEST(CudaBackend, StreamsAndGraphCapture) {
  DCPMLA_REQUIRE_GPU();
  if (on_cpu()) GTEST_SKIP() << "CUDA streams only";
  auto be = make_backend();
  testing::ScenarioSpec spec;
  spec.heads = 16;
  spec.seed = 8;
  const testing::Scenario sc = custom_scenario(spec, {8, 2, 1}, {100, 40, 700});
  gpu_testing::Split limits;
  limits.kv_chunk_blocks = 2;
  const PlanConfig config = gpu_testing::plan_config(*be, sc, 0, limits);
  const Plan plan = make_plan(sc.batch, config);
  Batch other_batch = sc.batch;
  other_batch.total_len[2] = 600;
  const Plan other = make_plan(other_batch, config);
  Schedule sched(*be, config, max_capacity(capacity_of(plan), capacity_of(other)));

  const KvCacheRef cache{nullptr, DType::bf16, sc.num_blocks, spec.block_size, 1.0f};
  std::vector<std::uint16_t> cache_host(cache.bytes() / 2);
  for (std::size_t i = 0; i < cache_host.size(); ++i) {
    cache_host[i] = float_to_bf16(std::sin(float(i) * 0.37f));
  }
  Bf16Decode d(*be, sc, cache_host,
               decode_workspace_bytes(sched.capacity().partial_rows, spec.heads));
  const std::int64_t rows = d.rows;
  const int H = d.heads;
  DeviceBuffer& out = d.out;
  DeviceBuffer& lse = d.lse;
  DecodeArgs& args = d.args;
  args.plan = &plan;

  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  be->decode(args, s);
  be->synchronize(s);
  const auto out1 = to_host<std::uint8_t>(*be, out.data(), out.bytes());
  const auto lse1 = to_host<float>(*be, lse.data(), std::size_t(rows) * H);
  args.plan = &other;
  be->decode(args, s);
  be->synchronize(s);
  const auto out_other = to_host<std::uint8_t>(*be, out.data(), out.bytes());
  ASSERT_NE(out_other, out1);

  // A host plan under capture: refused with Error(unsupported, "plan").
  args.plan = &plan;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  try {
    be->decode(args, s);
    ADD_FAILURE() << "a host plan under capture was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_EQ(e.argument(), "plan");
  }
  cudaGraph_t discarded = nullptr;
  cudaStreamEndCapture(s, &discarded);
  if (discarded) cudaGraphDestroy(discarded);
  cudaGetLastError();

  // A schedule's update under capture: refused with Error(unsupported, "stream") (its copy would
  // read the pinned staging image at every replay, after later updates rewrote it).
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  try {
    sched.update(plan, s);
    ADD_FAILURE() << "a schedule update under capture was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_EQ(e.argument(), "stream");
  }
  discarded = nullptr;
  cudaStreamEndCapture(s, &discarded);
  if (discarded) cudaGraphDestroy(discarded);
  cudaGetLastError();

  // The schedule's decode captured and replayed: the eager bits.
  sched.update(plan, s);
  args.plan = nullptr;
  args.schedule = &sched;
  d.poison(s);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  be->decode(args, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  be->synchronize(s);
  EXPECT_EQ(to_host<std::uint8_t>(*be, out.data(), out.bytes()), out1);
  EXPECT_EQ(to_host<float>(*be, lse.data(), std::size_t(rows) * H), lse1);

  // The other plan written into the schedule: the graph replays it.
  sched.update(other, s);
  d.poison(s);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  be->synchronize(s);
  EXPECT_EQ(to_host<std::uint8_t>(*be, out.data(), out.bytes()), out_other);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// Capture once, then replay step after step with the schedule updated in place between replays
// (Schedule::update): every replay equals an eager decode of its plan, bit for bit. Plans that
// do not fit the schedule (over capacity: "plan"; another config: "plan.config") are refused and
// leave it as it was; a schedule sized for the limits of every step lets a larger plan through.
TEST(CudaBackend, GraphReplaysPlansUpdatedInPlace) {
  DCPMLA_REQUIRE_GPU();
  if (on_cpu()) GTEST_SKIP() << "CUDA graphs only";
  testing::ScenarioSpec spec;
  spec.heads = 16;
  spec.seed = 9;
  // The block table is sized for the longest step; shorter steps use a prefix of each row.
  const testing::Scenario sc = custom_scenario(spec, {8, 2, 1}, {100, 40, 1500});
  gpu_testing::Split limits;
  limits.kv_chunk_blocks = 2;
  auto be = make_backend();
  const PlanConfig config = gpu_testing::plan_config(*be, sc, 0, limits);
  auto plan_for = [&](std::vector<std::int64_t> lens) {
    Batch b = sc.batch;
    b.total_len = lens;
    return make_plan(b, config);
  };
  const Plan step1 = plan_for({60, 40, 700});
  const Plan step2 = plan_for({61, 41, 701});  // one more token each: bounds move
  const Plan step3 = plan_for({100, 3, 650});  // fewer thread blocks
  const Plan big = plan_for({100, 40, 1500});  // more thread blocks than the others
  const ScheduleCapacity small_cap =
      max_capacity(max_capacity(capacity_of(step1), capacity_of(step2)), capacity_of(step3));
  ASSERT_GT(capacity_of(big).work_items, small_cap.work_items);
  const ScheduleCapacity limits_cap =
      capacity_for_limits(config, sc.batch.num_requests(), sc.batch.rows(), sc.batch.max_blocks);
  ASSERT_EQ(max_capacity(limits_cap, capacity_of(big)), limits_cap);

  const KvCacheRef cache{nullptr, DType::bf16, sc.num_blocks, spec.block_size, 1.0f};
  std::vector<std::uint16_t> cache_host(cache.bytes() / 2);
  for (std::size_t i = 0; i < cache_host.size(); ++i) {
    cache_host[i] = float_to_bf16(std::cos(float(i) * 0.29f));
  }
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);

  struct Run {
    std::vector<std::uint8_t> out;
    std::vector<float> lse;
  };
  const std::vector<const Plan*> steps = {&step1, &step2, &step3, &big};
  // Eager decodes of every step, of their host plans, on a backend of their own.
  std::vector<Run> eager;
  {
    auto eager_be = make_backend();
    for (const Plan* p : steps) {
      Bf16Decode d(*eager_be, sc, cache_host, decode_workspace_bytes(*p));
      d.args.plan = p;
      eager_be->decode(d.args, s);
      eager_be->synchronize(s);
      eager.push_back({d.out_bytes(), d.lse_values()});
    }
  }
  ASSERT_NE(eager[0].out, eager[1].out);

  // The backend under test: a workspace for either schedule.
  Bf16Decode d(*be, sc, cache_host,
               decode_workspace_bytes(std::max(small_cap.partial_rows, limits_cap.partial_rows),
                                      spec.heads));
  DecodeArgs& args = d.args;
  auto replay = [&](cudaGraphExec_t exec) {
    d.poison(s);
    EXPECT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    be->synchronize(s);
    return Run{d.out_bytes(), d.lse_values()};
  };
  auto capture = [&](Schedule& sched) {
    sched.update(step1, s);
    args.schedule = &sched;
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    be->decode(args, s);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
    return exec;
  };

  // 1. A schedule of exactly the three steps' capacity.
  Schedule small(*be, config, small_cap);
  cudaGraphExec_t exec = capture(small);
  for (int k : {1, 0, 2, 1}) {
    small.update(*steps[std::size_t(k)], s);
    const Run got = replay(exec);
    EXPECT_EQ(got.out, eager[std::size_t(k)].out) << "step " << k;
    EXPECT_EQ(got.lse, eager[std::size_t(k)].lse) << "step " << k;
  }
  auto expect_refused = [&](const Plan& p, const char* argument, const char* what) {
    try {
      small.update(p, s);
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  expect_refused(big, "plan", "a plan beyond the schedule's capacity");
  // More rows (one more draft on request 1) than the schedule holds.
  Batch more_rows = sc.batch;
  more_rows.query_start_loc = {0, 8, 11, 12};
  more_rows.total_len = {60, 40, 700};
  more_rows.num_tokens = -1;
  expect_refused(make_plan(more_rows, config), "plan", "a plan with more rows");
  // Another config (heads) than the schedule's.
  PlanConfig other_heads = config;
  other_heads.num_heads = 32;
  Batch b1 = sc.batch;
  b1.total_len = {60, 40, 700};
  expect_refused(make_plan(b1, other_heads), "plan.config", "a plan of another config");
  EXPECT_EQ(replay(exec).out, eager[1].out);  // the refusals left step2 in place
  cudaGraphExecDestroy(exec);

  // 2. A schedule for the batch's limits, captured anew: the largest step replays too.
  Schedule roomy(*be, config, limits_cap);
  exec = capture(roomy);
  for (int k : {3, 0, 3, 2}) {
    roomy.update(*steps[std::size_t(k)], s);
    const Run got = replay(exec);
    EXPECT_EQ(got.out, eager[std::size_t(k)].out) << "roomy, step " << k;
    EXPECT_EQ(got.lse, eager[std::size_t(k)].lse) << "roomy, step " << k;
  }
  cudaGraphExecDestroy(exec);
  cudaStreamDestroy(s);
}

// Device block ids outside the cache are not checked on the host: they must read no memory
// (run this under compute-sanitizer) and leave requests that do not use them untouched.
TEST(CudaBackend, InvalidDeviceBlockIdsReadNoMemory) {
  DCPMLA_REQUIRE_GPU();
  if (on_cpu()) GTEST_SKIP() << "the CPU backend rejects invalid block ids on the host";
  gpu_testing::RoundsChoice choice;
  // Block sizes 8 and 96: the threads' copies; 16 and 64: the bulk copies, which ask past the
  // cache's end. fp8 caches (the threads' copies, then widened) with a one-row request 0: a
  // narrow tile. 32 heads and pages of 64 with rounds: the round decode's boxes, bf16 and fp8.
  struct Case {
    int bs;
    DType kv;
    bool rounds;
  };
  for (const Case& c : {Case{8, DType::bf16, false}, Case{16, DType::bf16, false},
                        Case{64, DType::bf16, false}, Case{96, DType::bf16, false},
                        Case{64, DType::fp8_e4m3, false}, Case{96, DType::fp8_e4m3, false},
                        Case{64, DType::bf16, true}, Case{64, DType::fp8_e4m3, true}}) {
    const int bs = c.bs;
    const DType kv = c.kv;
    SCOPED_TRACE("block size " + std::to_string(bs) + " " + to_string(kv) +
                 (c.rounds ? " rounds" : ""));
    choice.pick(c.rounds);
    auto be = make_backend();
    testing::ScenarioSpec spec;
    spec.heads = c.rounds ? 32 : 16;
    spec.block_size = bs;
    spec.seed = 12;
    const int q0 = kv == DType::fp8_e4m3 ? 1 : 4;
    const testing::Scenario sc = custom_scenario(spec, {q0, 2}, {bs == 64 ? 800 : 200, 90});
    Batch bad = sc.batch;
    bad.block_table[1] = 1 << 30;  // request 0, second block
    bad.block_table[2] = -5;       // request 0, third block
    // The plan comes from the valid batch; only the device copy of the table is bad.
    const Sharding sh{spec.world, 0, spec.interleave};
    const Plan plan = make_plan(
        sc.batch, {sh, spec.heads, spec.block_size, sc.num_blocks, gpu_testing::kNoSplitModel});
    const std::int64_t rows = sc.batch.rows();
    KvCacheRef cache{nullptr, kv, sc.num_blocks, spec.block_size, 1.0f};
    DeviceBuffer dcache(*be, cache.bytes());
    ASSERT_EQ(cudaMemset(dcache.data(), 0, cache.bytes()), cudaSuccess);
    cache.data = dcache.data();
    const DeviceBuffer q = to_device(*be, encode(sc.q, DType::bf16));
    const DeviceBuffer bt = to_device(*be, bad.block_table);
    DeviceBuffer out(*be, std::size_t(rows) * spec.heads * kLatentDim * 4);
    DeviceBuffer lse(*be, std::size_t(rows) * spec.heads * 4);
    DecodeArgs args;
    args.plan = &plan;
    args.q = q.tensor(DType::bf16, {rows, spec.heads, kHeadDim});
    args.cache = cache;
    args.block_table = bt.tensor(DType::i32, {bad.num_requests(), bad.max_blocks});
    args.out = out.tensor(DType::f32, {rows, spec.heads, kLatentDim});
    args.lse = lse.tensor(DType::f32, {rows, spec.heads});
    args.softmax_scale = spec.softmax_scale;
    be->decode(args, nullptr);
    EXPECT_NO_THROW(be->synchronize(nullptr));
  }
}

TEST(CudaBackend, RejectsBadArgumentsBeforeLaunching) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  testing::ScenarioSpec spec;
  spec.heads = 4;
  spec.world = 1;
  const testing::Scenario sc = custom_scenario(spec, {2}, {100});
  const Plan plan = make_plan(
      sc.batch, {{1, 0, 1}, 4, spec.block_size, sc.num_blocks, gpu_testing::kNoSplitModel});
  const std::int64_t rows = sc.batch.rows();
  KvCacheRef cache{nullptr, DType::bf16, sc.num_blocks, spec.block_size, 1.0f};
  DeviceBuffer dcache(*be, cache.bytes());
  cache.data = dcache.data();
  DeviceBuffer q(*be, std::size_t(rows) * 4 * kHeadDim * 2 + 16);
  const DeviceBuffer bt = to_device(*be, sc.batch.block_table);
  DeviceBuffer out(*be, std::size_t(rows) * 4 * kLatentDim * 4);
  DeviceBuffer lse(*be, std::size_t(rows) * 4 * 4);
  DecodeArgs args;
  args.plan = &plan;
  args.q = q.tensor(DType::bf16, {rows, 4, kHeadDim});
  args.cache = cache;
  args.block_table = bt.tensor(DType::i32, {1, sc.batch.max_blocks});
  args.out = out.tensor(DType::f32, {rows, 4, kLatentDim});
  args.lse = lse.tensor(DType::f32, {rows, 4});
  args.softmax_scale = spec.softmax_scale;
  EXPECT_NO_THROW(be->decode(args, nullptr));
  be->synchronize(nullptr);

  DecodeArgs narrow = args;
  narrow.block_table = TensorRef(bt.data(), DType::i32, {1, 0});
  try {
    be->decode(narrow, nullptr);
    ADD_FAILURE() << "a block table with too few columns was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shape_mismatch);
  }
  DecodeArgs bad_scale = args;
  bad_scale.softmax_scale = NAN;
  EXPECT_THROW(be->decode(bad_scale, nullptr), Error);
  if (!on_cpu()) {
    DecodeArgs misaligned = args;
    misaligned.q.data = static_cast<std::uint8_t*>(q.data()) + 2;
    try {
      be->decode(misaligned, nullptr);
      ADD_FAILURE() << "a misaligned q was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
    }
  }
}

// The a2a merge with the rank's own partial read from its send buffer (CombineMergeArgs::own: the
// exchange moves the peers' rows only) gives the bytes of the merge of the full exchange, on the
// GPU and on the CPU, while the receive buffer's own chunk holds NaN.
TEST(CudaBackend, MergeReadsTheOwnPartialFromOwn) {
  DCPMLA_REQUIRE_GPU();
  auto gpu = make_backend();
  auto cpu = make_cpu_backend(1);
  const int N = 5, Hl = 3;
  std::uint64_t seed = 40;
  for (int W : {2, 3, 5}) {
    for (DType payload : {DType::f32, DType::bf16}) {
      const std::int64_t row = packed_row(payload);
      const std::size_t chunk = std::size_t(N * Hl * row) * dtype_size(payload);  // bytes
      // W peers' rows of Hl heads: the pack of random partials of W * Hl heads.
      const auto po = random_floats(std::size_t(N) * W * Hl * kLatentDim, seed++);
      const auto pl = random_lse(std::size_t(N) * W * Hl, seed++);
      std::vector<std::uint8_t> full(W * chunk);
      cpu->combine_pack({W, TensorRef(po.data(), DType::f32, {N, W * Hl, kLatentDim}),
                         TensorRef(pl.data(), DType::f32, {N, W * Hl}),
                         TensorRef(full.data(), payload, {W, N, Hl, row})},
                        nullptr);
      for (int own_rank : {0, W - 1}) {
        std::vector<std::uint8_t> holey = full;
        std::fill_n(holey.begin() + own_rank * chunk, chunk, std::uint8_t(0xff));  // NaN
        const std::vector<std::uint8_t> own(full.begin() + own_rank * chunk,
                                            full.begin() + (own_rank + 1) * chunk);
        for (Backend* be : {gpu.get(), cpu.get()}) {
          SCOPED_TRACE(fmt::format("{} W {} payload {} own_rank {}", be->name(), W,
                                   to_string(payload), own_rank));
          auto merged = [&](const std::vector<std::uint8_t>& recv, int rank) {
            const DeviceBuffer drecv = to_device(*be, recv), down = to_device(*be, own);
            DeviceBuffer out(*be, std::size_t(N) * Hl * kLatentDim * 4), lse(*be, N * Hl * 4);
            be->combine_merge(
                {drecv.tensor(payload, {W, N, Hl, row}),
                 out.tensor(DType::f32, {N, Hl, kLatentDim}), lse.tensor(DType::f32, {N, Hl}), rank,
                 rank < 0 ? TensorRef() : down.tensor(payload, {N, Hl, row})},
                nullptr);
            auto bytes = to_host<std::uint8_t>(*be, out.data(), out.bytes());
            const auto l = to_host<std::uint8_t>(*be, lse.data(), lse.bytes());
            bytes.insert(bytes.end(), l.begin(), l.end());
            return bytes;
          };
          EXPECT_EQ(merged(holey, own_rank), merged(full, -1));
        }
      }
    }
  }
}

// The ag_rs and a2a combine pieces and the layout kernels against the CPU backend, with -inf
// (empty), NaN and +inf (poisoned) LSE values and NaN payloads behind them.
TEST(CudaBackend, CombineKernelsMatchCpu) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  auto cpu = make_cpu_backend(1);
  const int W = 4, N = 5, H = 8, Hl = H / W;
  auto po = random_floats(std::size_t(N) * H * kLatentDim, 21);
  const auto glse = random_lse(std::size_t(W) * N * H, 22);
  for (int rank = 0; rank < W; ++rank) {
    // Garbage payload wherever this rank's LSE says empty.
    auto payload = po;
    for (int i = 0; i < N * H; ++i) {
      const float l = glse[std::size_t(rank) * N * H + i];
      if (!std::isfinite(l)) {
        for (int d = 0; d < kLatentDim; ++d) payload[std::size_t(i) * kLatentDim + d] = NAN;
      }
    }
    std::vector<float> send_cpu(std::size_t(W) * N * Hl * kLatentDim, -1.0f);
    std::vector<float> lse_cpu(std::size_t(N) * Hl, -1.0f);
    cpu->combine_rescale({W, rank, TensorRef(glse.data(), DType::f32, {W, N, H}),
                          TensorRef(payload.data(), DType::f32, {N, H, kLatentDim}),
                          TensorRef(send_cpu.data(), DType::f32, {W, N, Hl, kLatentDim}),
                          TensorRef(lse_cpu.data(), DType::f32, {N, Hl})},
                         nullptr);
    const DeviceBuffer dg = to_device(*be, glse), dp = to_device(*be, payload);
    const DeviceBuffer ds = to_device(*be, std::vector<float>(send_cpu.size(), -1.0f));
    const DeviceBuffer dl = to_device(*be, std::vector<float>(lse_cpu.size(), -1.0f));
    be->combine_rescale(
        {W, rank, dg.tensor(DType::f32, {W, N, H}), dp.tensor(DType::f32, {N, H, kLatentDim}),
         ds.tensor(DType::f32, {W, N, Hl, kLatentDim}), dl.tensor(DType::f32, {N, Hl})},
        nullptr);
    const auto send = to_host<float>(*be, ds.data(), send_cpu.size());
    // NaN only where this rank's partial is not empty and a NaN or +inf LSE poisons the pair's
    // merge (SPEC section 5): a NaN payload behind a weight of 0 never leaks.
    for (std::size_t i = 0; i < send.size(); ++i) {
      const std::size_t pair = i / kLatentDim, dest = pair / (N * Hl), n = pair / Hl % N;
      const std::size_t h = dest * Hl + pair % Hl;
      bool poisoned = false;
      for (int r = 0; r < W; ++r) {
        poisoned = poisoned || merge::poisoned_lse(glse[(std::size_t(r) * N + n) * H + h]);
      }
      const bool empty = glse[(std::size_t(rank) * N + n) * H + h] == -INFINITY;
      ASSERT_EQ(std::isnan(send[i]), poisoned && !empty) << "send[" << i << "]";
    }
    expect_close(send, send_cpu, 1e-6, "combine_rescale send");
    expect_close(to_host<float>(*be, dl.data(), lse_cpu.size()), lse_cpu, 1e-6,
                 "combine_rescale lse");
  }

  // a2a: pack, then merge (f32 and bf16 out).
  const auto pl = random_lse(std::size_t(N) * H, 23);
  std::vector<float> packed_cpu(std::size_t(W) * N * Hl * kPackedRow);
  cpu->combine_pack({W, TensorRef(po.data(), DType::f32, {N, H, kLatentDim}),
                     TensorRef(pl.data(), DType::f32, {N, H}),
                     TensorRef(packed_cpu.data(), DType::f32, {W, N, Hl, kPackedRow})},
                    nullptr);
  const DeviceBuffer dpo = to_device(*be, po), dpl = to_device(*be, pl);
  DeviceBuffer dpacked(*be, packed_cpu.size() * 4);
  be->combine_pack({W, dpo.tensor(DType::f32, {N, H, kLatentDim}), dpl.tensor(DType::f32, {N, H}),
                    dpacked.tensor(DType::f32, {W, N, Hl, kPackedRow})},
                   nullptr);
  const auto packed = to_host<float>(*be, dpacked.data(), packed_cpu.size());
  ASSERT_EQ(std::memcmp(packed.data(), packed_cpu.data(), packed.size() * 4), 0);

  // The receiver's view: W peers' packed rows of one rank's Hl heads, with garbage payloads.
  auto recv = random_floats(std::size_t(W) * N * Hl * kPackedRow, 24);
  const auto recv_lse = random_lse(std::size_t(W) * N * Hl, 25);
  for (std::size_t i = 0; i < recv_lse.size(); ++i) {
    recv[i * kPackedRow + kLatentDim] = recv_lse[i];
    if (!std::isfinite(recv_lse[i])) recv[i * kPackedRow + 7] = NAN;
  }
  const DeviceBuffer drecv = to_device(*be, recv);
  for (DType out : {DType::f32, DType::bf16}) {
    std::vector<std::uint8_t> out_cpu(std::size_t(N) * Hl * kLatentDim * dtype_size(out));
    std::vector<float> lse_cpu(std::size_t(N) * Hl);
    cpu->combine_merge({TensorRef(recv.data(), DType::f32, {W, N, Hl, kPackedRow}),
                        TensorRef(out_cpu.data(), out, {N, Hl, kLatentDim}),
                        TensorRef(lse_cpu.data(), DType::f32, {N, Hl}),
                        -1,
                        {}},
                       nullptr);
    DeviceBuffer dout(*be, out_cpu.size());
    DeviceBuffer dlse(*be, lse_cpu.size() * 4);
    be->combine_merge({drecv.tensor(DType::f32, {W, N, Hl, kPackedRow}),
                       dout.tensor(out, {N, Hl, kLatentDim}),
                       dlse.tensor(DType::f32, {N, Hl}),
                       -1,
                       {}},
                      nullptr);
    const auto got = decode_values(to_host<std::uint8_t>(*be, dout.data(), out_cpu.size()), out);
    // NaN exactly where a peer's LSE is NaN or +inf: a NaN payload behind a weight 0 never leaks.
    for (std::size_t i = 0; i < got.size(); ++i) {
      const std::size_t pair = i / kLatentDim;
      bool poisoned = false;
      for (int w = 0; w < W; ++w) {
        poisoned = poisoned || merge::poisoned_lse(recv_lse[std::size_t(w) * N * Hl + pair]);
      }
      ASSERT_EQ(std::isnan(got[i]), poisoned) << "out[" << i << "]";
    }
    expect_close(got, decode_values(out_cpu, out), out == DType::bf16 ? 1e-2 : 1e-6,
                 "combine_merge out");
    expect_close(to_host<float>(*be, dlse.data(), lse_cpu.size()), lse_cpu, 1e-6,
                 "combine_merge lse");
  }

  // The bf16 payload: packed bytes identical to the CPU's, merge of the CPU-packed rows alike.
  const std::size_t row16 = kPackedRowBf16;
  std::vector<std::uint16_t> packed16_cpu(std::size_t(W) * N * Hl * row16);
  cpu->combine_pack({W, TensorRef(po.data(), DType::f32, {N, H, kLatentDim}),
                     TensorRef(pl.data(), DType::f32, {N, H}),
                     TensorRef(packed16_cpu.data(), DType::bf16, {W, N, Hl, kPackedRowBf16})},
                    nullptr);
  DeviceBuffer dpacked16(*be, packed16_cpu.size() * 2);
  be->combine_pack({W, dpo.tensor(DType::f32, {N, H, kLatentDim}), dpl.tensor(DType::f32, {N, H}),
                    dpacked16.tensor(DType::bf16, {W, N, Hl, kPackedRowBf16})},
                   nullptr);
  EXPECT_EQ(to_host<std::uint16_t>(*be, dpacked16.data(), packed16_cpu.size()), packed16_cpu);
  std::vector<float> out16_cpu(std::size_t(N) * Hl * kLatentDim), lse16_cpu(std::size_t(N) * Hl);
  // Merged as a receiver would (this rank's packed rows standing for W peers' ones).
  cpu->combine_merge({TensorRef(packed16_cpu.data(), DType::bf16, {W, N, Hl, kPackedRowBf16}),
                      TensorRef(out16_cpu.data(), DType::f32, {N, Hl, kLatentDim}),
                      TensorRef(lse16_cpu.data(), DType::f32, {N, Hl}),
                      -1,
                      {}},
                     nullptr);
  DeviceBuffer dout16(*be, out16_cpu.size() * 4), dlse16(*be, lse16_cpu.size() * 4);
  be->combine_merge({dpacked16.tensor(DType::bf16, {W, N, Hl, kPackedRowBf16}),
                     dout16.tensor(DType::f32, {N, Hl, kLatentDim}),
                     dlse16.tensor(DType::f32, {N, Hl}),
                     -1,
                     {}},
                    nullptr);
  expect_close(to_host<float>(*be, dout16.data(), out16_cpu.size()), out16_cpu, 1e-6,
               "combine_merge out (bf16 payload)");
  expect_close(to_host<float>(*be, dlse16.data(), lse16_cpu.size()), lse16_cpu, 1e-6,
               "combine_merge lse (bf16 payload)");
}

TEST(CudaBackend, LayoutKernelsMatchCpuExactly) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  auto cpu = make_cpu_backend(1);
  const int W = 4, N = 3, Hl = 5;
  for (DType t : {DType::f32, DType::bf16}) {
    for (std::size_t offset : {std::size_t(0), dtype_size(t)}) {  // aligned and misaligned
      SCOPED_TRACE(std::string(to_string(t)) + " offset " + std::to_string(offset));
      const auto bytes = encode(random_floats(std::size_t(W) * N * Hl * kHeadDim, 31), t);
      std::vector<std::uint8_t> want(bytes.size());
      cpu->unpack_query({TensorRef(bytes.data(), t, {W, N, Hl, kHeadDim}),
                         TensorRef(want.data(), t, {N, W * Hl, kHeadDim})},
                        nullptr);
      DeviceBuffer src(*be, bytes.size() + offset), dst(*be, bytes.size() + offset);
      auto* s = static_cast<std::uint8_t*>(src.data()) + offset;
      auto* d = static_cast<std::uint8_t*>(dst.data()) + offset;
      be->upload(s, bytes.data(), bytes.size(), nullptr);
      be->unpack_query(
          {TensorRef(s, t, {W, N, Hl, kHeadDim}), TensorRef(d, t, {N, W * Hl, kHeadDim})}, nullptr);
      EXPECT_EQ(to_host<std::uint8_t>(*be, d, want.size()), want);
    }
  }
  auto x = random_floats(10001, 32, 100.0f);
  x[5] = NAN;
  x[6] = INFINITY;
  x[7] = -0.0f;
  x[8] = 1e-40f;
  const DeviceBuffer dx = to_device(*be, x);
  for (DType t : {DType::f32, DType::bf16}) {
    std::vector<std::uint8_t> want(x.size() * dtype_size(t));
    cpu->convert({TensorRef(x.data(), DType::f32, {std::int64_t(x.size())}),
                  TensorRef(want.data(), t, {std::int64_t(x.size())})},
                 nullptr);
    DeviceBuffer dy(*be, want.size());
    be->convert(
        {dx.tensor(DType::f32, {std::int64_t(x.size())}), dy.tensor(t, {std::int64_t(x.size())})},
        nullptr);
    EXPECT_EQ(to_host<std::uint8_t>(*be, dy.data(), want.size()), want) << to_string(t);
  }
}

// SPEC merge vectors through the a2a merge kernel: O = [1, 0], L = ln 3 with O = [0, 1], L = 0
// -> O = [0.75, 0.25], L = ln 4; second partial empty (L = -inf, O = [123, NaN]) -> O = [1, 0],
// L = ln 3; both empty -> O = 0, L = -inf.
TEST(CudaBackend, SpecMergeVectors) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  struct V {
    float l0, l1;
    float a1, b1;  // the second partial's first two dims
    float o0, o1, lse;
  };
  const V vectors[] = {
      {std::log(3.0f), 0.0f, 0.0f, 1.0f, 0.75f, 0.25f, std::log(4.0f)},
      {std::log(3.0f), -INFINITY, 123.0f, NAN, 1.0f, 0.0f, std::log(3.0f)},
      {-INFINITY, -INFINITY, 123.0f, NAN, 0.0f, 0.0f, -INFINITY},
  };
  for (const V& v : vectors) {
    std::vector<float> recv(2 * kPackedRow, 0.0f);
    recv[0] = v.l0 == -INFINITY ? NAN : 1.0f;
    recv[kLatentDim] = v.l0;
    recv[kPackedRow + 0] = v.a1;
    recv[kPackedRow + 1] = v.b1;
    recv[kPackedRow + kLatentDim] = v.l1;
    const DeviceBuffer dr = to_device(*be, recv);
    DeviceBuffer dout(*be, kLatentDim * 4), dlse(*be, 4);
    be->combine_merge({dr.tensor(DType::f32, {2, 1, 1, kPackedRow}),
                       dout.tensor(DType::f32, {1, 1, kLatentDim}),
                       dlse.tensor(DType::f32, {1, 1}),
                       -1,
                       {}},
                      nullptr);
    const auto o = to_host<float>(*be, dout.data(), kLatentDim);
    const float l = to_host<float>(*be, dlse.data(), 1)[0];
    EXPECT_NEAR(o[0], v.o0, 1e-6);
    EXPECT_NEAR(o[1], v.o1, 1e-6);
    for (int d = 2; d < kLatentDim; ++d) ASSERT_EQ(o[d], 0.0f);
    if (std::isinf(v.lse)) {
      EXPECT_EQ(l, -INFINITY);
    } else {
      EXPECT_NEAR(l, v.lse, 1e-6);
    }
  }
}

}  // namespace
}  // namespace dcpmla
