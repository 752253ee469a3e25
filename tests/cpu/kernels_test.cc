// The CPU backend's small kernels: write_kv, unpack_query, the combine pieces and convert.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dcpmla/backend.h"
#include "dcpmla/batch.h"
#include "dcpmla/cache.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/merge.h"
#include "dcpmla/sharding.h"

namespace dcpmla {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_latents(std::size_t n, std::uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n * kHeadDim);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Every rank writes a request's whole history through its slot mapping: only the owner of a
// position writes, into page bt[local / bs] at offset local % bs, and nothing else changes.
TEST(WriteKv, OnlyOwnersWriteAndUnusedSlotsStayPoisoned) {
  for (DType dt : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
    for (int W : {1, 3, 4}) {
      for (int I : {1, 2}) {
        const int bs = 4;
        const std::int64_t T = 45;
        const float k_scale = dt == DType::fp8_e4m3 ? 0.0625f : 1.0f;
        const auto lat = random_latents(std::size_t(T), 100 + W * 10 + I);
        const std::vector<std::int32_t> bt = {9, 2, 7, 0, 5, 11, 3, 1, 8, 4, 6, 10, 12};
        auto be = make_cpu_backend(1);
        for (int r = 0; r < W; ++r) {
          const Sharding sh{W, r, I};
          HostKvCache cache(dt, 13, bs, k_scale);
          cache.poison();
          std::vector<std::int64_t> slots(static_cast<std::size_t>(T));
          for (std::int64_t p = 0; p < T; ++p) slots[p] = sh.slot(p, bt, bs);
          be->write_kv({TensorRef(lat.data(), DType::f32, {T, kHeadDim}),
                        TensorRef(slots.data(), DType::i64, {T}), cache.ref()},
                       nullptr);
          std::vector<bool> written(std::size_t(13) * bs, false);
          for (std::int64_t p = 0; p < T; ++p) {
            if (sh.owner(p) != r) {
              ASSERT_EQ(slots[p], -1);
              continue;
            }
            const std::int64_t li = sh.local_index(p);
            const std::int64_t block = bt[li / bs];
            const int off = int(li % bs);
            written[block * bs + off] = true;
            for (int d = 0; d < kHeadDim; d += 7) {
              const float x = lat[std::size_t(p) * kHeadDim + d];
              float want = x;
              if (dt == DType::bf16) want = bf16_to_float(float_to_bf16(x));
              if (dt == DType::fp8_e4m3) {
                want = fp8_e4m3_to_float(float_to_fp8_e4m3(x / k_scale)) * k_scale;
              }
              ASSERT_EQ(cache.at(block, off, d), want) << "p " << p << " d " << d;
            }
          }
          for (std::int64_t s = 0; s < 13 * bs; ++s) {
            if (written[s]) continue;
            for (int d = 0; d < kHeadDim; d += 31) {
              ASSERT_TRUE(std::isnan(cache.at(s / bs, int(s % bs), d)))
                  << "rank " << r << " wrote slot " << s << " it does not own";
            }
          }
        }
      }
    }
  }
}

TEST(WriteKv, Fp8StoresValueOverKScale) {
  const float k_scale = 0.25f;
  HostKvCache cache(DType::fp8_e4m3, 1, 2, k_scale);
  std::vector<float> lat(2 * kHeadDim);
  for (int d = 0; d < kHeadDim; ++d) {
    lat[d] = 0.01f * float(d - 288);             // small values, rounding matters
    lat[kHeadDim + d] = d % 2 ? 500.0f : -1e9f;  // saturates at 448 * k_scale
  }
  std::vector<std::int64_t> slots = {1, 0};
  auto be = make_cpu_backend(1);
  be->write_kv({TensorRef(lat.data(), DType::f32, {2, kHeadDim}),
                TensorRef(slots.data(), DType::i64, {2}), cache.ref()},
               nullptr);
  const auto* raw = static_cast<const std::uint8_t*>(cache.ref().data);
  for (int d = 0; d < kHeadDim; ++d) {
    // token 0 went to slot 1, token 1 to slot 0
    EXPECT_EQ(raw[kHeadDim + d], float_to_fp8_e4m3(lat[d] / k_scale)) << d;
    EXPECT_EQ(cache.at(0, 1, d), fp8_e4m3_to_float(raw[kHeadDim + d]) * k_scale);
    EXPECT_EQ(raw[d], d % 2 ? 0x7e : 0xfe);
    EXPECT_EQ(cache.at(0, 0, d), (d % 2 ? 448.0f : -448.0f) * k_scale);
  }
}

// SPEC section 1 and cache.h: the cache stores e4m3(x / k_scale). With a k_scale that is not a
// power of two, x * (1 / k_scale) rounds differently from x / k_scale for some x, and near an
// e4m3 rounding boundary that flips the stored code (so the cache no longer holds what the
// reference and every other reader assume).
TEST(WriteKv, Fp8StoresTheQuotientNotTheProductWithTheReciprocal) {
  const float k_scale = 0.04f;
  const float inv = 1.0f / k_scale;
  // deterministic sweep for values where the two roundings give different codes
  std::vector<float> witnesses;
  for (std::uint32_t i = 0; i < 40000000u && witnesses.size() < 8; ++i) {
    const float x = 0.5f + float(i) * 1e-7f;
    if (float_to_fp8_e4m3(x / k_scale) != float_to_fp8_e4m3(x * inv)) witnesses.push_back(x);
  }
  ASSERT_FALSE(witnesses.empty());
  std::vector<float> lat(kHeadDim);
  for (int d = 0; d < kHeadDim; ++d) lat[d] = witnesses[std::size_t(d) % witnesses.size()];
  HostKvCache cache(DType::fp8_e4m3, 1, 1, k_scale);
  std::vector<std::int64_t> slots = {0};
  make_cpu_backend(1)->write_kv({TensorRef(lat.data(), DType::f32, {1, kHeadDim}),
                                 TensorRef(slots.data(), DType::i64, {1}), cache.ref()},
                                nullptr);
  const auto* raw = static_cast<const std::uint8_t*>(cache.ref().data);
  int wrong = 0;
  for (int d = 0; d < kHeadDim; ++d) wrong += raw[d] != float_to_fp8_e4m3(lat[d] / k_scale);
  EXPECT_EQ(wrong, 0) << "of " << kHeadDim << " values (e.g. x = " << witnesses[0]
                      << ", k_scale = 0.04): stored e4m3(x * (1 / k_scale)) instead of "
                         "e4m3(x / k_scale)";
}

TEST(WriteKv, Bf16LatentsAndSkippedSlots) {
  HostKvCache cache(DType::f32, 2, 2);
  cache.poison();
  std::vector<std::uint16_t> lat(3 * kHeadDim);
  for (std::size_t i = 0; i < lat.size(); ++i) lat[i] = float_to_bf16(float(i % 97) - 40.5f);
  std::vector<std::int64_t> slots = {-1, 3, -1};
  auto be = make_cpu_backend(1);
  be->write_kv({TensorRef(lat.data(), DType::bf16, {3, kHeadDim}),
                TensorRef(slots.data(), DType::i64, {3}), cache.ref()},
               nullptr);
  for (int d = 0; d < kHeadDim; ++d) {
    EXPECT_EQ(cache.at(1, 1, d), bf16_to_float(lat[kHeadDim + d]));
    EXPECT_TRUE(std::isnan(cache.at(0, 0, d)));
    EXPECT_TRUE(std::isnan(cache.at(1, 0, d)));
  }
  // an empty write is fine
  be->write_kv({TensorRef(lat.data(), DType::f32, {0, kHeadDim}),
                TensorRef(slots.data(), DType::i64, {0}), cache.ref()},
               nullptr);
}

TEST(HostKvCache, PoisonIsNaNForEveryDtype) {
  for (DType dt : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
    HostKvCache c(dt, 2, 3, dt == DType::fp8_e4m3 ? 0.5f : 1.0f);
    c.poison();
    for (int b = 0; b < 2; ++b) {
      for (int o = 0; o < 3; ++o) {
        EXPECT_TRUE(std::isnan(c.at(b, o, 0)));
        EXPECT_TRUE(std::isnan(c.at(b, o, kHeadDim - 1)));
      }
    }
    EXPECT_EQ(c.ref().bytes(), std::size_t(2) * 3 * kHeadDim * dtype_size(dt));
  }
}

TEST(UnpackQuery, GatheredHeadGroupsBecomeContiguousHeads) {
  const int W = 3, N = 4, Hl = 2;
  std::vector<float> gathered(std::size_t(W) * N * Hl * kHeadDim);
  for (std::size_t i = 0; i < gathered.size(); ++i) gathered[i] = float(i);
  std::vector<float> q(gathered.size(), -1.0f);
  auto be = make_cpu_backend(2);
  be->unpack_query({TensorRef(gathered.data(), DType::f32, {W, N, Hl, kHeadDim}),
                    TensorRef(q.data(), DType::f32, {N, W * Hl, kHeadDim})},
                   nullptr);
  for (int n = 0; n < N; ++n) {
    for (int w = 0; w < W; ++w) {
      for (int h = 0; h < Hl; ++h) {
        for (int d = 0; d < kHeadDim; d += 13) {
          ASSERT_EQ(q[((std::size_t(n) * W * Hl) + w * Hl + h) * kHeadDim + d],
                    gathered[((std::size_t(w) * N + n) * Hl + h) * kHeadDim + d]);
        }
      }
    }
  }
}

// Partials of N rows x H heads on W ranks, with some empty (-inf, +inf or NaN LSE) partials
// carrying NaN payloads.
struct Partials {
  int W, N, H;
  std::vector<float> out;  // [W][N, H, 512]
  std::vector<float> lse;  // [W][N, H]
};

Partials make_partials(int W, int N, int H, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Partials p{W, N, H, std::vector<float>(std::size_t(W) * N * H * kLatentDim),
             std::vector<float>(std::size_t(W) * N * H)};
  for (auto& x : p.out) x = normal(rng);
  for (auto& l : p.lse) l = 3.0f * normal(rng);
  for (std::size_t i = 0; i < p.lse.size(); ++i) {
    const int kind = int(rng() % 6);
    if (kind == 0) p.lse[i] = -kInf;
    if (kind == 1) p.lse[i] = kInf;
    if (kind == 2) p.lse[i] = kNaN;
    if (kind <= 2) {
      for (int d = 0; d < kLatentDim; ++d) p.out[i * kLatentDim + d] = kNaN;
    }
  }
  // (row 0, head 0) empty on every rank (O = 0, LSE = -inf, its NaN payloads never read); with
  // two heads or more, (row 0, head 1) empty on the even ranks and NaN on the odd ones.
  for (int w = 0; w < W; ++w) {
    for (int h = 0; h < std::min(H, 2); ++h) {
      const std::size_t i = (std::size_t(w) * N + 0) * H + h;
      p.lse[i] = h == 1 && w % 2 ? kNaN : -kInf;
      for (int d = 0; d < kLatentDim; ++d) p.out[i * kLatentDim + d] = kNaN;
    }
  }
  return p;
}

// The merged O and LSE of (row n, head h) in double: NaN everywhere when a partial's LSE is NaN
// or +inf (non-finite inputs are never hidden), empty partials (-inf) skipped.
std::pair<std::vector<double>, double> merged_ref(const Partials& p, int n, int h) {
  double m = -INFINITY;
  for (int w = 0; w < p.W; ++w) {
    const float l = p.lse[(std::size_t(w) * p.N + n) * p.H + h];
    if (std::isnan(l) || l == kInf) return {std::vector<double>(kLatentDim, NAN), NAN};
    m = std::max(m, double(l));
  }
  std::vector<double> o(kLatentDim, 0.0);
  if (m == -INFINITY) return {o, -INFINITY};
  double s = 0;
  for (int w = 0; w < p.W; ++w) {
    const float l = p.lse[(std::size_t(w) * p.N + n) * p.H + h];
    if (std::isfinite(l)) s += std::exp(l - m);
  }
  for (int w = 0; w < p.W; ++w) {
    const std::size_t i = (std::size_t(w) * p.N + n) * p.H + h;
    if (!std::isfinite(p.lse[i])) continue;
    const double wt = std::exp(p.lse[i] - m) / s;
    for (int d = 0; d < kLatentDim; ++d) o[d] += wt * p.out[i * kLatentDim + d];
  }
  return {o, m + std::log(s)};
}

// Checks a merged LSE against merged_ref's: NaN, -inf or close.
void expect_lse(float got, double want) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << got;
  } else if (std::isinf(want)) {
    EXPECT_TRUE(std::isinf(got) && got < 0) << got;
  } else {
    EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, std::abs(want)));
  }
}

// ag_rs: rescale on every rank, then the reduce-scatter sum (done here by hand).
TEST(Combine, RescaleThenSumEqualsMergeAndNeverLeaksGarbage) {
  const int W = 4, N = 5, H = 8, Hl = H / W;
  const auto p = make_partials(W, N, H, 21);
  auto be = make_cpu_backend(2);
  std::vector<std::vector<float>> sends(W), lse_out(W);
  for (int r = 0; r < W; ++r) {
    sends[r].assign(std::size_t(W) * N * Hl * kLatentDim, 123.0f);
    lse_out[r].assign(std::size_t(N) * Hl, 123.0f);
    be->combine_rescale({W, r, TensorRef(p.lse.data(), DType::f32, {W, N, H}),
                         TensorRef(p.out.data() + std::size_t(r) * N * H * kLatentDim, DType::f32,
                                   {N, H, kLatentDim}),
                         TensorRef(sends[r].data(), DType::f32, {W, N, Hl, kLatentDim}),
                         TensorRef(lse_out[r].data(), DType::f32, {N, Hl})},
                        nullptr);
  }
  for (int dest = 0; dest < W; ++dest) {
    for (int n = 0; n < N; ++n) {
      for (int hl = 0; hl < Hl; ++hl) {
        const int h = dest * Hl + hl;
        const auto [o, l] = merged_ref(p, n, h);
        expect_lse(lse_out[dest][std::size_t(n) * Hl + hl], l);
        for (int d = 0; d < kLatentDim; ++d) {
          float sum = 0;
          for (int r = 0; r < W; ++r) {
            const float v = sends[r][((std::size_t(dest) * N + n) * Hl + hl) * kLatentDim + d];
            if (!std::isnan(l)) {
              ASSERT_FALSE(std::isnan(v)) << "garbage leaked from rank " << r;
            }
            sum += v;
          }
          if (std::isnan(l)) {
            ASSERT_TRUE(std::isnan(sum)) << "poisoned partial dropped: " << n << " " << h;
          } else {
            ASSERT_NEAR(sum, o[d], 1e-5) << n << " " << h << " " << d;
          }
        }
      }
    }
  }
}

// a2a: pack on every rank, the all-to-all (by hand), merge on the receiver.
TEST(Combine, PackAllToAllMergeEqualsMergeAndNeverLeaksGarbage) {
  const int W = 3, N = 4, H = 6, Hl = H / W;
  const auto p = make_partials(W, N, H, 22);
  auto be = make_cpu_backend(2);
  std::vector<std::vector<float>> sends(W);
  for (int r = 0; r < W; ++r) {
    sends[r].assign(std::size_t(W) * N * Hl * kPackedRow, 0.0f);
    be->combine_pack({W,
                      TensorRef(p.out.data() + std::size_t(r) * N * H * kLatentDim, DType::f32,
                                {N, H, kLatentDim}),
                      TensorRef(p.lse.data() + std::size_t(r) * N * H, DType::f32, {N, H}),
                      TensorRef(sends[r].data(), DType::f32, {W, N, Hl, kPackedRow})},
                     nullptr);
  }
  const std::size_t chunk = std::size_t(N) * Hl * kPackedRow;
  for (int dest = 0; dest < W; ++dest) {
    std::vector<float> recv(std::size_t(W) * chunk);
    for (int src = 0; src < W; ++src) {
      std::memcpy(&recv[src * chunk], &sends[src][dest * chunk], chunk * sizeof(float));
    }
    for (DType out_dt : {DType::f32, DType::bf16}) {
      std::vector<std::uint8_t> out(std::size_t(N) * Hl * kLatentDim * dtype_size(out_dt));
      std::vector<float> lse(std::size_t(N) * Hl);
      be->combine_merge({TensorRef(recv.data(), DType::f32, {W, N, Hl, kPackedRow}),
                         TensorRef(out.data(), out_dt, {N, Hl, kLatentDim}),
                         TensorRef(lse.data(), DType::f32, {N, Hl}),
                         -1,
                         {}},
                        nullptr);
      for (int n = 0; n < N; ++n) {
        for (int hl = 0; hl < Hl; ++hl) {
          const auto [o, l] = merged_ref(p, n, dest * Hl + hl);
          expect_lse(lse[std::size_t(n) * Hl + hl], l);
          for (int d = 0; d < kLatentDim; ++d) {
            const std::size_t i = (std::size_t(n) * Hl + hl) * kLatentDim + d;
            float v;
            if (std::isnan(l)) {
              if (out_dt == DType::f32) {
                std::memcpy(&v, &out[i * 4], 4);
              } else {
                std::uint16_t h16;
                std::memcpy(&h16, &out[i * 2], 2);
                v = bf16_to_float(h16);
              }
              ASSERT_TRUE(std::isnan(v)) << "poisoned partial dropped: " << n << " " << hl;
            } else if (out_dt == DType::f32) {
              std::memcpy(&v, &out[i * 4], 4);
              ASSERT_NEAR(v, o[d], 1e-5);
            } else {
              std::uint16_t h16;
              std::memcpy(&h16, &out[i * 2], 2);
              v = bf16_to_float(h16);
              ASSERT_NEAR(v, o[d], 1e-2 * std::max(1.0, std::abs(o[d])));
            }
            if (std::isinf(l)) {
              ASSERT_EQ(v, 0.0f);
            }
          }
        }
      }
    }
  }
}

// The merge with the receiver's own partial read from its send buffer (CombineMergeArgs::own)
// gives the bits of the merge of the full exchange, whatever the own chunk of recv holds.
TEST(Combine, MergeReadsTheOwnPartialFromOwn) {
  const int W = 3, N = 4, H = 6, Hl = H / W;
  const auto p = make_partials(W, N, H, 23);
  auto be = make_cpu_backend(2);
  for (DType payload : {DType::f32, DType::bf16}) {
    const std::int64_t row = packed_row(payload);
    const std::size_t chunk = std::size_t(N * Hl * row) * dtype_size(payload);  // bytes
    std::vector<std::uint8_t> full(W * chunk);
    be->combine_pack({W, TensorRef(p.out.data(), DType::f32, {N, H, kLatentDim}),
                      TensorRef(p.lse.data(), DType::f32, {N, H}),
                      TensorRef(full.data(), payload, {W, N, Hl, row})},
                     nullptr);
    auto merged = [&](const std::vector<std::uint8_t>& recv, int own_rank, TensorRef own) {
      std::vector<float> out(std::size_t(N) * Hl * (kLatentDim + 1));
      be->combine_merge(
          {TensorRef(const_cast<std::uint8_t*>(recv.data()), payload, {W, N, Hl, row}),
           TensorRef(out.data(), DType::f32, {N, Hl, kLatentDim}),
           TensorRef(out.data() + N * Hl * kLatentDim, DType::f32, {N, Hl}), own_rank, own},
          nullptr);
      return out;
    };
    const auto want = merged(full, -1, {});
    for (int own_rank = 0; own_rank < W; ++own_rank) {
      std::vector<std::uint8_t> holey = full;
      std::fill_n(holey.begin() + own_rank * chunk, chunk, std::uint8_t(0xff));  // NaN
      const auto got =
          merged(holey, own_rank, TensorRef(full.data() + own_rank * chunk, payload, {N, Hl, row}));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << to_string(payload) << " own_rank " << own_rank;
    }
  }
}

TEST(BackendMemory, AllocateCopyAccumulate) {
  auto be = make_cpu_backend(2);
  const std::size_t n = 1000;
  DeviceBuffer a(*be, n * sizeof(float)), b(*be, n * sizeof(float));
  std::vector<float> host(n), back(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = float(i) * 0.5f;
  be->upload(a.data(), host.data(), n * sizeof(float), nullptr);
  be->copy(b.data(), a.data(), n * sizeof(float), nullptr);
  be->accumulate(static_cast<float*>(b.data()), static_cast<const float*>(a.data()), n, nullptr);
  be->accumulate(static_cast<float*>(b.data()), static_cast<const float*>(a.data()), 10, nullptr);
  be->download(back.data(), b.data(), n * sizeof(float), nullptr);
  be->synchronize(nullptr);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], host[i] * (i < 10 ? 3 : 2)) << i;
  EXPECT_EQ(a.bytes(), n * sizeof(float));
  // views are checked against the allocation
  EXPECT_NO_THROW(a.tensor(DType::f32, {10, 100}));
  EXPECT_THROW(a.tensor(DType::f32, {10, 101}), Error);
  DeviceBuffer moved = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(moved.bytes(), n * sizeof(float));
  DeviceBuffer empty(*be, 0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(Convert, Fp32ToBf16AndFp32) {
  std::vector<float> src = {1.0f, 1.0f + std::ldexp(1.0f, -8), -3.14159f, kInf, 0.0f, 1e-40f};
  std::vector<std::uint16_t> b16(src.size());
  std::vector<float> f32(src.size());
  auto be = make_cpu_backend(1);
  const std::int64_t n = std::int64_t(src.size());
  be->convert({TensorRef(src.data(), DType::f32, {n}), TensorRef(b16.data(), DType::bf16, {n})},
              nullptr);
  be->convert({TensorRef(src.data(), DType::f32, {2, 3}), TensorRef(f32.data(), DType::f32, {6})},
              nullptr);
  for (std::size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(b16[i], float_to_bf16(src[i]));
    EXPECT_EQ(std::memcmp(&f32[i], &src[i], 4), 0);
  }
}

}  // namespace
}  // namespace dcpmla
