#include <cstdint>

#include "gpu/grid_dependency.cuh"
#include "gpu/launch_config.h"
#include "peer_exchange.h"

namespace dcpmla::peer {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread before their stores

__device__ std::uint64_t load_acquire(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ void store_release(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Every flag this block's thread t is given must reach `at_least`.
__device__ void wait_at_least(const std::uint64_t* flag, std::uint64_t at_least) {
  while (load_acquire(flag) < at_least) {
  }
}

// Slice [begin, end) of a chunk: this block's part, 16-byte aligned at both ends but the last.
struct Slice {
  std::size_t begin, end;
};

__device__ Slice slice_of(std::size_t chunk, int lanes) {
  const std::size_t per = ((chunk + lanes - 1) / lanes + 15) / 16 * 16;
  const std::size_t begin = per * blockIdx.x < chunk ? per * blockIdx.x : chunk;
  const std::size_t end = begin + per < chunk ? begin + per : chunk;
  return {begin, end};
}

// dst[i] = src[i] for i in the slice. `cached`: src may be read through L1 (false for staging
// bytes a peer wrote during this kernel).
template <bool kCached>
__device__ void copy_slice(std::uint8_t* dst, const std::uint8_t* src, Slice sl, bool vector16) {
  if (vector16) {
    const std::size_t n = (sl.end - sl.begin) / 16;
    const int4* s = reinterpret_cast<const int4*>(src + sl.begin);
    int4* d = reinterpret_cast<int4*>(dst + sl.begin);
    std::size_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
      int4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        v[u] = kCached ? s[i + u * kThreads] : __ldcg(s + i + u * kThreads);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) d[i + u * kThreads] = v[u];
    }
    for (; i < n; i += kThreads) d[i] = kCached ? s[i] : __ldcg(s + i);
  } else {
    for (std::size_t i = sl.begin + threadIdx.x; i < sl.end; i += kThreads) {
      dst[i] = kCached ? src[i] : __ldcg(src + i);
    }
  }
}

// out[i] = sum over sources r = 0..W-1 of chunk r (own: from send), f32, for i in the slice.
__device__ void sum_slice(const ExchangeParams& p, const std::uint8_t* staged, Slice sl) {
  const std::uint8_t* own = p.send + std::size_t(p.rank) * p.chunk;
  auto source = [&](int r) {
    return r == p.rank ? own : staged + std::size_t(r) * p.chunk_capacity;
  };
  if (p.vector16) {
    for (std::size_t i = sl.begin / 16 + threadIdx.x; i < sl.end / 16; i += kThreads) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int r = 0; r < p.world; ++r) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(source(r)) + i);
        acc.x += v.x;
        acc.y += v.y;
        acc.z += v.z;
        acc.w += v.w;
      }
      reinterpret_cast<float4*>(p.recv)[i] = acc;
    }
  } else {
    for (std::size_t i = sl.begin / 4 + threadIdx.x; i < sl.end / 4; i += kThreads) {
      float acc = 0.f;
      for (int r = 0; r < p.world; ++r)
        acc += __ldcg(reinterpret_cast<const float*>(source(r)) + i);
      reinterpret_cast<float*>(p.recv)[i] = acc;
    }
  }
}

__global__ void __launch_bounds__(kThreads) exchange_kernel(const ExchangeParams p) {
  const int lane = blockIdx.x, t = threadIdx.x, W = p.world, me = p.rank, lanes = p.lanes;
  const RankArea& mine = p.areas[me];
  gpu::wait_for_previous_grid();
  const std::uint64_t call = mine.calls[lane] + 1;
  const std::size_t slot_bytes = std::size_t(W) * p.chunk_capacity;
  const std::size_t parity = std::size_t(call & 1) * slot_bytes;
  const Slice sl = slice_of(p.chunk, lanes);

  // 1. Push this block's slice of each peer's chunk into the peer's staging, next peer first.
  for (int k = 1; k < W; ++k) {
    const int q = (me + k) % W;
    const std::uint8_t* from =
        p.op == ExchangeOp::gather ? p.send : p.send + std::size_t(q) * p.chunk;
    std::uint8_t* to = p.areas[q].staging + parity + std::size_t(me) * p.chunk_capacity;
    copy_slice<true>(to, from, sl, p.vector16);
  }
  // Every thread's stores reach the peers before any flag says they have: the block's barrier
  // orders them before the flag writers' fence.
  __syncthreads();
  if (t < W && t != me) {
    __threadfence_system();
    store_release(p.areas[t].ready + me * kMaxLanes + lane, call);
  }

  // 2. The own chunk, locally, while the peers' slices travel.
  if (p.copy_own) {
    const std::uint8_t* from =
        p.op == ExchangeOp::gather ? p.send : p.send + std::size_t(me) * p.chunk;
    copy_slice<true>(p.recv + std::size_t(me) * p.chunk, from, sl, p.vector16);
  }

  // 3. Wait for each peer's slice of this call, then take it out of the staging area.
  if (t < W && t != me) wait_at_least(mine.ready + t * kMaxLanes + lane, call);
  __syncthreads();
  const std::uint8_t* staged = mine.staging + parity;
  if (p.op == ExchangeOp::scatter_sum) {
    sum_slice(p, staged, sl);
  } else {
    for (int q = 0; q < W; ++q) {
      if (q == me) continue;
      copy_slice<false>(p.recv + std::size_t(q) * p.chunk,
                        staged + std::size_t(q) * p.chunk_capacity, sl, p.vector16);
    }
  }

  // 4. Count the call. No acknowledgement is needed before a producer reuses this parity two
  //    calls later: it cannot finish the call between without this rank's flags of that call,
  //    which this rank raises only after this kernel has ended (stream order).
  __syncthreads();
  if (t == 0) mine.calls[lane] = call;
  // Lanes this call leaves unused count it too, so a later call with more lanes finds every
  // counter at this call.
  if (lane == 0) {
    for (int l = lanes + t; l < kMaxLanes; l += kThreads) mine.calls[l] = call;
  }
}

}  // namespace

AreaLayout area_layout(int world, std::size_t chunk_capacity) {
  AreaLayout l{};
  l.staging_bytes = 2 * std::size_t(world) * chunk_capacity;
  const std::size_t flags = std::size_t(world) * kMaxLanes * sizeof(std::uint64_t);
  l.ready_offset = (l.staging_bytes + 255) / 256 * 256;
  l.calls_offset = l.ready_offset + flags;
  l.total_bytes = l.calls_offset + kMaxLanes * sizeof(std::uint64_t);
  return l;
}

RankArea area_at(void* base, int world, std::size_t chunk_capacity) {
  const AreaLayout l = area_layout(world, chunk_capacity);
  auto* b = static_cast<std::uint8_t*>(base);
  return {b, reinterpret_cast<std::uint64_t*>(b + l.ready_offset),
          reinterpret_cast<std::uint64_t*>(b + l.calls_offset)};
}

void launch_exchange(const ExchangeParams& p, cudaStream_t s) {
  gpu::launch_dependent(exchange_kernel, dim3(unsigned(p.lanes)), kThreads, 0, s,
                        "peer exchange_kernel", p);
}

int lanes_for_chunk(std::size_t chunk_bytes) {
  if (chunk_bytes <= (std::size_t(256) << 10)) return 32;
  if (chunk_bytes <= (std::size_t(4) << 20)) return 64;
  return 128;
}

}  // namespace dcpmla::peer
