// The tensor-core decode kernels' own source (src/cuda/decode/sm90/kernel.cuh with its narrow
// tiles, and the round decode, round_kernel.cuh: bulk tensor copies, mbarriers, named barriers and
// wgmma, RS included) run on the CPU through a host emulation of those instructions
// (tc_emulation.h): no GPU needed. Checks the kernels against the CPU backend on ragged DCP batches
// (poisoned pages, several KV tiles a walk, split and unsplit, narrow, partial and whole tiles),
// that the flattened and native forms give the same bits, that the round decode gives the bits of
// the warp-specialised and narrow forms (for an fp8 cache, whose MMAs it runs in f16, their LSE
// bits and their outputs to P's rounding), and through the emulation's own checks, that no barrier
// deadlocks or is misused, that no MMA's operands change while it is in flight and that no thread
// overwrites an MMA's operands before it is ordered after the MMA's completion (with a negative
// control of that check).
#include "tc_emulation.h"
// The emulation shims must come first.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda/decode/sm90/kernel.cuh"
#include "cuda/decode/sm90/round_kernel.cuh"
#include "emulated_decode.h"

namespace dcpmla::cuda {
namespace {

using namespace emulated;

// The cache's tensor map, as sm90_decode.cu encodes it: bf16 elements, or fp8 bytes as uint8.
CUtensorMap kv_map_of(const DecodeParams& p, bool fp8 = false) {
  const std::int64_t rows = std::int64_t(p.num_blocks) * p.block_size;
  const std::uint32_t elem = fp8 ? 1u : 2u;
  return dcpmla_emu::encode_tensor_map({static_cast<const unsigned char*>(p.cache),
                                        {std::uint64_t(kHeadDim), std::uint64_t(rows)},
                                        std::uint64_t(kHeadDim) * elem,
                                        {64u, std::uint32_t(std::min(p.block_size, 64))},
                                        elem,
                                        {},
                                        {},
                                        {}});
}

template <sm90::Cache C, bool Bulk>
void run_ws(const TileRun& run) {
  DecodeParams p = run.p;
  if (Bulk) p.kv_map = kv_map_of(p);
  dcpmla_emu::run_grid(int(run.plan.work.size()), sm90::kThreads, sm90::kSmemBytes,
                       [&] { sm90::decode_kernel<C, Bulk>(p); });
}

// The query's tensor map, as sm90_decode.cu encodes it for the round decode ([rows * H, 576] bf16;
// the emulation fills NaN past its end where the GPU's map fills zeros: rows past a tile's pairs
// must not matter either way).
CUtensorMap q_map_of(const TileRun& run) {
  const std::uint64_t pairs = run.q.size() / (kHeadDim * 2);
  return dcpmla_emu::encode_tensor_map(
      {run.q.data(), {std::uint64_t(kHeadDim), pairs}, kHeadDim * 2, {64u, 64u}, 2, {}, {}, {}});
}

// The round decode's grid, a block a work item.
void run_round_grid(const TileRun& run, const DecodeParams& p, bool fp8) {
  dcpmla_emu::run_grid(int(run.plan.work.size()), sm90::rounds::kThreads, sm90::rounds::kSmemBytes,
                       [&] {
                         if (fp8) {
                           sm90::rounds::round_decode_kernel<sm90::Cache::fp8>(p);
                         } else {
                           sm90::rounds::round_decode_kernel<sm90::Cache::bf16>(p);
                         }
                       });
}

// The round decode (bf16 or fp8 caches of pages of a multiple of 64 tokens), the query by boxes
// (as the GPU runs a plain query) or by the consumers' copies (a gathered one): bf16 tiles of at
// most 16 pairs run the warp-specialised form's narrow tiles inside it, fp8 ones wide.
TileRunner rounds_with(bool q_boxes) {
  return [q_boxes](const testing::ScenarioSpec& spec, const TileRun& run) {
    ASSERT_TRUE(spec.kv_dtype != DType::f32 && spec.block_size % 64 == 0);
    ASSERT_EQ(spec.q_dtype, DType::bf16);
    const bool fp8 = spec.kv_dtype == DType::fp8_e4m3;
    DecodeParams p = run.p;
    p.kv_map = kv_map_of(p, fp8);
    p.q_boxes = q_boxes;
    if (q_boxes) p.q_map = q_map_of(run);
    run_round_grid(run, p, fp8);
  };
}
const TileRunner run_rounds = rounds_with(true);

// The round decode of the same query gathered over W groups of heads ([W, rows, H / W, 576], as
// the DCP step decodes it), by boxes (encode_q_map's 4-D map: H a multiple of 64) or by copies.
TileRunner rounds_gathered(int W, bool q_boxes) {
  return [W, q_boxes](const testing::ScenarioSpec& spec, const TileRun& run) {
    const int H = spec.heads, gh = H / W;
    ASSERT_EQ(H % W, 0);
    constexpr std::size_t kRow = kHeadDim * 2;
    const std::size_t rows = run.q.size() / (std::size_t(H) * kRow);
    std::vector<std::uint8_t> gathered(run.q.size());
    for (std::size_t row = 0; row < rows; ++row) {
      for (int h = 0; h < H; ++h) {
        const std::size_t slot = (std::size_t(h / gh) * rows + row) * gh + std::size_t(h % gh);
        std::memcpy(&gathered[slot * kRow], &run.q[(row * H + std::size_t(h)) * kRow], kRow);
      }
    }
    DecodeParams p = run.p;
    p.q = gathered.data();
    p.q_group_heads = gh;
    p.q_rows = std::int64_t(rows);
    const bool fp8 = spec.kv_dtype == DType::fp8_e4m3;
    p.kv_map = kv_map_of(p, fp8);
    p.q_boxes = q_boxes;
    if (q_boxes) {
      dcpmla_emu::EmuTensorMap m{gathered.data(),
                                 {std::uint64_t(kHeadDim), std::uint64_t(gh)},
                                 kRow,
                                 {64u, std::uint32_t(gh)},
                                 2,
                                 {},
                                 {},
                                 {}};
      m.outer_dims[0] = rows;
      m.outer_dims[1] = std::uint64_t(W);
      m.outer_strides[0] = kRow * std::size_t(gh);
      m.outer_strides[1] = kRow * std::size_t(gh) * rows;
      m.outer_box[1] = std::uint32_t(64 / gh);
      p.q_map = dcpmla_emu::encode_tensor_map(m);
    }
    run_round_grid(run, p, fp8);
  };
}

// The sm90 kernel sm90_decode.cu launches for the scenario's cache.
void run_sm90(const testing::ScenarioSpec& spec, const TileRun& run) {
  if (spec.kv_dtype == DType::fp8_e4m3) {
    run_ws<sm90::Cache::fp8, false>(run);
  } else if (bulk_copies_fit(spec.block_size)) {
    run_ws<sm90::Cache::bf16, true>(run);
  } else {
    run_ws<sm90::Cache::bf16, false>(run);
  }
}

// Long enough walks for several KV tiles a thread block (stages reused, both mbarrier parities):
// Q 3, 1, 8, 2 (the last non-causal), contexts up to 700 over W = 2. rising: the latents of each
// request's second half are 6x larger, so a row's running max rises past the rescale slack on
// later tiles (O is rescaled between P.V's, which random data alone seldom asks for).
testing::Scenario walk_case(DType kv, int H, int bs, std::uint64_t seed, bool rising = false) {
  testing::ScenarioSpec spec;
  spec.world = 2;
  spec.heads = H;
  spec.block_size = bs;
  spec.kv_dtype = kv;
  spec.q_dtype = DType::bf16;
  spec.seed = seed;
  testing::Scenario sc = testing::custom_scenario(
      spec, {3, 1, 8, 2}, {700, 9, 300, 260},
      {Mask::causal, Mask::causal, Mask::causal, Mask::full}, /*padding=*/1);
  if (rising) testing::raise_second_halves(sc, 6.0f);
  return sc;
}

// The emulated kernel `run` against the CPU backend on one rank of sc, KV split in chunks of
// `chunk` blocks; absolute tolerances, times `scale` where the rising latents reach ~25 (a bf16
// step is 0.125 there).
void expect_matches_cpu(const testing::Scenario& sc, int rank, int chunk, DType out, bool rising,
                        double scale, const TileRunner& run) {
  Split limits;
  limits.kv_chunk_blocks = chunk;
  SCOPED_TRACE(testing::describe(sc.spec) + " out " + to_string(out) + " rank " +
               std::to_string(rank) + " chunk " + std::to_string(chunk) +
               (rising ? " rising" : ""));
  const Result got = emulated_decode(sc, rank, sc.batch, limits, out, run);
  const Result want = cpu_decode(sc, rank, limits, out);
  const double out_tol = (out == DType::bf16 ? 2e-2 : 1e-2) * scale;
  testing::expect_rows_close(got, want, out_tol, 1e-4);
  // And against the double-precision oracle, independent of the CPU backend (P is bf16 in the
  // tensor-core kernels, as in the CPU backend's matching path).
  testing::expect_rank_matches_reference(sc, rank, got.out, got.lse, out_tol, 2e-4 * scale);
}

TEST(TensorCoreEmulation, V3MatchesCpuBackend) {
  struct Case {
    DType kv;
    int H, bs, chunk;
    DType out;
  };
  // H 16: narrow tiles (16 pairs) beside whole ones; 24, 70: partial wide tiles; block size 64 and
  // 32 by bulk copies (32: two boxes a chunk), 48 by the threads' copies; fp8 by the threads.
  const Case cases[] = {
      {DType::bf16, 16, 64, 0, DType::f32},     {DType::bf16, 70, 64, 2, DType::bf16},
      {DType::bf16, 24, 32, 0, DType::f32},     {DType::bf16, 16, 48, 3, DType::f32},
      {DType::fp8_e4m3, 70, 64, 0, DType::f32}, {DType::fp8_e4m3, 16, 16, 4, DType::bf16},
  };
  int seed = 1;
  for (const Case& c : cases) {
    const bool rising = seed % 2 == 0;
    const testing::Scenario sc = walk_case(c.kv, c.H, c.bs, seed, rising);
    const int rank = seed++ % 2;
    expect_matches_cpu(sc, rank, c.chunk, c.out, rising, rising ? 8.0 : 1.0, run_sm90);
    if (HasFatalFailure()) return;
  }
}

TEST(TensorCoreEmulation, FlattenedAndNativeGiveTheSameBits) {
  int seed = 40;
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    for (int H : {16, 24}) {
      const testing::Scenario sc = walk_case(kv, H, 64, seed++, /*rising=*/H == 24);
      Split limits;
      limits.kv_chunk_blocks = H == 16 ? 0 : 2;
      const Batch flat = flatten(sc.batch);
      const int rank = seed % 2;
      SCOPED_TRACE(testing::describe(sc.spec) + " rank " + std::to_string(rank));
      const Result native = emulated_decode(sc, rank, sc.batch, limits, DType::f32, run_sm90);
      const Result flattened = emulated_decode(sc, rank, flat, limits, DType::f32, run_sm90);
      ASSERT_EQ(std::memcmp(native.out.data(), flattened.out.data(), native.out.size() * 4), 0);
      ASSERT_EQ(std::memcmp(native.lse.data(), flattened.lse.data(), native.lse.size() * 4), 0);
    }
  }
}

// The round decode against the CPU backend: several rounds a walk (both stages and mbarrier
// parities), odd and even tile counts, partial last tiles, tiles of 16 and 32 pairs, rows that see
// no key (the small DCP case), pages of 64 and 128 tokens, split and unsplit, bf16 and fp8 caches
// (fp8 also at 16 and 70 heads: tiles of 16 pairs and partial wide tiles, which it takes).
TEST(TensorCoreEmulation, RoundsMatchCpuBackend) {
  struct Case {
    DType kv;
    int H, bs, chunk;
    DType out;
    bool small;
  };
  const Case cases[] = {
      {DType::bf16, 32, 64, 0, DType::f32, false},
      {DType::bf16, 64, 128, 2, DType::bf16, false},
      {DType::bf16, 16, 64, 3, DType::f32, false},
      {DType::bf16, 32, 64, 0, DType::f32, true},
      {DType::fp8_e4m3, 32, 64, 0, DType::f32, false},
      {DType::fp8_e4m3, 64, 128, 2, DType::bf16, false},
      {DType::fp8_e4m3, 32, 64, 0, DType::f32, true},
      {DType::fp8_e4m3, 16, 64, 2, DType::bf16, false},
      {DType::fp8_e4m3, 70, 64, 0, DType::f32, false},
  };
  int seed = 70;
  for (const Case& c : cases) {
    const bool rising = seed % 2 == 0;
    const testing::Scenario sc = c.small
                                     ? small_case(DType::bf16, c.kv, c.H, c.bs, std::uint64_t(seed))
                                     : walk_case(c.kv, c.H, c.bs, std::uint64_t(seed), rising);
    const int rank = seed++ % 2;
    expect_matches_cpu(sc, rank, c.chunk, c.out, rising, rising && !c.small ? 8.0 : 1.0,
                       run_rounds);
    if (HasFatalFailure()) return;
  }
}

// The round decode against the warp-specialised form on the same data: for a bf16 cache the same
// bits; for fp8 (MMAs in f16 here, in bf16 there) the same LSE bits (NaN where it is NaN), since
// S and the fp32 exp-sums are the same, and outputs within out_tol: they differ by P's rounding
// (f16 against bf16), relative 2^-9 of the latents' magnitude.
void expect_like_warp_specialised(DType kv, const Result& ws, const Result& rounds,
                                  double out_tol) {
  if (kv != DType::fp8_e4m3) {
    ASSERT_EQ(std::memcmp(ws.lse.data(), rounds.lse.data(), ws.lse.size() * 4), 0);
    ASSERT_EQ(std::memcmp(ws.out.data(), rounds.out.data(), ws.out.size() * 4), 0);
    return;
  }
  for (std::size_t i = 0; i < ws.lse.size(); ++i) {
    const float a = ws.lse[i], b = rounds.lse[i];
    ASSERT_TRUE(std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0)
        << "pair " << i << ": " << a << " against " << b;
  }
  bool differ = false;
  for (std::size_t i = 0; i < ws.out.size(); ++i) {
    const float a = ws.out[i], b = rounds.out[i];
    ASSERT_EQ(std::isnan(a), std::isnan(b)) << "element " << i;
    if (std::isnan(a)) continue;
    ASSERT_NEAR(a, b, out_tol) << "element " << i;
    differ = differ || a != b;
  }
  EXPECT_TRUE(differ) << "fp8 outputs bit-identical to the bf16 MMAs' (P not in f16?)";
}

// The round decode against the warp-specialised form (kernel.cuh: wide tiles at H 32 and 64,
// narrow ones at H 16; fp8 tiles widened to bf16 by its output warpgroups' threads), as
// expect_like_warp_specialised says, and the bits of its own flattened form.
TEST(TensorCoreEmulation, RoundsGiveTheBitsOfTheOtherForms) {
  int seed = 80;
  for (int H : {16, 32, 64}) {
    for (bool rising : {false, true}) {
      for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
        if (kv == DType::fp8_e4m3 && (H == 32) != rising) continue;
        const testing::Scenario sc = walk_case(kv, H, 64, std::uint64_t(seed++), rising);
        Split limits;
        limits.kv_chunk_blocks = H == 32 ? 2 : 0;
        const int rank = seed % 2;
        SCOPED_TRACE(testing::describe(sc.spec) + " rank " + std::to_string(rank) +
                     (rising ? " rising" : ""));
        const Result ws = emulated_decode(sc, rank, sc.batch, limits, DType::f32, run_sm90);
        const Result rounds = emulated_decode(sc, rank, sc.batch, limits, DType::f32, run_rounds);
        expect_like_warp_specialised(kv, ws, rounds, rising ? 8e-2 : 1e-2);
        if (HasFatalFailure()) return;
        if (!rising) continue;
        const Result flat =
            emulated_decode(sc, rank, flatten(sc.batch), limits, DType::f32, run_rounds);
        ASSERT_EQ(std::memcmp(flat.out.data(), rounds.out.data(), ws.out.size() * 4), 0);
        ASSERT_EQ(std::memcmp(flat.lse.data(), rounds.lse.data(), ws.lse.size() * 4), 0);
      }
    }
  }
}

// The query by boxes (rows past a tile's pairs then hold the next pairs of q, or NaN past its end)
// and by the consumers' copies (zeros there) give the same bits, bf16 and fp8 (whose query scale
// comes from the tile's own rows). At 104 heads request 0's last tile holds 56 pairs and
// request 1's two 52 (tiles of more than 48 pairs come by boxes), beside rows that see no key.
TEST(TensorCoreEmulation, RoundsQueryByBoxesOrCopiesGiveTheSameBits) {
  constexpr int H = 104;
  int seed = 120;
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    for (bool small : {false, true}) {
      testing::Scenario sc = small ? small_case(DType::bf16, kv, H, 64, std::uint64_t(seed))
                                   : walk_case(kv, H, 64, std::uint64_t(seed), true);
      ++seed;
      // Odd requests' queries 2^40 times larger: a query scale taken from the pairs after a
      // tile of request 0 would flush its f16 query to zeros.
      std::size_t row = 0;
      for (int b = 0; b < sc.batch.num_requests(); ++b) {
        const std::size_t q = std::size_t(sc.batch.q_len(b));
        if (b % 2 == 1) {
          for (std::size_t i = row * H * kHeadDim; i < (row + q) * H * kHeadDim; ++i) {
            sc.q[i] = std::ldexp(sc.q[i], 40);
          }
        }
        row += q;
      }
      const int rank = seed % 2;
      SCOPED_TRACE(testing::describe(sc.spec) + " rank " + std::to_string(rank));
      const Split limits;
      const Result boxes =
          emulated_decode(sc, rank, sc.batch, limits, DType::f32, rounds_with(true));
      const Result copies =
          emulated_decode(sc, rank, sc.batch, limits, DType::f32, rounds_with(false));
      ASSERT_EQ(std::memcmp(boxes.out.data(), copies.out.data(), boxes.out.size() * 4), 0);
      ASSERT_EQ(std::memcmp(boxes.lse.data(), copies.lse.data(), boxes.lse.size() * 4), 0);
    }
  }
}

// A gathered query (W groups of H / W heads, as the DCP step decodes it) by 4-D boxes and by the
// threads' copies gives the bits of the plain query: 128 heads in groups of 64 and 16, 64 heads in
// groups of 16, bf16 and fp8.
TEST(TensorCoreEmulation, RoundsGatheredQueryGivesThePlainQuerysBits) {
  struct Case {
    int H, W;
    DType kv;
  };
  const Case cases[] = {{128, 2, DType::bf16}, {128, 8, DType::fp8_e4m3}, {64, 4, DType::bf16}};
  int seed = 130;
  for (const Case& c : cases) {
    const testing::Scenario sc = walk_case(c.kv, c.H, 64, std::uint64_t(seed++), true);
    const int rank = seed % 2;
    SCOPED_TRACE(testing::describe(sc.spec) + " W " + std::to_string(c.W));
    const Split limits;
    const Result plain = emulated_decode(sc, rank, sc.batch, limits, DType::f32, run_rounds);
    for (bool q_boxes : {true, false}) {
      SCOPED_TRACE(q_boxes ? "boxes" : "copies");
      const Result g =
          emulated_decode(sc, rank, sc.batch, limits, DType::f32, rounds_gathered(c.W, q_boxes));
      ASSERT_EQ(std::memcmp(plain.out.data(), g.out.data(), plain.out.size() * 4), 0);
      ASSERT_EQ(std::memcmp(plain.lse.data(), g.lse.data(), plain.lse.size() * 4), 0);
    }
  }
}

// Block ids outside the cache (a device table the host never checked) read no memory: their
// boxes ask past the tensor's end, and the round decode gives what the warp-specialised form
// gives (expect_like_warp_specialised), NaN exactly where a pair's visible keys reach such a page
// (request 0), bf16 and fp8.
TEST(TensorCoreEmulation, RoundsReadPagesOutsideTheCacheAsNaN) {
  int seed = 95;
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    const testing::Scenario sc = walk_case(kv, 32, 64, std::uint64_t(seed++));
    Batch bad = sc.batch;
    bad.block_table[1] = 1 << 30;  // request 0, second block
    bad.block_table[2] = -5;       // request 0, third block
    const int rank = seed % 2;
    SCOPED_TRACE(testing::describe(sc.spec) + " rank " + std::to_string(rank));
    const Split limits;
    const Result ws = emulated_decode(sc, rank, bad, limits, DType::f32, run_sm90);
    const Result rounds = emulated_decode(sc, rank, bad, limits, DType::f32, run_rounds);
    expect_like_warp_specialised(kv, ws, rounds, 1e-2);
    if (HasFatalFailure()) return;
    const std::int64_t first_other = std::int64_t(sc.batch.q_len(0)) * sc.spec.heads;
    for (std::int64_t i = 0; i < std::int64_t(rounds.lse.size()); ++i) {
      EXPECT_EQ(std::isnan(rounds.lse[std::size_t(i)]), i < first_other) << "pair " << i;
    }
  }
}

// For an fp8 cache the round decode takes Q in f16, scaled by a power of two chosen from the
// tile's largest |q|: a query far beyond f16's range (x 2^17: |q| up to ~2^19) or far below its
// normals (x 2^-40), with the softmax scale divided by the same factor, gives what the CPU backend
// gives (unscaled, the first would overflow to inf and the second flush to zeros).
TEST(TensorCoreEmulation, RoundsScaleAnFp8CachesQueryIntoF16) {
  for (int e : {17, -40}) {
    testing::Scenario sc = walk_case(DType::fp8_e4m3, 32, 64, std::uint64_t(100 + e));
    for (float& v : sc.q) v = std::ldexp(v, e);
    sc.spec.softmax_scale = std::ldexp(sc.spec.softmax_scale, -e);
    expect_matches_cpu(sc, 1, 0, DType::f32, false, 1.0, run_rounds);
    if (HasFatalFailure()) return;
  }
}

// The emulated bulk copy of a uint8 box (as wip/fp8-bulk-staging stages fp8 bytes): rows land
// unswizzled, 64 bytes apart, with zeros past the tensor; the mbarrier completes on its bytes.
TEST(TensorCoreEmulation, Uint8BoxLandsUnswizzledWithZerosPastTheTensor) {
  std::vector<unsigned char> tensor(100 * 576);  // 100 rows of 576 bytes
  for (std::size_t i = 0; i < tensor.size(); ++i) tensor[i] = static_cast<unsigned char>(i * 7 + 1);
  const CUtensorMap map =
      dcpmla_emu::encode_tensor_map({tensor.data(), {576, 100}, 576, {64, 8}, 1, {}, {}, {}});
  std::vector<unsigned char> got(8 * 64);
  dcpmla_emu::run_grid(1, 32, 4096, [&] {
    if (threadIdx.x != 0) return;
    unsigned char* smem = emulated_shared_memory();
    const std::uint32_t bar = sm90::smem_addr(smem + 2048);
    hopper::mbarrier_init(bar, 1);
    hopper::mbarrier_arrive_expect_tx(bar, 8 * 64);
    hopper::bulk_tensor_load_2d(sm90::smem_addr(smem + 512), &map, 128, 96, bar);  // rows 96-103
    hopper::mbarrier_wait(bar, 0);
    std::memcpy(got.data(), smem + 512, got.size());
  });
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 64; ++c) {
      const int row = 96 + r;
      const unsigned char want = row < 100 ? tensor[std::size_t(row) * 576 + 128 + c] : 0;
      ASSERT_EQ(got[std::size_t(r) * 64 + c], want) << "row " << r << " byte " << c;
    }
  }
}

// The emulation's check of operand writes: an MMA's shared-memory operand may be overwritten only
// by a thread ordered after the MMA's completion. One warpgroup multiplies A (64 x 16) by B (16 x
// 16) from shared memory; threads 1-127 wait for it; then thread 0 overwrites an element of A
// having waited itself, or after a named barrier the others arrive at once they have waited, or
// with neither (once the MMA has completed in the emulation, which the check at completion cannot
// see; on a GPU the write could land while the MMA still reads).
enum class Writer { waited, after_barrier, unordered };
void overwrite_operand_after_mma(Writer writer) {
  dcpmla_emu::run_grid(1, 128, 16384, [&] {
    unsigned char* smem = emulated_shared_memory();
    const std::uint32_t a = sm90::smem_addr(smem), b = sm90::smem_addr(smem + 8192);
    float d[8];
    hopper::wgmma_m64n16k16_ss(d, hopper::smem_descriptor(a, 16, 1024),
                               hopper::smem_descriptor(b, 16, 1024), false);
    hopper::wgmma_commit();
    const bool first = threadIdx.x == 0;
    if (!first || writer == Writer::waited) hopper::wgmma_wait<0>();
    if (writer == Writer::after_barrier) {
      if (first) {
        sm90::named_barrier_sync(1, 128);
      } else {
        sm90::named_barrier_arrive(1, 128);
      }
    }
    if (!first) return;
    for (bool done = false; !done && writer == Writer::unordered;) {
      {
        std::lock_guard lk(dcpmla_emu::sync_state.mutex);
        const auto& mmas = dcpmla_emu::warpgroup_mmas[0].mmas;
        done = !mmas.empty() && mmas[0].checked;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    sm90::st_shared4(a, 0u);
  });
}

TEST(TensorCoreEmulation, OperandWritesMustFollowTheMmasCompletion) {
  overwrite_operand_after_mma(Writer::waited);
  overwrite_operand_after_mma(Writer::after_barrier);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(overwrite_operand_after_mma(Writer::unordered),
               "not ordered after that MMA's completion");
}

}  // namespace
}  // namespace dcpmla::cuda
