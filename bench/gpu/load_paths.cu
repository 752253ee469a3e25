// KV tile load benchmark: how fast can every SM move 64-token x 576-dim bf16 tiles (72 KiB,
// the decode kernel's KV tile) from global memory into 128-byte-swizzled shared memory, with the
// decode kernel's cp.async pattern (256 threads, 2 per token) and with TMA bulk tensor copies
// (one thread, 9 boxes of 64 x 64)? Each block walks a sequence of tiles through a ring of 1 or
// 2 stages (2 is the decode kernel's lookahead) and does nothing else, so the time per tile is
// the load path's own latency / throughput. Sources: pages spread over a region larger than L2
// (HBM), a small region (L2-resident), and groups of 16 blocks reading the same page at the
// same time (the compute-bound decode, where 16 row tiles of a request share its KV). Also the
// SM cycles the issuing thread spends in the instructions that issue a tile: whether a bulk
// copy's issue holds its thread (and so its warpgroup) for about the transfer, and whether
// spreading a tile's nine boxes over eight warps' lanes 0 shortens that.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_cuda.h"
#include "hopper/mbarrier.cuh"
#include "hopper/tma.cuh"
#include "hopper/wgmma.cuh"
#include "load_paths.h"

namespace dcpmla::bench {
namespace {

namespace hopper = dcpmla::cuda::hopper;

constexpr int kThreads = 256;
constexpr int kTokens = 64, kDims = 576, kChunks = kDims / 64;
constexpr std::uint32_t kChunkBytes = 64u * 128u;
constexpr std::uint32_t kTileBytes = kChunks * kChunkBytes;  // 73728
constexpr std::uint32_t kSmemBytes = 2 * kTileBytes + 64 + 1024;

enum class Path { cp_async, tma, tma_evict_first, tma_spread };
enum class Source { hbm, l2, shared16 };

struct Params {
  const unsigned char* cache;  // [pages * 64, 576] bf16
  std::int64_t pages;
  int tiles;  // per block
  Source source;
  unsigned* sink;
  unsigned long long* issue_cycles;  // [blocks]: thread 0's cycles issuing its copies, summed
};

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ std::int64_t page_of(const Params& p, int t) {
  const std::int64_t b = blockIdx.x;
  switch (p.source) {
    case Source::l2:
      return (b + t) % p.pages;
    case Source::shared16:
      return (b / 16 * 977 + t) % p.pages;  // 16 blocks on the same page at once
    default:
      return (b * 7919 + std::int64_t(t) * 131) % p.pages;
  }
}

// Tile `page` into the stage at s with the decode kernel's (v3) pattern: warpgroup g copies
// chunks 0-3 and 8 (g = 0) or 4-7 (g = 1), 2 threads per token, units 4 half + u of a chunk.
__device__ __forceinline__ void issue_cp_async(const Params& p, std::int64_t page,
                                               std::uint32_t s) {
  const int wg = threadIdx.x >> 7, wt = threadIdx.x & 127;
  const int token = wt >> 1, half = wt & 1;
  const unsigned char* row = p.cache + (page * kTokens + token) * (kDims * 2);
  const int chunks = wg == 0 ? 5 : 4;
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    if (k >= chunks) continue;
    const int c = wg == 0 ? (k < 4 ? k : 8) : 4 + k;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int unit = 4 * half + u;
      const std::uint32_t dst = s + c * kChunkBytes + token * 128u + ((unit ^ (token & 7)) << 4);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
                   "l"(row + c * 128 + unit * 16)
                   : "memory");
    }
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// tma_spread: lane 0 of warp w issues chunks w and w + 8 (warp 0 also arrives with the bytes;
// boxes landing before that arrival take the count below zero, which the mbarrier allows).
template <Path P>
__device__ __forceinline__ void issue_tma(const CUtensorMap& map, std::int64_t page,
                                          std::uint32_t s, std::uint32_t bar) {
  const int warp = threadIdx.x >> 5;
  // The stage was last read through the generic proxy; the copies write through the async one.
  hopper::fence_proxy_async_shared();
  if (P != Path::tma_spread || warp == 0) hopper::mbarrier_arrive_expect_tx(bar, kTileBytes);
  std::uint64_t policy = 0;
  if constexpr (P == Path::tma_evict_first) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  }
  const int row = int(page * kTokens);
  for (int c = 0; c < kChunks; ++c) {
    if (P == Path::tma_spread && c % 8 != warp) continue;
    const std::uint32_t dst = s + c * kChunkBytes;
    if constexpr (P == Path::tma_evict_first) {
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
          ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
          "l"(&map), "r"(c * 64), "r"(row), "r"(bar), "l"(policy)
          : "memory");
    } else {
      hopper::bulk_tensor_load_2d(dst, &map, c * 64, row, bar);
    }
  }
}

template <Path P, int Depth>
__global__ void __launch_bounds__(kThreads, 1)
    load_kernel(const Params p, const __grid_constant__ CUtensorMap map) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const std::uint32_t a = smem_addr(raw);
  const std::uint32_t base = a + ((1024u - (a & 1023u)) & 1023u);
  const std::uint32_t bars = base + 2 * kTileBytes;
  unsigned char* smem = raw + (base - a);
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      hopper::mbarrier_init(bars + 8u * i, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  unsigned long long issue_cycles = 0;
  auto issue = [&](int t) {
    const std::uint32_t s = base + std::uint32_t(t % Depth) * kTileBytes;
    const std::int64_t page = page_of(p, t);
    const long long t0 = clock64();
    if constexpr (P == Path::cp_async) {
      issue_cp_async(p, page, s);
    } else if (P == Path::tma_spread ? (threadIdx.x & 31) == 0 : threadIdx.x == 0) {
      issue_tma<P>(map, page, s, bars + 8u * std::uint32_t(t % Depth));
    }
    issue_cycles += static_cast<unsigned long long>(clock64() - t0);
  };
  unsigned sum = 0;
  for (int t = 0; t < Depth && t < p.tiles; ++t) issue(t);
  for (int t = 0; t < p.tiles; ++t) {
    if constexpr (P == Path::cp_async) {
      if (Depth == 2 && t + 1 < p.tiles) {
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
      } else {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
      }
    } else {
      hopper::mbarrier_wait(bars + 8u * std::uint32_t(t % Depth), std::uint32_t(t / Depth) & 1u);
    }
    __syncthreads();  // every thread's copies of tile t have landed
    sum += smem[std::uint32_t(t % Depth) * kTileBytes + threadIdx.x * 4];
    __syncthreads();  // the stage is read: it may be refilled
    if (t + Depth < p.tiles) issue(t + Depth);
  }
  if (sum == 0xffffffffu) *p.sink = sum;  // keeps the reads
  if (threadIdx.x == 0) p.issue_cycles[blockIdx.x] = issue_cycles;
}

template <Path P, int Depth>
LoadResult run(const Params& p, const CUtensorMap& map, int blocks, const char* path,
               const char* source) {
  auto kernel = load_kernel<P, Depth>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
             "cudaFuncSetAttribute");
  cudaEvent_t e0, e1;
  check_cuda(cudaEventCreate(&e0), "cudaEventCreate");
  check_cuda(cudaEventCreate(&e1), "cudaEventCreate");
  float best = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    check_cuda(cudaEventRecord(e0), "cudaEventRecord");
    kernel<<<blocks, kThreads, kSmemBytes>>>(p, map);
    check_cuda(cudaEventRecord(e1), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(e1), "kernel");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (rep > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  // Of the last run: thread 0's issue cycles a tile, averaged over the blocks.
  std::vector<unsigned long long> cycles(blocks);
  check_cuda(
      cudaMemcpy(cycles.data(), p.issue_cycles, blocks * sizeof(cycles[0]), cudaMemcpyDeviceToHost),
      "cudaMemcpy");
  double issue = 0;
  for (unsigned long long c : cycles) issue += double(c);
  issue /= double(blocks) * p.tiles;
  const double bytes = double(blocks) * p.tiles * kTileBytes;
  return {path, source, Depth, best, best * 1e3 / p.tiles, bytes / (best * 1e-3) / 1e12, issue};
}

}  // namespace

LoadReport measure_load_paths(int tiles) {
  const DeviceInfo dev = device_info();
  const int blocks = dev.sms;
  const BenchCache cache(kHbmPages);
  const CUtensorMap& map = cache.map();
  unsigned* sink = nullptr;
  check_cuda(cudaMalloc(&sink, sizeof(unsigned)), "cudaMalloc");
  unsigned long long* issue_cycles = nullptr;
  check_cuda(cudaMalloc(&issue_cycles, blocks * sizeof(unsigned long long)), "cudaMalloc");

  LoadReport report{dev.name, blocks, tiles, kTileBytes, {}};
  const struct {
    Source source;
    const char* name;
    std::int64_t pages;
  } sources[] = {{Source::hbm, "hbm", kHbmPages},
                 {Source::l2, "l2 (16 MB region)", 224},
                 {Source::shared16, "16 blocks per page", kHbmPages}};
  auto& r = report.results;
  for (const auto& src : sources) {
    const Params p{cache.data(), src.pages, tiles, src.source, sink, issue_cycles};
    r.push_back(run<Path::cp_async, 1>(p, map, blocks, "cp.async", src.name));
    r.push_back(run<Path::cp_async, 2>(p, map, blocks, "cp.async", src.name));
    r.push_back(run<Path::tma, 1>(p, map, blocks, "tma", src.name));
    r.push_back(run<Path::tma, 2>(p, map, blocks, "tma", src.name));
    r.push_back(run<Path::tma_evict_first, 2>(p, map, blocks, "tma evict_first", src.name));
    r.push_back(run<Path::tma_spread, 1>(p, map, blocks, "tma 8 issuers", src.name));
    r.push_back(run<Path::tma_spread, 2>(p, map, blocks, "tma 8 issuers", src.name));
  }
  cudaFree(sink);
  cudaFree(issue_cycles);
  return report;
}

}  // namespace dcpmla::bench
