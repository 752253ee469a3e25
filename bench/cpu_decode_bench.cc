// CPU decode benchmarks: CpuBackend::decode on one rank's paged latent cache, next to the memory
// bandwidth ceilings of the same machine, measured in the same binary (run the ceilings first; the
// decode benchmarks report their KV bandwidth as a fraction of the read ceiling).
//
// Cost model: every request reads its local KV once, local_len * 576 * dtype bytes; every real
// query row does visible_keys * H * 2 * (576 + 512) FLOPs.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "dcpmla/backend.h"
#include "dcpmla/batch.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/numeric.h"
#include "dcpmla/plan.h"
#include "dcpmla/sharding.h"
#include "splitmix_rng.h"

namespace {

using namespace dcpmla;
using bench::SplitMixRng;

constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr std::size_t kGiB = std::size_t(1) << 30;
// Bandwidth buffers: far larger than the 105 MiB L3 of the benchmark machine.
constexpr std::size_t kCeilingBytes = kGiB;
// Each decode benchmark rotates over enough disjoint copies of its KV (same plan, other block
// tables) that the KV touched between two visits of the same page exceeds this.
constexpr std::size_t kMinKvBytes = 256 * kMiB;
constexpr int kBlockSize = 64;
constexpr double kFlopsPerKeyHead = 2.0 * (kHeadDim + kLatentDim);  // 2176
constexpr float kSoftmaxScale = 0.1352338f;
constexpr float kFp8Scale = 0.0625f;

// Runs fn(part, parts) on `threads` threads (the caller is one of them) and waits for all.
template <class F>
void on_threads(int threads, const F& fn) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([&fn, t, threads] { fn(t, threads); });
  fn(0, threads);
  for (auto& th : pool) th.join();
}

// Fills n elements with random values in dtype t: uniform in [-1, 1) / scale for f32 and bf16;
// for fp8, random codes of magnitude below 16 (below 1 after the 1/16 k_scale), made directly
// because encoding floats one by one is slow.
void fill_random(void* data, std::size_t n_elems, DType t, float scale, std::uint64_t seed,
                 int threads) {
  on_threads(threads, [&](int part, int parts) {
    const std::size_t begin = n_elems * part / parts, end = n_elems * (part + 1) / parts;
    SplitMixRng rng(seed * 1000003 + part);
    for (std::size_t i = begin; i < end; ++i) {
      if (t == DType::fp8_e4m3) {
        const std::uint64_t r = rng.next();  // sign, exponent field 0..10, any mantissa
        static_cast<std::uint8_t*>(data)[i] =
            std::uint8_t(((r & 1) << 7) | (((r >> 8) % 11) << 3) | ((r >> 16) & 7));
      } else if (t == DType::f32) {
        static_cast<float*>(data)[i] = rng.uniform() / scale;
      } else {
        static_cast<std::uint16_t*>(data)[i] = float_to_bf16(rng.uniform() / scale);
      }
    }
  });
}

float element(const void* data, DType t, std::size_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(data)[i];
    case DType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return fp8_e4m3_to_float(static_cast<const std::uint8_t*>(data)[i]);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---------------------------------------------------------------------------------------------
// Bandwidth ceilings

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<float, AlignedFree>;

AlignedBuffer aligned_buffer(std::size_t bytes) {
  void* p = std::aligned_alloc(4096, bytes);
  if (!p) throw std::bad_alloc();
  return AlignedBuffer(static_cast<float*>(p));
}

struct CeilingBuffers {
  AlignedBuffer src = aligned_buffer(kCeilingBytes);
  AlignedBuffer dst = aligned_buffer(kCeilingBytes);
  CeilingBuffers() {
    fill_random(src.get(), kCeilingBytes / sizeof(float), DType::f32, 1.0f, 7, 2);
    std::memset(dst.get(), 1, kCeilingBytes);  // fault the pages in outside timing
  }
};
std::unique_ptr<CeilingBuffers> g_ceiling_buffers;  // freed when the decode benchmarks start

CeilingBuffers& ceiling_buffers() {
  if (!g_ceiling_buffers) g_ceiling_buffers = std::make_unique<CeilingBuffers>();
  return *g_ceiling_buffers;
}

// Measured GB/s (GFLOP/s for the FMA peak) per thread count, one sample per timed run; a ceiling
// is the median of its samples.
std::map<int, std::vector<double>> g_read_gbps;
std::map<int, std::vector<double>> g_copy_gbps;
std::map<std::pair<int, int>, std::vector<double>> g_fma_gflops;  // (bits, threads)
// FMA GFLOP per CPU-second of the process (all threads) by width: the per-core peak, which
// time-sharing with other processes does not lower (wall-clock rates it does).
std::map<int, std::vector<double>> g_fma_core_gflops;

// CPU seconds used by all threads of this process.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Sum of n floats in 32 independent lanes: vectorises without reassociation flags.
float sum_floats(const float* __restrict p, std::size_t n) {
  constexpr int kLanes = 32;
  float part[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += p[i + l];
  }
  float s = 0.0f;
  for (; i < n; ++i) s += p[i];
  for (int l = 0; l < kLanes; ++l) s += part[l];
  return s;
}

void read_pass(const float* src, int threads) {
  const std::size_t n = kCeilingBytes / sizeof(float);
  std::vector<float> sums(std::size_t(threads), 0.0f);
  on_threads(threads, [&](int part, int parts) {
    const std::size_t begin = n * part / parts, end = n * (part + 1) / parts;
    sums[std::size_t(part)] = sum_floats(src + begin, end - begin);
  });
  float total = std::accumulate(sums.begin(), sums.end(), 0.0f);
  benchmark::DoNotOptimize(total);
}

void copy_pass(const float* src, float* dst, int threads) {
  on_threads(threads, [&](int part, int parts) {
    const std::size_t begin = kCeilingBytes * part / parts / 4096 * 4096;
    const std::size_t end = kCeilingBytes * (part + 1) / parts / 4096 * 4096;
    std::memcpy(reinterpret_cast<char*>(dst) + begin, reinterpret_cast<const char*>(src) + begin,
                end - begin);
  });
  benchmark::ClobberMemory();
}

// Read ceiling for `threads` threads: the median of the BM_ReadBandwidth runs so far, or a quick
// measurement when those were filtered out.
double read_ceiling_gbps(int threads) {
  auto& samples = g_read_gbps[threads];
  if (samples.empty()) {
    const float* src = ceiling_buffers().src.get();
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      read_pass(src, threads);
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      samples.push_back(double(kCeilingBytes) / dt.count() * 1e-9);
    }
  }
  return median(samples);
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = int(state.range(0));
  const float* src = ceiling_buffers().src.get();
  read_pass(src, threads);  // warm-up
  std::int64_t passes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    read_pass(src, threads);
    ++passes;
  }
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  const double gbps = double(passes) * double(kCeilingBytes) / dt.count() * 1e-9;
  if (dt.count() > 0.2) g_read_gbps[threads].push_back(gbps);
  state.counters["read_GB/s"] = benchmark::Counter(double(kCeilingBytes) * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(
      fmt::format("sum of {} MiB of floats, {} thread(s)", kCeilingBytes / kMiB, threads));
}

void BM_CopyBandwidth(benchmark::State& state) {
  const int threads = int(state.range(0));
  CeilingBuffers& buf = ceiling_buffers();
  copy_pass(buf.src.get(), buf.dst.get(), threads);  // warm-up
  std::int64_t passes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    copy_pass(buf.src.get(), buf.dst.get(), threads);
    ++passes;
  }
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  const double gbps = double(passes) * 2.0 * double(kCeilingBytes) / dt.count() * 1e-9;
  if (dt.count() > 0.2) g_copy_gbps[threads].push_back(gbps);
  // read + write bytes, as in PERF.md's device-to-device copy ceiling
  state.counters["copy_rw_GB/s"] = benchmark::Counter(
      2.0 * double(kCeilingBytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fmt::format("memcpy {} MiB, read + write bytes, {} thread(s)",
                             kCeilingBytes / kMiB, threads));
}

// FMA peak: kChains independent fp32 FMA chains per thread (enough to cover the FMA latency on
// two ports), in 256-bit (the width GCC auto-vectorises the library to on this target) or 512-bit
// registers. The compute ceiling is the faster of the two.
constexpr int kFmaChains = 12;
constexpr std::int64_t kFmaIters = 1 << 22;

template <int Bits>
struct FmaVec;
template <>
struct FmaVec<256> {
  using V = __m256;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
};
#if defined(__AVX512F__)
template <>
struct FmaVec<512> {
  using V = __m512;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
constexpr int kWidestFma = 512;
#else
constexpr int kWidestFma = 256;
#endif

template <int Bits>
float fma_chains(std::int64_t iters, float seed) {
  using F = FmaVec<Bits>;
  typename F::V acc[kFmaChains];
  for (int k = 0; k < kFmaChains; ++k) acc[k] = F::set1(seed + float(k));
  const auto a = F::set1(0.999999f), b = F::set1(1e-7f);
  for (std::int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kFmaChains; ++k) acc[k] = F::fma(acc[k], a, b);
  }
  float out[Bits / 32];
  float s = 0.0f;
  for (int k = 0; k < kFmaChains; ++k) {
    std::memcpy(out, &acc[k], sizeof(out));
    s += out[0];
  }
  return s;
}

template <int Bits>
constexpr double fma_pass_flops() {
  return 2.0 * kFmaChains * (Bits / 32) * double(kFmaIters);
}

template <int Bits>
void fma_pass(int threads) {
  std::vector<float> sums(std::size_t(threads), 0.0f);
  on_threads(threads, [&](int part, int) {
    sums[std::size_t(part)] = fma_chains<Bits>(kFmaIters, float(part));
  });
  benchmark::DoNotOptimize(sums.data());
}

template <int Bits>
void BM_FmaPeak(benchmark::State& state) {
  const int threads = int(state.range(0));
  fma_pass<Bits>(threads);
  std::int64_t passes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  for (auto _ : state) {
    fma_pass<Bits>(threads);
    ++passes;
  }
  const double cpu_s = process_cpu_seconds() - c0;
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  const double flops = double(threads) * fma_pass_flops<Bits>();
  if (dt.count() > 0.2) {
    g_fma_gflops[{Bits, threads}].push_back(double(passes) * flops / dt.count() * 1e-9);
    g_fma_core_gflops[Bits].push_back(double(passes) * flops / cpu_s * 1e-9);
  }
  state.counters["GFLOP/cpu-s"] = double(passes) * flops / cpu_s * 1e-9;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(
      fmt::format("fp32 FMA, {}-bit, {} chains, {} thread(s)", Bits, kFmaChains, threads));
}

// FMA ceiling for `threads`: the faster width's median, or a quick measurement at the widest width
// when the FMA benchmarks were filtered out.
double fma_ceiling_gflops(int threads) {
  double best = 0.0;
  for (int bits : {256, 512}) {
    const auto it = g_fma_gflops.find({bits, threads});
    if (it != g_fma_gflops.end() && !it->second.empty()) best = std::max(best, median(it->second));
  }
  if (best > 0.0) return best;
  auto& samples = g_fma_gflops[{0, threads}];
  if (samples.empty()) {
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fma_pass<kWidestFma>(threads);
      const double flops = double(threads) * fma_pass_flops<kWidestFma>();
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      samples.push_back(flops / dt.count() * 1e-9);
    }
  }
  return median(samples);
}

// Per-core FMA peak (GFLOP per CPU-second): the faster width's median, or the wall-clock
// single-thread ceiling when the FMA benchmarks were filtered out.
double fma_core_peak_gflops() {
  double best = 0.0;
  for (const auto& [bits, samples] : g_fma_core_gflops) {
    if (!samples.empty()) best = std::max(best, median(samples));
  }
  return best > 0.0 ? best : fma_ceiling_gflops(1);
}

// ---------------------------------------------------------------------------------------------
// Decode

struct DecodeBenchShape {
  std::string name;
  int requests;
  std::int64_t context;  // global T of every request (includes its Q tokens)
  int heads;             // heads the kernel sees
  int min_q, max_q;      // Q drawn uniformly from [min_q, max_q]
  int world = 1, rank = 0;
  DType kv_dtype = DType::bf16;
  int threads = 2;
};

std::string describe(const DecodeBenchShape& s) {
  return fmt::format("{} B={} T={} H={} Q={}{} W={} r={} {} {}t", s.name, s.requests, s.context,
                     s.heads, s.min_q, s.max_q == s.min_q ? "" : fmt::format("..{}", s.max_q),
                     s.world, s.rank, to_string(s.kv_dtype), s.threads);
}

// Everything one decode benchmark needs; built once and kept while consecutive benchmark runs
// (repetitions, iteration-count probes) use the same shape.
struct DecodeSetup {
  std::string key;
  std::unique_ptr<Backend> backend;
  Batch batch;
  Plan plan;
  std::vector<std::int32_t> row_request;  // row_requests(batch)
  int sets = 1;
  std::vector<DeviceBuffer> block_tables;  // one per disjoint copy of the KV
  DeviceBuffer cache, q, out, lse, workspace;
  DecodeArgs args;
  double kv_bytes = 0;  // per call: sum of local_len * 576 * dtype size
  double flops = 0;     // per call: sum over real rows of visible keys * H * 2176
  double kv_total_bytes = 0;
  std::int64_t rows = 0;
  std::size_t work_items = 0;
  int checked_pairs = 0;     // (row, head) pairs compared with the double-precision reference
  double max_out_error = 0;  // largest |O - O_ref| among them
};
std::unique_ptr<DecodeSetup> g_decode;

// Double-precision attention of one (row, head) straight from the cache bytes.
struct RowRef {
  double lse;
  std::vector<double> out;
};
RowRef reference_row(const DecodeSetup& s, std::int64_t row, int h) {
  const Plan& p = s.plan;
  const int b = s.row_request[std::size_t(row)];
  const int H = p.config.num_heads;
  const std::int32_t bound = p.row_local_bound[std::size_t(row)];
  const DType kt = s.args.cache.dtype, qt = s.args.q.dtype;
  const double kscale = s.args.cache.k_scale;
  const auto* table = static_cast<const std::int32_t*>(s.block_tables[0].data());
  std::vector<double> q(kHeadDim);
  for (int d = 0; d < kHeadDim; ++d) {
    q[d] = element(s.q.data(), qt, (std::size_t(row) * H + h) * kHeadDim + d);
  }
  std::vector<double> scores(static_cast<std::size_t>(bound));
  std::vector<std::size_t> entries(static_cast<std::size_t>(bound));
  double m = -INFINITY;
  for (std::int32_t t = 0; t < bound; ++t) {
    const std::int64_t block = table[std::size_t(b) * s.batch.max_blocks + t / kBlockSize];
    entries[t] = std::size_t(block * kBlockSize + t % kBlockSize) * kHeadDim;
    double dot = 0.0;
    for (int d = 0; d < kHeadDim; ++d) dot += q[d] * element(s.cache.data(), kt, entries[t] + d);
    scores[t] = dot * kscale * kSoftmaxScale;
    m = std::max(m, scores[t]);
  }
  RowRef r{-INFINITY, std::vector<double>(kLatentDim, 0.0)};
  if (bound == 0) return r;
  double sum = 0.0;
  for (std::int32_t t = 0; t < bound; ++t) {
    const double w = std::exp(scores[t] - m);
    sum += w;
    for (int d = 0; d < kLatentDim; ++d) {
      r.out[d] += w * element(s.cache.data(), kt, entries[t] + d) * kscale;
    }
  }
  for (auto& v : r.out) v /= sum;
  r.lse = m + std::log(sum);
  return r;
}

// Outside timing: every output finite (LSE -inf only for rows that see no key), and a few
// (row, head) pairs against a double-precision recomputation. Returns an error text or "".
std::string verify(DecodeSetup& s) {
  s.args.block_table =
      s.block_tables[0].tensor(DType::i32, {s.batch.num_requests(), s.batch.max_blocks});
  s.backend->decode(s.args, nullptr);
  const Plan& p = s.plan;
  const int H = p.config.num_heads;
  const DType ot = s.args.out.dtype;
  const auto* lse = static_cast<const float*>(s.lse.data());
  for (std::int64_t row = 0; row < p.num_real_rows; ++row) {
    const bool empty = p.row_local_bound[std::size_t(row)] == 0;
    for (int h = 0; h < H; ++h) {
      const float l = lse[row * H + h];
      if (empty ? !(std::isinf(l) && l < 0) : !std::isfinite(l)) {
        return fmt::format("lse[{}][{}] = {} (visible keys {})", row, h, l,
                           p.row_local_bound[std::size_t(row)]);
      }
    }
  }
  const std::size_t n_out = std::size_t(p.num_real_rows) * H * kLatentDim;
  for (std::size_t i = 0; i < n_out; ++i) {
    if (!std::isfinite(element(s.out.data(), ot, i))) return fmt::format("out[{}] not finite", i);
  }
  const double out_tol = ot == DType::bf16 ? 1e-2 : 1e-4, lse_tol = 1e-3;
  const int B = p.num_requests;
  for (int b : {0, B / 2, B - 1}) {
    const std::int64_t first = s.batch.query_start_loc[b];
    for (std::int64_t row : {first, std::int64_t(s.batch.query_start_loc[b + 1]) - 1}) {
      for (int h : {0, H - 1}) {
        const RowRef want = reference_row(s, row, h);
        const double got_lse = lse[row * H + h];
        if (std::isfinite(want.lse) ? std::abs(got_lse - want.lse) > lse_tol
                                    : got_lse != want.lse) {
          return fmt::format("lse of row {} head {}: {} vs reference {}", row, h, got_lse,
                             want.lse);
        }
        ++s.checked_pairs;
        for (int d = 0; d < kLatentDim; ++d) {
          const double got = element(s.out.data(), ot, (std::size_t(row) * H + h) * kLatentDim + d);
          s.max_out_error = std::max(s.max_out_error, std::abs(got - want.out[d]));
          if (std::abs(got - want.out[d]) > out_tol) {
            return fmt::format("out of row {} head {} dim {}: {} vs reference {}", row, h, d, got,
                               want.out[d]);
          }
        }
      }
    }
  }
  return "";
}

std::unique_ptr<DecodeSetup> make_decode_setup(const DecodeBenchShape& shape) {
  auto s = std::make_unique<DecodeSetup>();
  s->key = describe(shape);
  s->backend = make_cpu_backend(shape.threads);
  const Sharding sh{shape.world, shape.rank, 1};
  const int B = shape.requests;
  SplitMixRng rng(0x5eed0000u + std::uint64_t(B) * 131 + std::uint64_t(shape.heads));

  // The batch: ragged Q, every request of global length `context`.
  Batch& batch = s->batch;
  batch.query_start_loc.assign(1, 0);
  std::vector<std::int64_t> blocks_of(static_cast<std::size_t>(B));
  std::int64_t blocks_per_set = 0;
  for (int b = 0; b < B; ++b) {
    const int Q = rng.range(shape.min_q, shape.max_q);
    batch.query_start_loc.push_back(batch.query_start_loc.back() + Q);
    batch.total_len.push_back(shape.context);
    blocks_of[b] = (sh.local_len(shape.context) + kBlockSize - 1) / kBlockSize;
    blocks_per_set += blocks_of[b];
    batch.max_blocks = std::max<std::int32_t>(batch.max_blocks, std::int32_t(blocks_of[b]));
  }
  const std::size_t elem = dtype_size(shape.kv_dtype);
  const std::size_t set_bytes = std::size_t(blocks_per_set) * kBlockSize * kHeadDim * elem;
  s->sets = int(std::max<std::size_t>(1, (kMinKvBytes + set_bytes - 1) / set_bytes));
  const std::int64_t num_blocks = blocks_per_set * s->sets;
  s->kv_total_bytes = double(set_bytes) * s->sets;

  // Disjoint, scattered pages for every copy of the KV.
  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.next() % i]);
  std::size_t next_block = 0;
  for (int set = 0; set < s->sets; ++set) {
    std::vector<std::int32_t> table(std::size_t(B) * batch.max_blocks, 0);
    for (int b = 0; b < B; ++b) {
      for (std::int64_t i = 0; i < blocks_of[b]; ++i) {
        table[std::size_t(b) * batch.max_blocks + i] = perm[next_block++];
      }
    }
    if (set == 0) batch.block_table = table;
    s->block_tables.emplace_back(*s->backend, table.size() * sizeof(std::int32_t));
    std::memcpy(s->block_tables.back().data(), table.data(), table.size() * sizeof(std::int32_t));
  }

  // Split as the backend's own model says (workers: its threads).
  s->plan = make_plan(batch, {sh, shape.heads, kBlockSize, num_blocks, s->backend->device_model()});
  const Plan& p = s->plan;
  s->row_request = row_requests(batch);
  s->rows = p.num_rows;
  s->work_items = p.work.size();
  for (int b = 0; b < B; ++b) s->kv_bytes += double(p.request_local_len[b]) * kHeadDim * elem;
  for (std::int64_t i = 0; i < p.num_real_rows; ++i) {
    s->flops += double(p.row_local_bound[std::size_t(i)]) * shape.heads * kFlopsPerKeyHead;
  }

  // Fresh random cache, query and (poisoned) outputs.
  const float k_scale = shape.kv_dtype == DType::fp8_e4m3 ? kFp8Scale : 1.0f;
  const std::size_t cache_elems = std::size_t(num_blocks) * kBlockSize * kHeadDim;
  s->cache = DeviceBuffer(*s->backend, cache_elems * elem);
  fill_random(s->cache.data(), cache_elems, shape.kv_dtype, k_scale, 11, 2);
  const DType qt = shape.kv_dtype == DType::f32 ? DType::f32 : DType::bf16;
  const std::int64_t rows = p.num_rows, H = shape.heads;
  s->q = DeviceBuffer(*s->backend, std::size_t(rows * H * kHeadDim) * dtype_size(qt));
  fill_random(s->q.data(), std::size_t(rows * H * kHeadDim), qt, 1.0f, 13, 1);
  s->out = DeviceBuffer(*s->backend, std::size_t(rows * H * kLatentDim) * dtype_size(qt));
  std::memset(s->out.data(), 0xff, s->out.bytes());
  s->lse = DeviceBuffer(*s->backend, std::size_t(rows * H) * sizeof(float));
  std::memset(s->lse.data(), 0xff, s->lse.bytes());
  const std::size_t ws = decode_workspace_bytes(p);
  if (ws) s->workspace = DeviceBuffer(*s->backend, ws);

  DecodeArgs& a = s->args;
  a.plan = &s->plan;
  a.q = s->q.tensor(qt, {rows, H, kHeadDim});
  a.cache = KvCacheRef{s->cache.data(), shape.kv_dtype, num_blocks, kBlockSize, k_scale};
  a.out = s->out.tensor(qt, {rows, H, kLatentDim});
  a.lse = s->lse.tensor(DType::f32, {rows, H});
  a.softmax_scale = kSoftmaxScale;
  a.workspace = TensorRef(s->workspace.data(), DType::f32, {std::int64_t(ws / sizeof(float))});
  return s;
}

void BM_Decode(benchmark::State& state, const DecodeBenchShape& shape) {
  const std::string key = describe(shape);
  if (!g_decode || g_decode->key != key) {
    g_decode.reset();
    read_ceiling_gbps(shape.threads);  // measured now if the ceiling benchmarks were filtered out
    fma_ceiling_gflops(shape.threads);
    g_ceiling_buffers.reset();  // 2 GiB no longer needed
    g_decode = make_decode_setup(shape);
    const std::string err = verify(*g_decode);
    if (!err.empty()) {
      g_decode.reset();
      state.SkipWithError(("decode output failed verification: " + err).c_str());
      return;
    }
  }
  DecodeSetup& s = *g_decode;
  const double ceiling = read_ceiling_gbps(shape.threads);
  const double fma_peak = fma_ceiling_gflops(shape.threads);
  const std::int64_t B = s.batch.num_requests(), cols = s.batch.max_blocks;
  std::vector<TensorRef> tables;
  for (auto& t : s.block_tables) tables.push_back(t.tensor(DType::i32, {B, cols}));
  const double core_peak = fma_core_peak_gflops();
  std::size_t next = 0;
  std::int64_t calls = 0;
  const double c0 = process_cpu_seconds();
  for (auto _ : state) {
    s.args.block_table = tables[next];
    next = next + 1 == tables.size() ? 0 : next + 1;
    s.backend->decode(s.args, nullptr);
    benchmark::ClobberMemory();
    ++calls;
  }
  const double cpu_s = process_cpu_seconds() - c0;
  using benchmark::Counter;
  // Per CPU-second of all threads: robust to time-sharing with other processes.
  const double gflop_per_cpu_s = double(calls) * s.flops * 1e-9 / cpu_s;
  state.counters["GFLOP/cpu-s"] = gflop_per_cpu_s;
  state.counters["frac_of_core_peak"] = gflop_per_cpu_s / core_peak;
  state.counters["core_peak_GFLOP/cpu-s"] = core_peak;
  state.counters["KV_GB/s"] = Counter(s.kv_bytes * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = Counter(s.flops * 1e-9, Counter::kIsIterationInvariantRate);
  state.counters["frac_of_read_ceiling"] =
      Counter(s.kv_bytes * 1e-9 / ceiling, Counter::kIsIterationInvariantRate);
  state.counters["frac_of_fma_peak"] =
      Counter(s.flops * 1e-9 / fma_peak, Counter::kIsIterationInvariantRate);
  state.counters["read_ceiling_GB/s"] = ceiling;
  state.counters["fma_peak_GFLOP/s"] = fma_peak;
  state.counters["KV_MB_per_call"] = s.kv_bytes * 1e-6;
  state.counters["KV_sets"] = s.sets;
  state.counters["rows"] = double(s.rows);
  state.counters["work_items"] = double(s.work_items);
  state.counters["verified_pairs"] = s.checked_pairs;
  state.counters["verified_max_abs_err"] = s.max_out_error;
  state.SetLabel(key);
}

}  // namespace

// Wall-clock time (the kernel runs on a thread pool), median by default in the aggregates, plus the
// best and worst repetition.
void common(benchmark::internal::Benchmark* b, double min_time) {
  b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(min_time);
  b->ComputeStatistics(
      "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  b->ComputeStatistics(
      "max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("dcpmla_kv_min_bytes_MiB", std::to_string(kMinKvBytes / kMiB));
  benchmark::AddCustomContext("dcpmla_ceiling_buffer_MiB", std::to_string(kCeilingBytes / kMiB));

  // Ceilings first: the decode benchmarks divide by the ceilings of their thread count.
  for (int threads : {1, 2}) {
    common(benchmark::RegisterBenchmark(fmt::format("BM_ReadBandwidth/threads:{}", threads).c_str(),
                                        BM_ReadBandwidth)
               ->Arg(threads),
           0.5);
  }
  for (int threads : {1, 2}) {
    common(benchmark::RegisterBenchmark(fmt::format("BM_CopyBandwidth/threads:{}", threads).c_str(),
                                        BM_CopyBandwidth)
               ->Arg(threads),
           0.5);
  }
  // The CPU kernel is compute-bound at every shape here (its FLOP/B, 1.89 * H * Q, exceeds this
  // machine's FLOP-per-byte ridge), so it is also reported against the FMA peak.
  for (int threads : {1, 2}) {
    common(benchmark::RegisterBenchmark(
               fmt::format("BM_FmaPeak/256bit/threads:{}", threads).c_str(), BM_FmaPeak<256>)
               ->Arg(threads),
           0.3);
    if (kWidestFma == 512) {
      common(
          benchmark::RegisterBenchmark(fmt::format("BM_FmaPeak/512bit/threads:{}", threads).c_str(),
                                       BM_FmaPeak<kWidestFma>)
              ->Arg(threads),
          0.3);
    }
  }

  // Sizes keep one call near 50-200 ms on 2 cores (the kernel runs ~10-25 GFLOP/s per core);
  // every benchmark rotates over >= 256 MiB of KV so pages come from DRAM, not the 105 MiB L3.
  const std::vector<DecodeBenchShape> shapes = {
      // memory-bound on a GPU (H x Q = 16); the main shape, also single-threaded
      {"membound", 8, 8192, 16, 1, 1},
      {"membound", 8, 8192, 16, 1, 1, 1, 0, DType::bf16, 1},
      {"membound", 8, 8192, 16, 1, 1, 1, 0, DType::fp8_e4m3},
      {"membound", 8, 8192, 16, 1, 1, 1, 0, DType::f32},
      // speculative decoding: Q drawn from 1..8
      {"ragged", 16, 1024, 16, 1, 8},
      // rank 0 of a W = 2 DCP group: each request holds half its KV here (same local KV as
      // membound), and the ragged mix with per-row rank-local causal bounds
      {"dcp_w2_r0", 16, 8192, 16, 1, 1, 2, 0},
      {"dcp_w2_r0_ragged", 16, 2048, 16, 1, 8, 2, 0},
      // compute-heavier: H = 128
      {"heads128", 4, 2048, 128, 1, 1},
  };
  for (const auto& shape : shapes) {
    common(benchmark::RegisterBenchmark(
               fmt::format("BM_Decode/{}/B:{}/T:{}/H:{}/Q:{}-{}/W:{}/{}/threads:{}", shape.name,
                           shape.requests, shape.context, shape.heads, shape.min_q, shape.max_q,
                           shape.world, to_string(shape.kv_dtype), shape.threads)
                   .c_str(),
               [shape](benchmark::State& st) { BM_Decode(st, shape); }),
           1.0);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
