// The decode kernel, v6: "seesaw" tensor-core decode for a bf16 query and a bf16 cache.
//
// One thread block of two warpgroups per DecodeTile (64 (row, head) pairs of one work item). Each
// warpgroup holds half of O (64 x 256 fp32: warpgroup 0 dims [0, 256), warpgroup 1 [256, 512)),
// and they walk the item's KV two 64-token tiles per round, tile A = 2 j in buffer 0 and B =
// 2 j + 1 in buffer 1. In round j (m: the running row max, shared; s_A, s_B rescale factors):
//
//   warpgroup 0                                  warpgroup 1
//   S_A = Q K_A^T                                S_B = Q K_B^T                  (in parallel)
//   m_A = max(m, rowmax S_A), s_A = 2^(m - m_A)
//   P_A = 2^(S_A - m_A)            --P_A, m_A, s_A->  O_R = O_R s_A + P_A V_A,R (P_A from shared)
//   O_L = O_L s_A + P_A V_A,L (P_A in registers)      m_B = max(m_A, rowmax S_B), s_B = 2^(m_A -
//   m_B)
//                                                     P_B = 2^(S_B - m_B)
//                                  <-P_B, m_B, s_B--  O_R = O_R s_B + P_B V_B,R (P_B in registers)
//   O_L = O_L s_B + P_B V_B,L (P_B from shared)
//
// so the softmax of one warpgroup runs beside the MMAs of the other (the "seesaw" idea that
// FlashMLA's deep-dive describes; this order and code are our own). Each warpgroup's exp-sum l
// covers its own P's; both end a round relative to m_B, and the two sums are added at the end.
//
// Shared memory (128-byte swizzled): Q 72 KiB and two KV tiles of 72 KiB (9 chunks of 64 dims).
// A tile's chunk 8 (rope dims, read only by S) holds the tile's P once its S is done, so P needs
// no buffer of its own. Each chunk is reloaded with the next round's tile by the warpgroup that
// read it last, as soon as that read is done (kv_tile_loader.cuh, an mbarrier per (buffer,
// loading warpgroup)):
//   buffer 0: chunks 0-3 by warpgroup 0 (after P_A V_A,L), chunks 4-8 by warpgroup 1 (after
//             P_A V_A,R)
//   buffer 1: chunks 0-3 and 8 by warpgroup 0 (after P_B V_B,L), chunks 4-7 by warpgroup 1
//             (after P_B V_B,R)
// and S of a tile starts on the chunks of the first mbarrier while the others are still landing
// (v4, session 3, waited for both and ran 1-8 % slower than v3).
#pragma once

#include <cstdint>

#include "decode_tc_common.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/tma.cuh"
#include "kv_tile_loader.cuh"

namespace dcpmla::cuda {
namespace seesaw {

using namespace tc;

constexpr int kThreads = 256;
// Named barriers (one warpgroup arrives, the other waits), once per round each.
constexpr int kPAReady = 1;   // warpgroup 0 -> 1: P_A in buffer 0's chunk 8, m_A and s_A
constexpr int kPBReady = 2;   // warpgroup 1 -> 0: P_B in buffer 1's chunk 8, m_B and s_B
constexpr int kLoaded = 3;    // kLoaded + wg: the warpgroup's threads' copies have landed
constexpr int kSADone = 5;    // warpgroup 0 -> 1: S_A is done (order 1: S_B is issued after it)
constexpr int kPA2Ready = 6;  // warpgroup 0 -> 1 (order 2): P_A rescaled to m_B in chunk 8

// Per-row values the warpgroups hand over, each array twice (by round parity): a slot is written
// again two rounds later, after its reader has passed a barrier wait of the round between.
enum Exchange { kMA, kSA, kMB, kSB, kSumL = 8, kSumR, kExchangeArrays };

constexpr std::uint32_t kOffQ = 0;
constexpr std::uint32_t kOffKv = kOffQ + kTileBytes;
constexpr std::uint32_t kOffBars = kOffKv + 2 * kTileBytes;  // uint64 [buffer][warpgroup]
constexpr std::uint32_t kOffExchange = kOffBars + 4 * 8u;    // float [kExchangeArrays][64]
constexpr std::uint32_t kUsedBytes = kOffExchange + kExchangeArrays * kPairs * 4u;
constexpr std::uint32_t kSmemBytes = kUsedBytes + 1024;  // aligned up to 1024 inside
static_assert(kSmemBytes <= 227u * 1024u, "sm_90 allows 227 KiB of shared memory per block");

// Masks keys at or past each row's limit (only in tiles that reach past one), then the row maxima
// of the raw scores (4 lanes of a quad hold a row).
__device__ __forceinline__ void mask_and_max(float (&s)[32], int t0, const int (&lim)[2], int quad,
                                             float (&mx)[2]) {
  if (t0 + kKeys > min(lim[0], lim[1])) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = t0 + 8 * j + 2 * quad + e;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (key >= lim[r]) s[4 * j + 2 * r + e] = -INFINITY;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float v = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) v = fmaxf(v, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    mx[r] = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  }
}

// P = 2^(S scale_log2 - m) in place (fp32) and its row sums, and as bf16 pairs in the register
// layout of a wgmma A operand: a[2 j + r] holds row r's keys 8 j + 2 quad + {0, 1}.
__device__ __forceinline__ void exponentiate(float (&s)[32], float scale_log2, const float (&m)[2],
                                             std::uint32_t (&a)[16], float (&sum)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_use = m[r] == -INFINITY ? 0.0f : m[r];  // masked scores stay -inf: 2^-inf = 0
    sum[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float p0 = fast_exp2(fmaf(s[4 * j + 2 * r], scale_log2, -m_use));
      const float p1 = fast_exp2(fmaf(s[4 * j + 2 * r + 1], scale_log2, -m_use));
      s[4 * j + 2 * r] = p0;
      s[4 * j + 2 * r + 1] = p1;
      sum[r] += p0 + p1;
      a[2 * j + r] = pack_bf16x2(p0, p1);
    }
  }
}

// P (as packed by exponentiate) into a swizzled 64 x 64 bf16 chunk: the A operand of the other
// warpgroup's P.V.
__device__ __forceinline__ void store_p(std::uint32_t chunk, const int (&rows)[2], int quad,
                                        const std::uint32_t (&a)[16]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      st_shared4(chunk + hopper::swizzled_offset(rows[r], j) + 4 * quad, a[2 * j + r]);
    }
  }
}

// P (fp32, as exponentiate leaves it) times the row factors f, into a swizzled 64 x 64 bf16
// chunk.
__device__ __forceinline__ void store_p_scaled(std::uint32_t chunk, const int (&rows)[2], int quad,
                                               const float (&pf)[32], const float (&f)[2]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      st_shared4(chunk + hopper::swizzled_offset(rows[r], j) + 4 * quad,
                 pack_bf16x2(pf[4 * j + 2 * r] * f[r], pf[4 * j + 2 * r + 1] * f[r]));
    }
  }
}

__device__ __forceinline__ void rescale(float (&o)[128], float f0, float f1) {
  if (__any_sync(0xffffffffu, f0 != 1.0f || f1 != 1.0f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j + 0] *= f0;
      o[4 * j + 1] *= f0;
      o[4 * j + 2] *= f1;
      o[4 * j + 3] *= f1;
    }
  }
  hopper::pin_registers(o);
}

// O += P V over one tile's 64 keys, V = the 4 chunks at v (read as a transposed operand); P from
// registers (a) or from a swizzled chunk (p). Committed, not waited for.
__device__ __forceinline__ void pv_from_registers(float (&o)[128], const std::uint32_t (&a)[16],
                                                  std::uint32_t v) {
  const std::uint64_t desc_v = hopper::smem_descriptor(v, kChunkBytes, 1024);
  hopper::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kKeys / 16; ++ks) {
    const std::uint32_t ak[4] = {a[4 * ks], a[4 * ks + 1], a[4 * ks + 2], a[4 * ks + 3]};
    hopper::wgmma_m64n256k16_rs_tb(o, ak, desc_v + ks * (16 * 128 >> 4), true);
  }
  hopper::wgmma_commit();
}
__device__ __forceinline__ void pv_from_shared(float (&o)[128], std::uint32_t p, std::uint32_t v) {
  const std::uint64_t desc_p = hopper::smem_descriptor(p, 16, 1024);
  const std::uint64_t desc_v = hopper::smem_descriptor(v, kChunkBytes, 1024);
  hopper::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kKeys / 16; ++ks) {
    hopper::wgmma_m64n256k16_ss_tb(o, desc_p + ks * 2, desc_v + ks * (16 * 128 >> 4), true);
  }
  hopper::wgmma_commit();
}

// Keeps the compiler from reusing the registers of an RS wgmma's A operand before its wait.
__device__ __forceinline__ void pin_operand(std::uint32_t (&a)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// Order 0: as drawn above. Order 1: the same, with S_B issued only once S_A is done (the softmax
// of S_A beside S_B instead of after both). Order 2 (the order of FlashMLA's deep-dive): warpgroup
// 1 multiplies its own P_B into V_B,R first and P_A into V_A,R last, with P_A rescaled to m_B by
// warpgroup 0; so each buffer has half of its chunks free in the middle of the round (buffer 0's
// 0-3 after P_A V_A,L, buffer 1's 4-7 after P_B V_B,R), and each S starts on those.
// Diag (timing diagnostics, wrong results; 0 in every real build): bit 0 no refills (tiles 0
// and 1 are reused), bit 1 no P.V MMAs, bit 2 no S MMAs, bit 3 P.V from shared memory in both
// warpgroups.
template <bool Bulk, int Order, int Diag = 0>
__global__ void __launch_bounds__(kThreads, 1)
    decode_seesaw_kernel(const __grid_constant__ DecodeParams p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = aligned_smem(smem_raw);
  const std::uint32_t s_q = smem_addr(smem) + kOffQ;
  const std::uint32_t s_kv = smem_addr(smem) + kOffKv;
  const std::uint32_t s_bars = smem_addr(smem) + kOffBars;
  float* xch = reinterpret_cast<float*>(smem + kOffExchange);

  // Launched for the plan buffer's capacity under a CUDA graph: blocks past the plan exit.
  if (p.header != nullptr && std::int64_t(blockIdx.x) >= p.header->num_tiles) return;
  const DecodeTile tile = p.tiles[blockIdx.x];
  const int tid = threadIdx.x, wg = tid >> 7, wt = tid & 127;
  const int lane = tid & 31, warp = wt >> 5, quad = lane & 3;
  const int n = (tile.kv_visible_end - tile.kv_begin + kKeys - 1) / kKeys;
  // The thread's two accumulator rows (the same in S and in O, in both warpgroups).
  const int rows[2] = {16 * warp + (lane >> 2), 16 * warp + (lane >> 2) + 8};
  auto buffer = [&](int b) { return s_kv + std::uint32_t(b) * kTileBytes; };
  // Phase k of bar(b, g) completes when warpgroup g's chunks of tile 2 k + b have landed.
  auto bar = [&](int b, int g) { return s_bars + std::uint32_t(2 * b + g) * 8u; };
  // Array e of round j's parity (the sums: once).
  auto exchanged = [&](int e, int row, int j = 0) -> float& {
    return xch[(e < kSumL ? 2 * e + (j & 1) : e) * kPairs + row];
  };
  using Loader = OutputLoader<Cache::bf16, true>;
  // This warpgroup's chunks of each buffer: 4 wg .. 4 wg + 3, and chunk 8 where the other
  // warpgroup computes the tile's S (that tile's P is read there last by this one).
  const Loader ld[2] = {Loader(wt, wg, kLoaded + wg, wg == 1),
                        Loader(wt, wg, kLoaded + wg, wg == 0)};
  auto load_tile = [&](int index, std::int64_t e) {
    const int b = index & 1;
    ld[b].template load<Bulk>(p, tile, index, e, buffer(b), bar(b, wg));
  };
  auto entry = [&](int index) {
    return index < n ? ld[0].entry(p, tile, tile.kv_begin + index * kKeys) : kEntryNone;
  };
  // What a later load of tile `index` needs from global memory, read a round ahead: the cache
  // row of the thread's token (threads' copies) or the boxes' rows (bulk copies, the issuing
  // thread). Read at the load, the issuing thread's block-table latency stalled its warp and with
  // it the warpgroup's next wgmma.
  struct Ahead {
    std::int64_t e;
    typename Loader::BoxRows rows;
  };
  auto bulk = [&](int index) { return Loader::template bulk<Bulk>(p, tile, index); };
  auto read_ahead = [&](int index) {
    Ahead a{kEntryNone, {}};
    if (index >= n) return a;
    if (!bulk(index)) {
      a.e = entry(index);
    } else if (wt == 0) {
      a.rows = Loader::box_rows(p, tile, tile.kv_begin + index * kKeys);
    }
    return a;
  };
  auto load_ahead = [&](int index, const Ahead& a) {
    const int b = index & 1;
    if (!bulk(index)) {
      ld[b].issue(p, a.e, buffer(b), bar(b, wg));
    } else if (wt == 0) {
      ld[b].issue_bulk(p, a.rows, buffer(b), bar(b, wg));
    }
  };

  if (tid == 0) {
    for (int i = 0; i < 4; ++i) hopper::mbarrier_init(s_bars + 8u * i, 1);
  }
  __syncthreads();
  if (n > 0) {
    load_q<kThreads>(p, tile, s_q, tid);
    load_tile(0, entry(0));
    if (n > 1) load_tile(1, entry(1));
    cp_async_wait_all();
    hopper::fence_proxy_async_shared();
  }
  __syncthreads();

  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.score_scale * kLog2e;
  const int lim[2] = {pair_key_limit(p, tile, rows[0]), pair_key_limit(p, tile, rows[1])};
  const std::uint64_t desc_q = hopper::smem_descriptor(s_q, 16, 1024);
  float o[128];  // O_L or O_R: rows[r] in o[4 j + 2 r + {0, 1}], dim 256 wg + 8 j + 2 quad
#pragma unroll
  for (int k = 0; k < 128; ++k) o[k] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of score * scale_log2
  float l[2] = {0.0f, 0.0f};            // this thread's share of its warpgroup's exp-sum

  // S of the tile in buffer wg (this warpgroup's): the four chunks of the loads that come first
  // (order 2: this warpgroup's own, 4 wg .. 4 wg + 3; else 0-3) as soon as they have landed, then
  // the other four and chunk 8.
  const int first_group = Order == 2 ? wg : 0;
  auto scores = [&](float(&s)[32], std::uint32_t parity) {
    const bool wait = !(Diag & 1) || parity == 0;  // (no refills: only tiles 0 and 1 land)
    if constexpr ((Diag & 4) != 0) {
      if (wait) hopper::mbarrier_wait(bar(wg, 0), parity);
      if (wait) hopper::mbarrier_wait(bar(wg, 1), parity);
#pragma unroll
      for (int k = 0; k < 32; ++k) s[k] = float(k & 7);
      return;
    }
    const std::uint64_t desc_k = hopper::smem_descriptor(buffer(wg), 16, 1024);
    const std::uint32_t group_off[3] = {std::uint32_t(first_group) * 4 * kChunkBytes,
                                        std::uint32_t(1 - first_group) * 4 * kChunkBytes,
                                        8 * kChunkBytes};
    auto step = [&](int ks) {
      const std::uint32_t off =
          (group_off[ks >> 4] + ((ks >> 2) & 3) * kChunkBytes + (ks & 3) * 32) >> 4;
      hopper::wgmma_m64n64k16_ss(s, desc_q + off, desc_k + off, ks > 0);
    };
    if (wait) hopper::mbarrier_wait(bar(wg, first_group), parity);
    hopper::fence_proxy_async_shared();
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 16; ++ks) step(ks);
    // A commit group and a fence around the wait: a spin loop between wgmmas of one chain
    // otherwise makes ptxas serialise them (C7520).
    hopper::wgmma_commit();
    if (wait) hopper::mbarrier_wait(bar(wg, 1 - first_group), parity);
    hopper::fence_proxy_async_shared();
    hopper::wgmma_fence();
#pragma unroll
    for (int ks = 16; ks < 36; ++ks) step(ks);
    hopper::wgmma_commit();
    hopper::wgmma_wait<0>();
    hopper::pin_registers(s);
  };

  for (int j = 0; 2 * j < n; ++j) {
    const int own = 2 * j + wg;  // the tile whose S this warpgroup computes (in buffer wg)
    const bool has_b = 2 * j + 1 < n;
    const Ahead next_a = read_ahead(2 * j + 2), next_b = read_ahead(2 * j + 3);
    float s[32];
    float mx[2] = {-INFINITY, -INFINITY};
    constexpr bool kStagger = Order == 1;
    if (kStagger && wg == 1) named_barrier_sync(kSADone, kThreads);
    if (own < n) {
      scores(s, std::uint32_t(j & 1));
      if (kStagger && wg == 0) named_barrier_arrive(kSADone, kThreads);
      mask_and_max(s, tile.kv_begin + own * kKeys, lim, quad, mx);
    }
    std::uint32_t a[16];
    float sum[2] = {0.0f, 0.0f};
    if constexpr (Order == 2) {
      if (wg == 0) {
        float s_a[2], s_b[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float m_a = fmaxf(m[r], mx[r] * scale_log2);
          s_a[r] = m_a == -INFINITY ? 1.0f : fast_exp2(m[r] - m_a);
          m[r] = m_a;
          if (quad == 0) {
            exchanged(kMA, rows[r], j) = m_a;
            exchanged(kSA, rows[r], j) = s_a[r];
          }
        }
        named_barrier_arrive(kPAReady, kThreads);
        exponentiate(s, scale_log2, m, a, sum);
#pragma unroll
        for (int r = 0; r < 2; ++r) l[r] = l[r] * s_a[r] + sum[r];
        rescale(o, s_a[0], s_a[1]);
        if constexpr ((Diag & 2) == 0) pv_from_registers(o, a, buffer(0));
        named_barrier_sync(kPBReady, kThreads);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          s_b[r] = exchanged(kSB, rows[r], j);
          m[r] = exchanged(kMB, rows[r], j);
          l[r] *= s_b[r];
        }
        store_p_scaled(buffer(0) + 8 * kChunkBytes, rows, quad, s, s_b);  // S_A is done with it
        hopper::fence_proxy_async_shared();
        named_barrier_arrive(kPA2Ready, kThreads);
        hopper::wgmma_wait<0>();
        hopper::pin_registers(o);
        pin_operand(a);
        if (!(Diag & 1) && 2 * j + 2 < n) load_ahead(2 * j + 2, next_a);
        if (has_b) {
          rescale(o, s_b[0], s_b[1]);
          if constexpr ((Diag & 2) == 0) pv_from_shared(o, buffer(1) + 8 * kChunkBytes, buffer(1));
          hopper::wgmma_wait<0>();
          hopper::pin_registers(o);
          if (!(Diag & 1) && 2 * j + 3 < n) load_ahead(2 * j + 3, next_b);
        }
      } else {
        named_barrier_sync(kPAReady, kThreads);
        float f[2], s_b[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float m_a = exchanged(kMA, rows[r], j);
          const float m_b = fmaxf(m_a, mx[r] * scale_log2);
          s_b[r] = m_b == -INFINITY ? 1.0f : fast_exp2(m_a - m_b);
          f[r] = exchanged(kSA, rows[r], j) * s_b[r];
          m[r] = m_b;
        }
        if (has_b) {
          exponentiate(s, scale_log2, m, a, sum);
          store_p(buffer(1) + 8 * kChunkBytes, rows, quad, a);  // S_B is done with chunk 8
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (quad == 0) {
            exchanged(kMB, rows[r], j) = m[r];
            exchanged(kSB, rows[r], j) = s_b[r];
          }
          l[r] = l[r] * f[r] + sum[r];
        }
        hopper::fence_proxy_async_shared();
        named_barrier_arrive(kPBReady, kThreads);
        rescale(o, f[0], f[1]);
        if (has_b) {
          if constexpr ((Diag & 2) == 0) pv_from_registers(o, a, buffer(1) + 4 * kChunkBytes);
          hopper::wgmma_wait<0>();
          hopper::pin_registers(o);
          pin_operand(a);
          if (!(Diag & 1) && 2 * j + 3 < n) load_ahead(2 * j + 3, next_b);
        }
        named_barrier_sync(kPA2Ready, kThreads);
        if constexpr ((Diag & 2) == 0) {
          pv_from_shared(o, buffer(0) + 8 * kChunkBytes, buffer(0) + 4 * kChunkBytes);
        }
        hopper::wgmma_wait<0>();
        hopper::pin_registers(o);
        if (!(Diag & 1) && 2 * j + 2 < n) load_ahead(2 * j + 2, next_a);
      }
    } else if (wg == 0) {
      float s_a[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_a = fmaxf(m[r], mx[r] * scale_log2);
        s_a[r] = m_a == -INFINITY ? 1.0f : fast_exp2(m[r] - m_a);
        m[r] = m_a;
        if (quad == 0) {
          exchanged(kMA, rows[r], j) = m_a;
          exchanged(kSA, rows[r], j) = s_a[r];
        }
      }
      exponentiate(s, scale_log2, m, a, sum);
      store_p(buffer(0) + 8 * kChunkBytes, rows, quad, a);  // S_A is done with chunk 8
      hopper::fence_proxy_async_shared();
      named_barrier_arrive(kPAReady, kThreads);
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] = l[r] * s_a[r] + sum[r];
      rescale(o, s_a[0], s_a[1]);
      if constexpr ((Diag & 8) != 0) {
        pv_from_shared(o, buffer(0) + 8 * kChunkBytes, buffer(0));
      } else if constexpr ((Diag & 2) == 0) {
        pv_from_registers(o, a, buffer(0));
      }
      hopper::wgmma_wait<0>();
      hopper::pin_registers(o);
      pin_operand(a);
      if (!(Diag & 1) && 2 * j + 2 < n) load_ahead(2 * j + 2, next_a);

      named_barrier_sync(kPBReady, kThreads);
      float s_b[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        s_b[r] = exchanged(kSB, rows[r], j);
        m[r] = exchanged(kMB, rows[r], j);
        l[r] *= s_b[r];
      }
      if (has_b) {
        rescale(o, s_b[0], s_b[1]);
        hopper::fence_proxy_async_shared();
        if constexpr ((Diag & 2) == 0) pv_from_shared(o, buffer(1) + 8 * kChunkBytes, buffer(1));
        hopper::wgmma_wait<0>();
        hopper::pin_registers(o);
        if (!(Diag & 1) && 2 * j + 3 < n) load_ahead(2 * j + 3, next_b);
      }
    } else {
      named_barrier_sync(kPAReady, kThreads);
      float s_a[2], s_b[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_a = exchanged(kMA, rows[r], j);
        s_a[r] = exchanged(kSA, rows[r], j);
        const float m_b = fmaxf(m_a, mx[r] * scale_log2);
        s_b[r] = m_b == -INFINITY ? 1.0f : fast_exp2(m_a - m_b);
        m[r] = m_b;
      }
      rescale(o, s_a[0], s_a[1]);
      hopper::fence_proxy_async_shared();
      if constexpr ((Diag & 2) == 0) {
        pv_from_shared(o, buffer(0) + 8 * kChunkBytes, buffer(0) + 4 * kChunkBytes);
      }
      // The softmax of S_B while P_A V_A,R runs.
      if (has_b) {
        exponentiate(s, scale_log2, m, a, sum);
        store_p(buffer(1) + 8 * kChunkBytes, rows, quad, a);  // S_B is done with chunk 8
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (quad == 0) {
          exchanged(kMB, rows[r], j) = m[r];
          exchanged(kSB, rows[r], j) = s_b[r];
        }
        l[r] = l[r] * s_a[r] * s_b[r] + sum[r];
      }
      hopper::fence_proxy_async_shared();
      named_barrier_arrive(kPBReady, kThreads);
      hopper::wgmma_wait<0>();
      hopper::pin_registers(o);
      if (!(Diag & 1) && 2 * j + 2 < n) load_ahead(2 * j + 2, next_a);
      if (has_b) {
        rescale(o, s_b[0], s_b[1]);
        if constexpr ((Diag & 8) != 0) {
          pv_from_shared(o, buffer(1) + 8 * kChunkBytes, buffer(1) + 4 * kChunkBytes);
        } else if constexpr ((Diag & 2) == 0) {
          pv_from_registers(o, a, buffer(1) + 4 * kChunkBytes);
        }
        hopper::wgmma_wait<0>();
        hopper::pin_registers(o);
        pin_operand(a);
        if (!(Diag & 1) && 2 * j + 3 < n) load_ahead(2 * j + 3, next_b);
      }
    }
  }

  // Both warpgroups end relative to the same max; l is the sum of the two warpgroups' shares.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (quad == 0) exchanged(wg == 0 ? kSumL : kSumR, rows[r]) = l[r];
  }
  __syncthreads();

  const bool partial = tile.partial_row >= 0;
  const std::int64_t first = first_output_row(p, tile);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= tile.num_pairs) continue;
    const float total = exchanged(kSumL, rows[r]) + exchanged(kSumR, rows[r]);
    if (wg == 0 && quad == 0) {
      constexpr float kLn2 = 0.6931471805599453f;
      const float lse = total > 0.0f ? (m[r] + log2f(total)) * kLn2 : -INFINITY;
      (partial ? p.partial_lse : p.lse)[first + rows[r]] = lse;
    }
    const float scale = total > 0.0f ? p.out_scale / total : 0.0f;
    const std::int64_t at = (first + rows[r]) * kLatentDim + 256 * wg + 2 * quad;
    store_output_row(p, partial, at, o, r, scale);
  }
}

}  // namespace seesaw
}  // namespace dcpmla::cuda
