// MMA stream benchmark: what the decode tile's two tensor-core streams cost on an SM, alone and
// together, and what bulk copies into the same shared memory take from them.
//
// One block per SM, laid out as the decode kernel's (three warpgroups and 227 KiB: Q 72 KiB, two
// KV stages of 72 KiB, P 8 KiB). Each warpgroup runs one role for `tiles` tiles, free-running
// (no hand-offs, so what is left is the tensor cores' and shared memory's own sharing):
//   S      36 wgmma m64n64k16 over the 576 dims of a 64-key tile: A = Q (shared memory, or one
//          register fragment reused: the "Q in registers" bound), B = K of the stage.
//   S in halves  the same as two m64n32 groups (keys 0-31, then 32-63), the first waited for
//          while the second runs (session 12's split softmax, not kept: bench/NOTES.md): Q is
//          read twice.
//   P.V    4 wgmma m64n256k16 over the tile's 64 keys: A = P (shared memory), B = 256 dims of
//          V (transposed operand of the same stage).
// The copies: 72 KiB tiles (9 bulk tensor boxes) into the two stages, 2 in flight, issued by the
// first thread of a warpgroup without a role until the others are done, or, when every
// warpgroup has one, by output warpgroup 1 after each of its P.V tiles (as the decode kernel
// refills; a 4th warpgroup for the copies would cap the kernel at 128 registers a thread, too few
// for the m64n256 accumulators). The "one copy in flight" scenarios time each tile from its issue
// to its landing beside the MMA roles: the latency a 2-stage ring waits for between a stage's
// last reader and the next tile's first MMA. The data is finite and arbitrary; the copies overwrite
// stages the MMAs read, which races by design (only the time is measured).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench_cuda.h"
#include "hopper/mbarrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"
#include "mma_paths.h"

namespace dcpmla::bench {
namespace {

namespace hopper = dcpmla::cuda::hopper;

constexpr int kThreads = 3 * 128;
constexpr int kTokens = 64, kDims = 576, kChunks = kDims / 64;
constexpr std::uint32_t kChunkBytes = 64u * 128u;
constexpr std::uint32_t kTileBytes = kChunks * kChunkBytes;  // 73728
constexpr std::uint32_t kOffQ = 0, kOffKv = kTileBytes, kOffP = 3 * kTileBytes;
constexpr std::uint32_t kOffBars = kOffP + 64u * 128u;
constexpr std::uint32_t kUsed = kOffBars + 64;
constexpr std::uint32_t kSmemBytes = kUsed + 1024;
static_assert(kSmemBytes <= 227u * 1024u, "227 KiB of shared memory per block");

constexpr double kSFlops = 2.0 * 64 * 64 * kDims;  // one tile's S
constexpr double kPvFlops = 2.0 * 64 * 256 * 64;   // one tile's P.V of one output warpgroup

constexpr int kTimingSlots = 10;
struct Params {
  MmaRole roles[3];
  CopySource copy;
  std::int64_t pages;  // the copy source's pages of 64 tokens
  int tiles;
  // [block][kTimingSlots]: per warpgroup {cycles, ns}, then the copies' {tiles, ns, SM cycles
  // spent issuing them, SM cycles from issue to landing (one in flight)}
  long long* timing;
  float* sink;
};

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <int N>
__device__ __forceinline__ void keep(const float (&d)[N], float* sink) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += d[i];
  if (s == 1234.5f) *sink = s;
}

__host__ __device__ constexpr bool from_l2(CopySource c) {
  return c == CopySource::l2 || c == CopySource::l2_landing;
}
__host__ __device__ constexpr bool one_in_flight(CopySource c) {
  return c == CopySource::l2_landing || c == CopySource::hbm_landing;
}

__device__ __forceinline__ std::int64_t copy_page(const Params& p, int t) {
  const std::int64_t b = blockIdx.x;
  if (from_l2(p.copy)) return (b + t) % p.pages;
  return (b * 7919 + std::int64_t(t) * 131) % p.pages;
}

// Tile t's copies into stage t % 2 (tile t - 2's have landed); the SM cycles spent issuing them
// are added to *issue_cycles.
__device__ __forceinline__ void issue_copy(const Params& p, const CUtensorMap& map,
                                           std::uint32_t base, int t, long long* issue_cycles) {
  const long long c0 = clock64();
  const std::uint32_t bar = base + kOffBars + 8u * std::uint32_t(t & 1);
  const std::uint32_t dst = base + kOffKv + std::uint32_t(t & 1) * kTileBytes;
  hopper::fence_proxy_async_shared();
  hopper::mbarrier_arrive_expect_tx(bar, kTileBytes);
  const int row = int(copy_page(p, t) * kTokens);
  for (int c = 0; c < kChunks; ++c) {
    hopper::bulk_tensor_load_2d(dst + c * kChunkBytes, &map, c * 64, row, bar);
  }
  *issue_cycles += clock64() - c0;
}
__device__ __forceinline__ void copy_landed(std::uint32_t base, int t) {
  hopper::mbarrier_wait(base + kOffBars + 8u * std::uint32_t(t & 1), std::uint32_t(t >> 1) & 1u);
}

// Descriptor of the K tile in stage t % 2, and the descriptor offset of k-step ks (16 of the 576
// dims: chunk ks / 4, 32 bytes each) in a Q or K tile.
__device__ __forceinline__ std::uint64_t stage_k_descriptor(std::uint32_t base, int t) {
  return hopper::smem_descriptor(base + kOffKv + std::uint32_t(t & 1) * kTileBytes, 16, 1024);
}
__device__ __forceinline__ std::uint32_t score_step_offset(int ks) {
  return std::uint32_t((ks >> 2) * kChunkBytes + (ks & 3) * 32) >> 4;
}

template <bool RS>
__device__ __forceinline__ void run_scores(const Params& p, std::uint32_t base) {
  float s[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = 0.0f;
  const std::uint32_t a_regs[4] = {0x3c003c00u + threadIdx.x, 0x3c00bc00u, 0xbc003c00u,
                                   0x3c003c00u};
  const std::uint64_t desc_q = hopper::smem_descriptor(base + kOffQ, 16, 1024);
  for (int t = 0; t < p.tiles; ++t) {
    const std::uint64_t desc_k = stage_k_descriptor(base, t);
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 36; ++ks) {
      const std::uint32_t off = score_step_offset(ks);
      if constexpr (RS) {
        hopper::wgmma_m64n64k16_rs(s, a_regs, desc_k + off, ks > 0);
      } else {
        hopper::wgmma_m64n64k16_ss(s, desc_q + off, desc_k + off, ks > 0);
      }
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::pin_registers(s);
  }
  keep(s, p.sink);
}

__device__ __forceinline__ void run_scores_in_halves(const Params& p, std::uint32_t base) {
  float a[16], b[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) a[i] = b[i] = 0.0f;
  const std::uint64_t desc_q = hopper::smem_descriptor(base + kOffQ, 16, 1024);
  for (int t = 0; t < p.tiles; ++t) {
    const std::uint64_t desc_k = stage_k_descriptor(base, t);
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 36; ++ks) {
      const std::uint32_t off = score_step_offset(ks);
      hopper::wgmma_m64n32k16_ss(a, desc_q + off, desc_k + off, ks > 0);
    }
    hopper::wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < 36; ++ks) {  // keys 32-63: rows 32-63 of each chunk, 4 atoms further
      const std::uint32_t off = score_step_offset(ks);
      hopper::wgmma_m64n32k16_ss(b, desc_q + off, desc_k + (32u * 128u >> 4) + off, ks > 0);
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();
    hopper::pin_registers(a);
    hopper::wgmma_wait<0>();
    hopper::pin_registers(b);
  }
  keep(a, p.sink);
  keep(b, p.sink);
}

// copies: this warpgroup's first thread issues a tile's copies after each P.V tile. (P from
// registers is not measured: ptxas serialises the m64n256 register-A wgmmas of this loop for want
// of registers at the 168 a thread of a 384-thread block.)
__device__ __forceinline__ void run_output(const Params& p, const CUtensorMap& map,
                                           std::uint32_t base, int og, bool copies,
                                           long long* issue_cycles) {
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  const std::uint64_t desc_p = hopper::smem_descriptor(base + kOffP, 16, 1024);
  for (int t = 0; t < p.tiles; ++t) {
    const std::uint64_t desc_v = hopper::smem_descriptor(
        base + kOffKv + std::uint32_t(t & 1) * kTileBytes + og * 4 * kChunkBytes, kChunkBytes,
        1024);
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kTokens / 16; ++ks) {
      hopper::wgmma_m64n256k16_ss_tb(o, desc_p + ks * 2, desc_v + ks * (16 * 128 >> 4), true);
    }
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::pin_registers(o);
    if (copies && (threadIdx.x & 127) == 0) {
      if (t >= 2) copy_landed(base, t - 2);
      issue_copy(p, map, base, t, issue_cycles);
    }
  }
  if (copies && (threadIdx.x & 127) == 0) {
    for (int t = p.tiles >= 2 ? p.tiles - 2 : 0; t < p.tiles; ++t) copy_landed(base, t);
  }
  keep(o, p.sink);
}

// Streams tiles into the stages, two in flight, until every active warpgroup is done (or, with
// none active, for p.tiles tiles). Returns the tiles that landed.
__device__ int run_copies(const Params& p, const CUtensorMap& map, std::uint32_t base,
                          volatile int* done, int active, long long* issue_cycles,
                          long long* landing_cycles) {
  int issued = 0;
  if (one_in_flight(p.copy)) {
    // One tile in flight: the time from its issue to its landing, beside the other roles.
    while (active > 0 ? *done != active : issued < p.tiles) {
      const long long c0 = clock64();
      issue_copy(p, map, base, issued, issue_cycles);
      copy_landed(base, issued++);
      *landing_cycles += clock64() - c0;
    }
    return issued;
  }
  for (;;) {
    if (active > 0 ? *done == active : issued == p.tiles) break;
    if (issued >= 2) copy_landed(base, issued - 2);
    issue_copy(p, map, base, issued++, issue_cycles);
  }
  for (int t = issued >= 2 ? issued - 2 : 0; t < issued; ++t) copy_landed(base, t);
  return issued;
}

// One instantiation per role combination: each warpgroup's branch holds only its own role's
// code (with every role in one kernel, ptxas serialises the wgmmas for want of registers).
template <MmaRole R0, MmaRole R1, MmaRole R2>
__global__ void __launch_bounds__(kThreads, 1)
    mma_kernel(const Params p, const __grid_constant__ CUtensorMap map) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const std::uint32_t a = smem_addr(raw);
  const std::uint32_t base = a + ((1024u - (a & 1023u)) & 1023u);
  unsigned char* smem = raw + (base - a);
  volatile int* done = reinterpret_cast<volatile int*>(smem + kOffBars + 16);
  // Finite bf16 operands in [-1, 1) everywhere the MMAs read.
  for (std::uint32_t w = threadIdx.x; w < kOffBars / 4; w += kThreads) {
    const std::uint32_t h = (w * 2654435761u) ^ (w >> 7);
    const float lo = float(h & 0xffffu) / 32768.0f - 1.0f;
    const float hi = float(h >> 16) / 32768.0f - 1.0f;
    reinterpret_cast<std::uint32_t*>(smem)[w] =
        (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
  }
  if (threadIdx.x == 0) {
    hopper::mbarrier_init(base + kOffBars, 1);
    hopper::mbarrier_init(base + kOffBars + 8, 1);
    *done = 0;
  }
  hopper::fence_proxy_async_shared();
  __syncthreads();
  const int wg = threadIdx.x >> 7;
  int active = 0;
  for (int g = 0; g < 3; ++g) active += p.roles[g] != MmaRole::none;
  long long* timing = p.timing + std::int64_t(blockIdx.x) * kTimingSlots;
  int copier = -1;  // the warpgroup that streams the copies, -1: output warpgroup 1 per tile
  for (int g = 2; g >= 0; --g) {
    if (p.roles[g] == MmaRole::none) copier = g;
  }
  const MmaRole role = wg == 0 ? R0 : wg == 1 ? R1 : R2;
  if (role == MmaRole::none) {
    if (wg == copier && threadIdx.x == 128 * wg && p.copy != CopySource::none) {
      const long long t0 = global_ns();
      long long issue_cycles = 0, landing_cycles = 0;
      const int tiles = run_copies(p, map, base, done, active, &issue_cycles, &landing_cycles);
      timing[6] = tiles;
      timing[8] = issue_cycles;
      timing[9] = landing_cycles;
      timing[7] = global_ns() - t0;
    }
    return;
  }
  const bool copies_per_tile = copier < 0 && wg == 1 && p.copy != CopySource::none;
  long long issue_cycles = 0;
  const long long c0 = clock64(), t0 = global_ns();
  auto run_role = [&](auto role_constant) {
    constexpr MmaRole kRole = decltype(role_constant)::value;
    if constexpr (kRole == MmaRole::s_ss || kRole == MmaRole::s_rs) {
      run_scores<kRole == MmaRole::s_rs>(p, base);
    } else if constexpr (kRole == MmaRole::s_halves) {
      run_scores_in_halves(p, base);
    } else if constexpr (kRole == MmaRole::pv_ss) {
      run_output(p, map, base, wg == 2, copies_per_tile, &issue_cycles);
    }
  };
  if (wg == 0) {
    run_role(std::integral_constant<MmaRole, R0>{});
  } else if (wg == 1) {
    run_role(std::integral_constant<MmaRole, R1>{});
  } else {
    run_role(std::integral_constant<MmaRole, R2>{});
  }
  const long long c1 = clock64(), t1 = global_ns();
  if ((threadIdx.x & 127) == 0) {
    timing[2 * wg] = c1 - c0;
    timing[2 * wg + 1] = t1 - t0;
    atomicAdd(const_cast<int*>(done), 1);
    if (copies_per_tile) {
      timing[6] = p.tiles;
      timing[7] = t1 - t0;
      timing[8] = issue_cycles;
    }
  }
}

double flops_of(MmaRole r) {
  switch (r) {
    case MmaRole::s_ss:
    case MmaRole::s_rs:
    case MmaRole::s_halves:
      return kSFlops;
    case MmaRole::pv_ss:
      return kPvFlops;
    default:
      return 0.0;
  }
}

using Kernel = void (*)(Params, CUtensorMap);

template <MmaRole R0, MmaRole R1, MmaRole R2>
std::pair<MmaScenario, Kernel> scenario(const char* name, CopySource copy) {
  return {MmaScenario{name, {R0, R1, R2}, copy}, mma_kernel<R0, R1, R2>};
}

MmaResult run(const MmaScenario& sc, Kernel kernel, const CUtensorMap& map, int blocks, int tiles,
              long long* timing, float* sink) {
  Params p{{sc.roles[0], sc.roles[1], sc.roles[2]},
           sc.copy,
           from_l2(sc.copy) ? 224 : kHbmPages,
           tiles,
           timing,
           sink};
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
             "cudaFuncSetAttribute");
  std::vector<long long> host(std::size_t(blocks) * kTimingSlots);
  MmaResult best{sc, {}, {}, 0.0, 0.0, 0.0, 0.0, 0.0};
  double best_longest = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    check_cuda(cudaMemset(timing, 0, host.size() * sizeof(long long)), "cudaMemset");
    kernel<<<blocks, kThreads, kSmemBytes>>>(p, map);
    check_cuda(cudaGetLastError(), "mma_kernel launch");
    check_cuda(cudaDeviceSynchronize(), "mma_kernel");
    check_cuda(
        cudaMemcpy(host.data(), timing, host.size() * sizeof(long long), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
    if (rep == 0) continue;  // warm-up
    MmaResult r{sc, {}, {}, 0.0, 0.0, 0.0, 0.0, 0.0};
    double longest = 0.0, cycles = 0.0, ns = 0.0, flops = 0.0, copy_bytes = 0.0, copy_ns = 0.0;
    double copy_tiles = 0.0, issue_cycles = 0.0, landing_cycles = 0.0;
    for (int g = 0; g < 3; ++g) {
      if (sc.roles[g] == MmaRole::none) continue;
      double worst_ns = 0.0;
      for (int b = 0; b < blocks; ++b) {
        const long long* t = host.data() + std::size_t(b) * kTimingSlots;
        worst_ns = std::max(worst_ns, double(t[2 * g + 1]));
        if (cycles == 0.0) {
          cycles = double(t[2 * g]);
          ns = double(t[2 * g + 1]);
        }
      }
      const double f = flops_of(sc.roles[g]) * tiles * blocks;
      r.us[g] = worst_ns * 1e-3;
      r.tflops[g] = f / (worst_ns * 1e-9) / 1e12;
      flops += f;
      longest = std::max(longest, worst_ns);
    }
    for (int b = 0; b < blocks; ++b) {
      const long long* t = host.data() + std::size_t(b) * kTimingSlots;
      copy_bytes += double(t[6]) * kTileBytes;
      copy_ns = std::max(copy_ns, double(t[7]));
      copy_tiles += double(t[6]);
      issue_cycles += double(t[8]);
      landing_cycles += double(t[9]);
    }
    if (longest == 0.0) longest = copy_ns;
    r.total_tflops = flops > 0.0 ? flops / (longest * 1e-9) / 1e12 : 0.0;
    r.copy_tb_per_s = copy_ns > 0.0 ? copy_bytes / (copy_ns * 1e-9) / 1e12 : 0.0;
    r.sm_mhz = ns > 0.0 ? cycles / ns * 1e3 : 0.0;
    r.copy_issue_cycles = copy_tiles > 0.0 ? issue_cycles / copy_tiles : 0.0;
    r.copy_landing_cycles = copy_tiles > 0.0 ? landing_cycles / copy_tiles : 0.0;
    if (longest < best_longest) {
      best_longest = longest;
      best = r;
    }
  }
  return best;
}

}  // namespace

MmaReport measure_mma_paths(int tiles) {
  const DeviceInfo dev = device_info();
  const int blocks = dev.sms;
  const BenchCache cache(kHbmPages);
  const CUtensorMap& map = cache.map();
  long long* timing = nullptr;
  float* sink = nullptr;
  check_cuda(cudaMalloc(&timing, std::size_t(blocks) * kTimingSlots * sizeof(long long)),
             "cudaMalloc");
  check_cuda(cudaMalloc(&sink, sizeof(float)), "cudaMalloc");

  using R = MmaRole;
  using C = CopySource;
  const std::pair<MmaScenario, Kernel> scenarios[] = {
      scenario<R::s_ss, R::none, R::none>("S alone", C::none),
      scenario<R::s_rs, R::none, R::none>("S alone, Q in registers", C::none),
      scenario<R::s_ss, R::s_ss, R::none>("two S streams", C::none),
      scenario<R::none, R::pv_ss, R::pv_ss>("P.V x2 alone", C::none),
      scenario<R::s_ss, R::pv_ss, R::pv_ss>("S + P.V x2 (v3 mix)", C::none),
      scenario<R::s_rs, R::pv_ss, R::pv_ss>("S (Q in registers) + P.V x2", C::none),
      scenario<R::s_halves, R::none, R::none>("S in halves alone", C::none),
      scenario<R::s_halves, R::pv_ss, R::pv_ss>("S in halves + P.V x2", C::none),
      scenario<R::s_ss, R::none, R::none>("S + copies (L2)", C::l2),
      scenario<R::none, R::pv_ss, R::pv_ss>("P.V x2 + copies (L2)", C::l2),
      scenario<R::s_ss, R::pv_ss, R::pv_ss>("v3 mix + copies (L2)", C::l2),
      scenario<R::s_ss, R::pv_ss, R::pv_ss>("v3 mix + copies (HBM)", C::hbm),
      scenario<R::s_rs, R::pv_ss, R::pv_ss>("S (Q in registers) + P.V x2 + copies (L2)", C::l2),
      scenario<R::none, R::none, R::none>("copies alone (L2)", C::l2),
      scenario<R::none, R::none, R::none>("copies alone (HBM)", C::hbm),
      scenario<R::none, R::none, R::none>("one copy in flight alone (L2)", C::l2_landing),
      scenario<R::none, R::none, R::none>("one copy in flight alone (HBM)", C::hbm_landing),
      scenario<R::s_ss, R::none, R::none>("S + one copy in flight (L2)", C::l2_landing),
      scenario<R::s_ss, R::s_ss, R::none>("two S + one copy in flight (L2)", C::l2_landing),
      scenario<R::none, R::pv_ss, R::pv_ss>("P.V x2 + one copy in flight (L2)", C::l2_landing),
      scenario<R::s_ss, R::pv_ss, R::none>("S + P.V + one copy in flight (L2)", C::l2_landing),
      scenario<R::s_ss, R::pv_ss, R::none>("S + P.V + one copy in flight (HBM)", C::hbm_landing),
  };
  MmaReport report{dev.name, blocks, tiles, {}};
  for (const auto& [sc, kernel] : scenarios) {
    report.results.push_back(run(sc, kernel, map, blocks, tiles, timing, sink));
  }
  cudaFree(timing);
  cudaFree(sink);
  return report;
}

}  // namespace dcpmla::bench
