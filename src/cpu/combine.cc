#include "combine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dcpmla/merge.h"
#include "elements.h"

namespace dcpmla::cpu {

void unpack_query(ThreadPool& pool, const UnpackQueryArgs& a) {
  validate(a);
  const auto W = a.gathered.shape[0], N = a.gathered.shape[1], Hl = a.gathered.shape[2];
  const std::size_t chunk = std::size_t(Hl) * kHeadDim * dtype_size(a.q.dtype);
  const auto* src = a.gathered.as<const std::uint8_t>();
  auto* dst = a.q.as<std::uint8_t>();
  // gathered[w, n] (Hl heads) -> q[n, w * Hl .. (w + 1) * Hl)
  pool.parallel_for(N, [&](std::int64_t n, int) {
    for (std::int64_t w = 0; w < W; ++w) {
      std::memcpy(dst + (std::size_t(n) * W + w) * chunk, src + (std::size_t(w) * N + n) * chunk,
                  chunk);
    }
  });
}

void combine_rescale(ThreadPool& pool, const CombineRescaleArgs& a) {
  validate(a);
  const std::int64_t W = a.world, N = a.partial_out.shape[0], H = a.partial_out.shape[1];
  const std::int64_t Hl = H / W;
  const auto* glse = a.gathered_lse.as<const float>();  // [W, N, H]
  const auto* po = a.partial_out.as<const float>();     // [N, H, 512]
  auto* send = a.send.as<float>();                      // [W, N, Hl, 512]
  auto* lse_out = a.lse_out.as<float>();                // [N, Hl]
  pool.parallel_for(N, [&](std::int64_t n, int) {
    for (std::int64_t h = 0; h < H; ++h) {
      merge::LseAccumulator acc;
      for (std::int64_t r = 0; r < W; ++r) acc.add(glse[(r * N + n) * H + h]);
      const float merged = acc.lse();
      const float w = merge::weight(glse[(a.rank * N + n) * H + h], merged);
      const std::int64_t dest = h / Hl, hl = h % Hl;
      float* dst = send + ((dest * N + n) * Hl + hl) * kLatentDim;
      const float* src = po + (n * H + h) * kLatentDim;
      // A zero weight writes zeros, never 0 * payload (the payload may be NaN).
      if (w == 0.0f) {
        std::fill_n(dst, kLatentDim, 0.0f);
      } else {
        for (int d = 0; d < kLatentDim; ++d) dst[d] = w * src[d];
      }
      if (dest == a.rank) lse_out[n * Hl + hl] = merged;
    }
  });
}

void combine_pack(ThreadPool& pool, const CombinePackArgs& a) {
  validate(a);
  const std::int64_t W = a.world, N = a.partial_out.shape[0], H = a.partial_out.shape[1];
  const std::int64_t Hl = H / W;
  const auto* po = a.partial_out.as<const float>();
  const auto* pl = a.partial_lse.as<const float>();
  const bool bf16 = a.send.dtype == DType::bf16;
  const std::int64_t row = packed_row(a.send.dtype);
  pool.parallel_for(N, [&](std::int64_t n, int) {
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t slot = (((h / Hl) * N + n) * Hl + h % Hl) * row;
      const float* src = po + (n * H + h) * kLatentDim;
      if (bf16) {
        auto* dst = a.send.as<std::uint16_t>() + slot;
        for (int d = 0; d < kLatentDim; ++d) dst[d] = float_to_bf16(src[d]);
        std::memcpy(dst + kLatentDim, &pl[n * H + h], sizeof(float));
      } else {
        float* dst = a.send.as<float>() + slot;
        std::memcpy(dst, src, kLatentDim * sizeof(float));
        dst[kLatentDim] = pl[n * H + h];
      }
    }
  });
}

void combine_merge(ThreadPool& pool, const CombineMergeArgs& a) {
  validate(a);
  const std::int64_t W = a.recv.shape[0], N = a.recv.shape[1], Hl = a.recv.shape[2];
  const bool bf16 = a.recv.dtype == DType::bf16;
  const std::int64_t row = packed_row(a.recv.dtype);
  const std::size_t elem = dtype_size(a.out.dtype), slot = dtype_size(a.recv.dtype);
  const bool own = a.own_rank >= 0;
  pool.parallel_for(N, [&](std::int64_t n, int) {
    float merged[kLatentDim];
    // With own: item i's W rows copied next to each other (partial own_rank from own).
    std::vector<std::uint8_t> rows(own ? std::size_t(W * row) * slot : 0);
    for (std::int64_t h = 0; h < Hl; ++h) {
      const std::int64_t i = n * Hl + h;
      const auto* first = a.recv.as<const std::uint8_t>() + std::size_t(i * row) * slot;
      long peer_stride = long(N * Hl * row);  // in payload elements
      if (own) {
        for (std::int64_t r = 0; r < W; ++r) {
          const auto* src = r == a.own_rank
                                ? a.own.as<const std::uint8_t>() + std::size_t(i * row) * slot
                                : first + std::size_t(r * peer_stride) * slot;
          std::memcpy(&rows[std::size_t(r * row) * slot], src, std::size_t(row) * slot);
        }
        first = rows.data();
        peer_stride = long(row);
      }
      auto identity = [](float x) { return x; };
      float l;
      if (bf16) {
        // The LSE's bits sit in slots 512-513: 4-byte aligned, as the row is 1028 bytes.
        const auto* o = reinterpret_cast<const std::uint16_t*>(first);
        const auto* lse = reinterpret_cast<const float*>(o + kLatentDim);
        l = merge::merge_partials(int(W), o, peer_stride, lse, peer_stride / 2, kLatentDim, merged,
                                  identity);
      } else {
        const auto* o = reinterpret_cast<const float*>(first);
        l = merge::merge_partials(int(W), o, peer_stride, o + kLatentDim, peer_stride, kLatentDim,
                                  merged, identity);
      }
      a.lse.as<float>()[i] = l;
      store_f32(merged, kLatentDim, 1.0f, a.out.dtype,
                a.out.as<std::uint8_t>() + std::size_t(i) * kLatentDim * elem);
    }
  });
}

void convert(const ConvertArgs& a) {
  validate(a);
  store_f32(a.src.as<const float>(), a.src.numel(), 1.0f, a.dst.dtype, a.dst.data);
}

}  // namespace dcpmla::cpu
