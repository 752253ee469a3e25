// An output warpgroup's KV loads around its P.V of tile i (kernel.cuh and
// narrow_tile.cuh): tile i + 2's pages are read before the wait for P (global loads the
// copies depend on), an fp8 tile i + 1 staged in the previous round is widened (before the wait
// for P, or while P.V runs), and tile i + 2 is copied into the stage tile i used once P.V is done.
#pragma once

#include <cstdint>

#include "cuda/decode/sm90/smem_layout.cuh"
#include "cuda/decode/sm90/tile_loader.cuh"

namespace dcpmla::cuda::sm90 {

template <Cache C, bool Bulk, bool WidenEarly>
struct OutputRefill {
  using Loader = OutputLoader<C>;
  const DecodeParams& p;
  const DecodeTile& tile;
  const BlockSmem& sm;
  const Loader& ld;
  int n;  // tiles of the item
  bool next_bulk = false;
  std::int64_t next_entry = kEntryNone;
  typename Loader::BoxRows next_rows{};

  __device__ __forceinline__ OutputRefill(const DecodeParams& p_, const DecodeTile& tile_,
                                          const BlockSmem& sm_, const Loader& ld_, int n_)
      : p(p_), tile(tile_), sm(sm_), ld(ld_), n(n_) {}

  // Tile `index` into its stage, whole (all 128 threads call; e: the thread's cache row).
  __device__ __forceinline__ void load(int index, std::int64_t e) const {
    ld.template load<Bulk>(p, tile, index, e, sm.stage(index), sm.full_bar(index & 1, ld.og));
  }
  // The first two tiles (before the loop).
  __device__ __forceinline__ void prologue() const {
    load(0, ld.entry(p, tile, tile.kv_begin));
    if (n > 1) load(1, ld.entry(p, tile, tile.kv_begin + kKeys));
  }
  // Tile i + 2's pages, read now: by the thread that issues its bulk copies, or each thread's
  // own cache row for the threads' copies.
  __device__ __forceinline__ void read_ahead(int i) {
    next_bulk = i + 2 < n && Loader::template bulk<Bulk>(p, tile, i + 2);
    const int next_t0 = tile.kv_begin + (i + 2) * kKeys;
    next_entry = i + 2 < n && !next_bulk ? ld.entry(p, tile, next_t0) : kEntryNone;
    if (next_bulk && Loader::issuer(p)) next_rows = Loader::box_rows(p, tile, next_t0);
  }
  // fp8: tile i + 1, staged at the end of the previous round, is widened either before the wait
  // for P of tile i (WidenEarly: while the scores warpgroup computes S and the softmax of tile i,
  // so S of tile i + 1 need not wait behind P.V for it), or while this P.V runs. Early for wide
  // tiles, late for narrow ones, whose short S would leave the copies' latency exposed
  // (docs/design/decode-kernel.md).
  __device__ __forceinline__ void widen_next(int i) const {
    if (C == Cache::fp8 && i >= 1 && i + 1 < n) {
      ld.widen_fp8(sm.stage(i + 1), sm.full_bar((i + 1) & 1, ld.og));
    }
  }
  __device__ __forceinline__ void before_p(int i) const {
    if (WidenEarly) widen_next(i);
  }
  __device__ __forceinline__ void while_pv(int i) const {
    if (!WidenEarly) widen_next(i);
  }
  // Tile i + 2 into the stage tile i used (P.V of tile i is done).
  __device__ __forceinline__ void after_pv(int i) const {
    if (next_bulk) {
      if (Loader::issuer(p)) ld.issue_bulk(p, next_rows, sm.stage(i), sm.full_bar(i & 1, ld.og));
    } else if (C == Cache::fp8 && i + 2 < n) {
      ld.stage_fp8(p, next_entry, sm.stage(i));
    } else if (i + 2 < n) {
      load(i + 2, next_entry);
    }
  }
};

}  // namespace dcpmla::cuda::sm90
