// How the output warpgroups of the tensor-core decode kernels load a KV tile: 64 tokens x 576
// dims into nine 128-byte-swizzled chunks of a stage in shared memory, completing on an mbarrier
// of the stage (count 1 a phase, plus the bytes of bulk copies). Each output warpgroup loads the
// chunks it alone multiplies into V (warpgroup 0: chunks 0-3 and the rope chunk 8, warpgroup 1:
// chunks 4-7), so it can refill a stage as soon as its own P.V of the stage's tile is done.
//
// A bf16 tile inside the visible range whose pages line up with 64-row boxes (block size 16, 32
// or a multiple of 64) comes by bulk tensor copies (TMA): one thread (four for pages of 16 or 32)
// issues a 64-dim box per chunk and page with the byte count on the mbarrier, and nobody waits for
// them but the consumers. Other tiles (the last one of an item, which needs zeros past the visible
// end; fp8, widened to bf16; other block sizes) are copied by the warpgroup's threads, which wait
// for their own copies and then arrive once. The bulk copies move a tile several times faster
// than the threads' copies (docs/design/decode-kernel.md).
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/tile_common.cuh"
#include "cuda/hopper/mbarrier.cuh"
#include "cuda/hopper/tma.cuh"

namespace dcpmla::cuda::sm90 {

// Sources of the 16-byte units of tokens not read from the cache: zeros past the tile's visible
// end, NaN for block ids outside the cache (as if the page were poisoned).
static __device__ const uint4 kFillUnits[2] = {
    {0u, 0u, 0u, 0u}, {0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u, 0x7fc07fc0u}};
// The same for fp8 bytes (e4m3 zeros, e4m3 NaN).
static __device__ const uint4 kFp8FillUnits[2] = {
    {0u, 0u, 0u, 0u}, {kFp8NanWord, kFp8NanWord, kFp8NanWord, kFp8NanWord}};
// Rows of a bulk copy box at most (the tensor map's box is 64 dims x min(block size, 64) rows).
constexpr int kBoxRows = kBulkBoxRows;

// One output warpgroup's share of a KV tile (og 0: chunks 0-3 and 8, og 1: chunks 4-7): by its
// threads, 2 per token, each copying 4 of the 8 16-byte units of every chunk; or by bulk copies.
template <Cache C>
struct OutputLoader {
  int token;           // 0 .. 63
  std::uint32_t off0;  // row offset of the thread's first unit in a chunk (swizzled), + 16 each
  int half;            // which 4 units
  int og;
  int loaded_barrier;  // named barrier of the warpgroup's 128 threads (the threads' copies)

  __device__ __forceinline__ OutputLoader(int wt, int og_, int loaded_barrier_)
      : og(og_), loaded_barrier(loaded_barrier_) {
    token = wt >> 1;
    half = wt & 1;
    off0 = std::uint32_t(token) * 128u;
  }
  __device__ __forceinline__ static int chunk(int og, int k) {
    return og == 0 ? (k < 4 ? k : 8) : 4 + k;
  }
  __device__ __forceinline__ int num_chunks() const { return og == 0 ? 5 : 4; }
  // fn(c) for each chunk c the warpgroup loads, in order (unrolled: c stays a known offset).
  template <class Fn>
  __device__ __forceinline__ void for_each_chunk(Fn fn) const {
    const int chunks = num_chunks();
#pragma unroll
    for (int k = 0; k < 5; ++k) {
      if (k < chunks) fn(chunk(og, k));
    }
  }
  // Cache row of the thread's token in the tile at local token t0 (read early: it is a global
  // load the copies depend on).
  __device__ __forceinline__ std::int64_t entry(const DecodeParams& p, const DecodeTile& tile,
                                                int t0) const {
    return cache_entry(p, tile.request, t0 + token, tile.kv_visible_end);
  }
  // Issues the copies of the thread's token (cache row e) into stage `s`: asynchronous copies for
  // bf16; for fp8, asynchronous copies of the bytes, then widened to bf16 (exact) in place.
  // Then arrives on the stage's mbarrier `bar` for this warpgroup, once the copies have landed.
  __device__ __forceinline__ void issue(const DecodeParams& p, std::int64_t e, std::uint32_t s,
                                        std::uint32_t bar) const {
    if constexpr (C == Cache::bf16) {
      const std::uint32_t swz = std::uint32_t(token & 7);
      const auto* src =
          static_cast<const unsigned char*>(p.cache) + (e >= 0 ? e : 0) * (kHeadDim * 2);
      // Rows not read from the cache are copied from a zero or NaN unit: every write of the tile
      // is then a cp.async, which the mbarrier tracks.
      const auto* fill =
          reinterpret_cast<const unsigned char*>(&kFillUnits[e == kEntryNone ? 0 : 1]);
      for_each_chunk([&](int c) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          // The token's two threads take alternate units: whole 32-byte sectors per warp copy.
          const std::uint32_t unit = std::uint32_t(2 * u + half);
          const std::uint32_t dst = s + c * kChunkBytes + off0 + ((unit ^ swz) << 4);
          hopper::cp_async16_line(dst, e >= 0 ? src + c * 128 + unit * 16 : fill);
        }
      });
      hopper::cp_async_wait_all();
      publish(bar);
    } else {
      stage_fp8(p, e, s);
      widen_fp8(s, bar);
    }
  }

  // fp8, first half: the warpgroup's e4m3 bytes (4 KiB a chunk) are copied asynchronously into
  // the upper half of each chunk's bf16 area, all at once (one memory latency a tile). Chunk c's
  // dims [32 half, 32 half + 32) are fp8 bytes c * 64 + 32 half + [0, 32) of the token's row,
  // staged at token * 64 + 32 half.
  __device__ __forceinline__ void stage_fp8(const DecodeParams& p, std::int64_t e,
                                            std::uint32_t s) const {
    const auto* src = static_cast<const unsigned char*>(p.cache) + (e >= 0 ? e : 0) * kHeadDim;
    const auto* fill =
        reinterpret_cast<const unsigned char*>(&kFp8FillUnits[e == kEntryNone ? 0 : 1]);
    const std::uint32_t staged = std::uint32_t(token) * 64u + 32u * std::uint32_t(half);
    for_each_chunk([&](int c) {
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        hopper::cp_async16_line(s + c * kChunkBytes + kStagedFp8 + staged + 16 * v,
                                e >= 0 ? src + c * 64 + 32 * half + 16 * v : fill);
      }
    });
  }
  // fp8, second half: once the staged bytes have landed, widens them in place and publishes the
  // warpgroup's chunks on `bar`.
  __device__ __forceinline__ void widen_fp8(std::uint32_t s, std::uint32_t bar) const {
    const std::uint32_t swz = std::uint32_t(token & 7);
    const int chunks = num_chunks();
    const std::uint32_t staged = std::uint32_t(token) * 64u + 32u * std::uint32_t(half);
    hopper::cp_async_wait_all();
    named_barrier_sync(loaded_barrier, 128);
    // Widening writes rows 32-63 over the staged bytes of other threads' tokens: each pair of
    // chunks is read by all threads before any writes it.
#pragma unroll
    for (int k0 = 0; k0 < 5; k0 += 2) {
      uint4 raw[2][2];
#pragma unroll
      for (int k = k0; k < k0 + 2; ++k) {
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          if (k < chunks) {
            raw[k - k0][v] =
                ld_shared16(s + chunk(og, k) * kChunkBytes + kStagedFp8 + staged + 16 * v);
          }
        }
      }
      named_barrier_sync(loaded_barrier, 128);
#pragma unroll
      for (int k = k0; k < k0 + 2; ++k) {
        if (k >= chunks) continue;
        const std::uint32_t row = s + chunk(og, k) * kChunkBytes + off0;
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const uint4 r = raw[k - k0][v];
          const std::uint32_t unit = std::uint32_t(4 * half + 2 * v);
          st_shared16(row + ((unit ^ swz) << 4), widen_fp8x8(r.x, r.y));
          st_shared16(row + (((unit + 1) ^ swz) << 4), widen_fp8x8(r.z, r.w));
        }
      }
    }
    publish(bar);
  }

  // The warpgroup's copies have all landed (bf16) or are stored (fp8): one arrival publishes
  // them (the barrier's count is 1, as for the bulk copies).
  __device__ __forceinline__ void publish(std::uint32_t bar) const {
    hopper::fence_proxy_async_shared();
    named_barrier_sync(loaded_barrier, 128);
    if ((threadIdx.x & 127) == 0) hopper::mbarrier_arrive(bar);
  }

  // Whether tile `index` of the item comes by bulk copies: a bf16 tile inside the visible range
  // (Bulk: the host encoded p.kv_map, for block sizes whose pages hold whole boxes) of an item
  // that starts on a page boundary (as the planner's splits do), so no box straddles a page.
  template <bool Bulk>
  __device__ __forceinline__ static bool bulk(const DecodeParams& p, const DecodeTile& tile,
                                              int index) {
    return Bulk && tile.kv_begin % p.block_size == 0 &&
           tile.kv_begin + (index + 1) * kKeys <= tile.kv_visible_end;
  }
  // The cache rows of the boxes of the tile at local token t0 (box b: keys [R b, R b + R), R =
  // min(block size, 64)); the tensor's row count (past its end: NaN, no read) for a block id
  // outside the cache. Read by the issuing thread ahead of the copies (a global load).
  struct BoxRows {
    int row[kKeys / 16];
  };
  __device__ __forceinline__ static BoxRows box_rows(const DecodeParams& p, const DecodeTile& tile,
                                                     int t0) {
    BoxRows b;
    const int rows_per_box = min(p.block_size, kBoxRows);
    const std::int64_t end_row = p.num_blocks * p.block_size;
#pragma unroll
    for (int k = 0; k < kKeys / 16; ++k) {
      const int t = t0 + k * rows_per_box;
      if (k * rows_per_box >= kKeys) break;
      const std::int64_t id =
          p.block_table[std::int64_t(tile.request) * p.max_blocks + t / p.block_size];
      b.row[k] =
          int((id >= 0 && id < p.num_blocks) ? id * p.block_size + t % p.block_size : end_row);
    }
    return b;
  }
  // The bulk tensor copies of the warpgroup's chunks of a tile (boxes at `rows`), issued by one
  // thread (or four, below): a box of 64 dims x R rows per page and chunk. Fewer, larger boxes load
  // faster.
  //
  // Pages smaller than a box (block size 16 or 32: 2 or 4 boxes a chunk) spread the boxes over the
  // warpgroup's 4 warps (lane 0 of each issues every 4th box): issuing a box takes its thread tens
  // of cycles, so one thread issuing 16-20 boxes would delay the warpgroup's next P.V; block size
  // 64 (one box a chunk) keeps one issuing thread (docs/design/decode-kernel.md). The first issuer
  // arrives with the
  // whole byte count, so the phase cannot complete before every box is counted (boxes that land
  // earlier take the count below zero meanwhile, which the mbarrier allows).
  __device__ __forceinline__ static bool spread_boxes(const DecodeParams& p) {
    return p.block_size < kBoxRows;
  }
  __device__ __forceinline__ static bool issuer(const DecodeParams& p) {
    return spread_boxes(p) ? (threadIdx.x & 31) == 0 : (threadIdx.x & 127) == 0;
  }
  __device__ __forceinline__ void issue_bulk(const DecodeParams& p, const BoxRows& rows,
                                             std::uint32_t s, std::uint32_t bar) const {
    const int chunks = num_chunks();
    const bool spread = spread_boxes(p);
    const int warp = spread ? (threadIdx.x & 127) >> 5 : 0;
    const int stride = spread ? 4 : 1;
    if (warp == 0) hopper::mbarrier_arrive_expect_tx(bar, std::uint32_t(chunks) * kChunkBytes);
    const int rows_per_box = min(p.block_size, kBoxRows);
#pragma unroll
    for (int b = 0; b < kKeys / 16; ++b) {  // box b (a constant index: rows stay in registers)
      if (b * rows_per_box >= kKeys) break;
      for (int k = 0; k < chunks; ++k) {
        if ((b * chunks + k) % stride != warp) continue;
        const int c = chunk(og, k);
        hopper::bulk_tensor_load_2d(s + c * kChunkBytes + std::uint32_t(b * rows_per_box) * 128u,
                                    &p.kv_map, c * 64, rows.row[b], bar);
      }
    }
  }
  // Tile `index` of the item (local token t0 = kv_begin + 64 index) into the stage at s, whole
  // (all 128 threads of the warpgroup call; e: the cache row of the thread's token, for the
  // threads' copies).
  template <bool Bulk>
  __device__ __forceinline__ void load(const DecodeParams& p, const DecodeTile& tile, int index,
                                       std::int64_t e, std::uint32_t s, std::uint32_t bar) const {
    if (!bulk<Bulk>(p, tile, index)) {
      issue(p, e, s, bar);
    } else if (issuer(p)) {
      const BoxRows rows = box_rows(p, tile, tile.kv_begin + index * kKeys);
      issue_bulk(p, rows, s, bar);
    }
  }
};

}  // namespace dcpmla::cuda::sm90
