#include "decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "combine.h"
#include "dcpmla/error.h"
#include "dcpmla/merge.h"
#include "elements.h"

namespace dcpmla::cpu {
namespace {

// Keys are streamed in tiles of this many local tokens (gathered across pages), so small block
// sizes cost no more per key than large ones.
constexpr int kTileTokens = 64;

// Per-thread scratch, reused across work items.
struct Scratch {
  std::vector<float> q;                     // [Q, H, 576] fp32, score scale folded in
  std::vector<float> keys;                  // [kTileTokens, 576] dequantised latent entries
  std::vector<float> scores;                // [kTileTokens]
  std::vector<float> acc;                   // [Q, H, 512] unnormalised output
  std::vector<merge::OnlineSoftmax> state;  // [Q, H]
};

struct Views {
  const Plan* plan;
  const std::uint8_t* q;  // [rows, H, 576] of q_dtype
  DType q_dtype;
  const std::uint8_t* cache;  // [num_blocks, block_size, 576] of cache_dtype
  DType cache_dtype;
  int block_size;
  float k_scale;
  const std::int32_t* block_table;  // [B, max_blocks]
  std::int64_t max_blocks;
  // softmax_scale * q_scale. Keys are dequantised with k_scale applied, which gives the
  // scale * q_scale * k_scale of the scores and the k_scale of V in one place.
  float score_scale;
  std::uint8_t* out;  // [rows, H, 512] of out_dtype
  DType out_dtype;
  float* lse;          // [rows, H]
  float* partial_out;  // [partial_rows, H, 512]
  float* partial_lse;  // [partial_rows, H]
};

void check_block_ids(const Views& v) {
  const Plan& p = *v.plan;
  const int bs = p.config.block_size;
  for (int b = 0; b < p.num_requests; ++b) {
    const std::int64_t needed = (p.request_local_len[b] + bs - 1) / bs;
    // Error text is built only on failure: this runs over every block of the batch.
    if (needed > v.max_blocks) {
      require(needed <= v.max_blocks, ErrorCode::shape_mismatch,
              fmt::format("block_table row {}", b), fmt::format(">= {} blocks", needed),
              fmt::format("{} columns", v.max_blocks));
    }
    for (std::int64_t i = 0; i < needed; ++i) {
      const auto id = v.block_table[b * v.max_blocks + i];
      if (id >= 0 && id < p.config.num_blocks) continue;
      require(id >= 0 && id < p.config.num_blocks, ErrorCode::out_of_range,
              fmt::format("block_table[{}][{}]", b, i),
              fmt::format("a block id in [0, {})", p.config.num_blocks), std::to_string(id));
    }
  }
}

// Dequantises local tokens [t0, t1) of request b into s.keys.
void gather_keys(const Views& v, int b, std::int32_t t0, std::int32_t t1, Scratch& s) {
  const std::size_t elem = dtype_size(v.cache_dtype);
  const float kscale = v.cache_dtype == DType::fp8_e4m3 ? v.k_scale : 1.0f;
  for (std::int32_t t = t0; t < t1; ++t) {
    const std::int64_t block = v.block_table[b * v.max_blocks + t / v.block_size];
    const std::int64_t entry = block * v.block_size + t % v.block_size;
    load_f32(v.cache + std::size_t(entry) * kHeadDim * elem, v.cache_dtype, kHeadDim, kscale,
             &s.keys[std::size_t(t - t0) * kHeadDim]);
  }
}

void run_item(const Views& v, const WorkItem& w, Scratch& s) {
  const Plan& p = *v.plan;
  const int H = p.config.num_heads;
  const int Q = w.num_rows;
  const std::size_t qh = std::size_t(Q) * H;
  s.q.resize(qh * kHeadDim);
  s.acc.assign(qh * kLatentDim, 0.0f);
  s.state.assign(qh, merge::OnlineSoftmax{});
  load_f32(v.q + std::size_t(w.row_begin) * H * kHeadDim * dtype_size(v.q_dtype), v.q_dtype,
           std::int64_t(qh) * kHeadDim, v.score_scale, s.q.data());

  std::int32_t visible_end = w.kv_begin;
  for (int j = 0; j < Q; ++j) {
    visible_end = std::max(visible_end, p.row_local_bound[w.row_begin + j]);
  }
  visible_end = std::min(visible_end, w.kv_end);

  for (std::int32_t t0 = w.kv_begin; t0 < visible_end; t0 += kTileTokens) {
    const std::int32_t t1 = std::min(t0 + kTileTokens, visible_end);
    gather_keys(v, w.request, t0, t1, s);
    for (int j = 0; j < Q; ++j) {
      // Each row applies its own rank-local causal bound.
      const int n = std::min(t1, p.row_local_bound[w.row_begin + j]) - t0;
      if (n <= 0) continue;
      for (int h = 0; h < H; ++h) {
        const std::size_t jh = std::size_t(j) * H + h;
        const float* qrow = &s.q[jh * kHeadDim];
        float tile_max = -INFINITY;
        const float* keys = s.keys.data();
        int k = 0;
        for (; k + 4 <= n; k += 4) dot_head4(qrow, keys + std::size_t(k) * kHeadDim, &s.scores[k]);
        for (; k < n; ++k) s.scores[k] = dot_head(qrow, keys + std::size_t(k) * kHeadDim);
        // A -inf score (an infinite query or key element) would weigh 0 and hide the corrupted
        // key; as NaN it poisons the row's exp-sum, so O and LSE come out NaN (SPEC section 5).
        for (k = 0; k < n; ++k) {
          if (s.scores[k] == -INFINITY) s.scores[k] = NAN;
          tile_max = std::max(tile_max, s.scores[k]);
        }
        float* acc = &s.acc[jh * kLatentDim];
        merge::OnlineSoftmax& st = s.state[jh];
        const float factor = st.rescale_for(tile_max);
        if (factor != 1.0f) {
          for (int d = 0; d < kLatentDim; ++d) acc[d] *= factor;
        }
        for (k = 0; k < n; ++k) {
          s.scores[k] = expf(s.scores[k] - st.m);
          st.s += s.scores[k];
        }
        // Four keys per pass over the accumulator row: it is loaded and stored once per group.
        for (k = 0; k + 4 <= n; k += 4) {
          const float* v = keys + std::size_t(k) * kHeadDim;
          const float p0 = s.scores[k], p1 = s.scores[k + 1], p2 = s.scores[k + 2],
                      p3 = s.scores[k + 3];
          for (int d = 0; d < kLatentDim; ++d) {
            acc[d] += p0 * v[d] + p1 * v[kHeadDim + d] + p2 * v[2 * kHeadDim + d] +
                      p3 * v[3 * kHeadDim + d];
          }
        }
        for (; k < n; ++k) {
          const float pk = s.scores[k];
          const float* v = keys + std::size_t(k) * kHeadDim;
          for (int d = 0; d < kLatentDim; ++d) acc[d] += pk * v[d];
        }
      }
    }
  }

  // Normalise and write: final rows directly, or fp32 partials for a later split merge.
  for (int j = 0; j < Q; ++j) {
    for (int h = 0; h < H; ++h) {
      const std::size_t jh = std::size_t(j) * H + h;
      const merge::OnlineSoftmax& st = s.state[jh];
      float* acc = &s.acc[jh * kLatentDim];
      const float inv = st.inv_sum();
      for (int d = 0; d < kLatentDim; ++d) acc[d] *= inv;
      if (w.partial_row < 0) {
        const std::size_t row = std::size_t(w.row_begin + j) * H + h;
        store_f32(acc, kLatentDim, 1.0f, v.out_dtype,
                  v.out + row * kLatentDim * dtype_size(v.out_dtype));
        v.lse[row] = st.lse();
      } else {
        const std::size_t row = std::size_t(w.partial_row + j) * H + h;
        std::copy(acc, acc + kLatentDim, v.partial_out + row * kLatentDim);
        v.partial_lse[row] = st.lse();
      }
    }
  }
}

void run_merge(const Views& v, const SplitMerge& m, int j) {
  const int H = v.plan->config.num_heads;
  const std::size_t split_stride = std::size_t(m.num_rows) * H;
  const std::size_t elem = dtype_size(v.out_dtype);
  for (int h = 0; h < H; ++h) {
    const std::size_t first = (std::size_t(m.first_partial_row) + j) * H + h;
    const std::size_t row = std::size_t(m.row_begin + j) * H + h;
    float merged[kLatentDim];
    v.lse[row] = merge::merge_partials(
        m.num_splits, v.partial_out + first * kLatentDim, long(split_stride * kLatentDim),
        v.partial_lse + first, long(split_stride), kLatentDim, merged, [](float x) { return x; });
    store_f32(merged, kLatentDim, 1.0f, v.out_dtype, v.out + row * kLatentDim * elem);
  }
}

}  // namespace

void decode(ThreadPool& pool, const DecodeArgs& args) {
  validate(args);
  const Plan& p = *args.plan;
  const int H = p.config.num_heads;
  if (query_is_gathered(args)) {
    // The gathered query in the plain layout first: the definition of that input form.
    std::vector<std::uint8_t> q(std::size_t(args.q.numel()) * dtype_size(args.q.dtype));
    DecodeArgs plain = args;
    plain.q = TensorRef(q.data(), args.q.dtype, {p.num_rows, H, kHeadDim});
    unpack_query(pool, {args.q, plain.q});
    decode(pool, plain);
    return;
  }
  if (decodes_into_send(args)) {
    // Here the send rows are the pack of an f32 decode: the definition of that output form.
    std::vector<float> out(std::size_t(p.num_rows) * H * kLatentDim),
        lse(std::size_t(p.num_rows) * H);
    DecodeArgs plain = args;
    plain.send_world = 0;
    plain.send = {};
    plain.out = TensorRef(out.data(), DType::f32, {p.num_rows, H, kLatentDim});
    plain.lse = TensorRef(lse.data(), DType::f32, {p.num_rows, H});
    decode(pool, plain);
    combine_pack(pool, {args.send_world, plain.out, plain.lse, args.send});
    return;
  }
  auto* ws = static_cast<float*>(args.workspace.data);
  const Views v{&p,
                args.q.as<const std::uint8_t>(),
                args.q.dtype,
                static_cast<const std::uint8_t*>(args.cache.data),
                args.cache.dtype,
                args.cache.block_size,
                args.cache.k_scale,
                args.block_table.as<const std::int32_t>(),
                args.block_table.shape[1],
                args.softmax_scale * args.q_scale,
                args.out.as<std::uint8_t>(),
                args.out.dtype,
                args.lse.as<float>(),
                ws,
                ws ? ws + std::size_t(p.num_partial_rows) * H * kLatentDim : nullptr};
  check_block_ids(v);

  std::vector<Scratch> scratch(std::size_t(pool.size()));
  for (auto& s : scratch) {
    s.keys.resize(std::size_t(kTileTokens) * kHeadDim);
    s.scores.resize(kTileTokens);
  }
  pool.parallel_for(std::int64_t(p.work.size()),
                    [&](std::int64_t i, int worker) { run_item(v, p.work[i], scratch[worker]); });

  std::vector<std::pair<int, int>> merge_rows;
  for (int m = 0; m < int(p.merges.size()); ++m) {
    for (int j = 0; j < p.merges[m].num_rows; ++j) merge_rows.emplace_back(m, j);
  }
  pool.parallel_for(std::int64_t(merge_rows.size()), [&](std::int64_t i, int) {
    run_merge(v, p.merges[merge_rows[i].first], merge_rows[i].second);
  });

  // Padding rows belong to no request: O = 0, LSE = -inf.
  const std::size_t elem = dtype_size(args.out.dtype);
  for (std::int64_t row = p.num_real_rows; row < p.num_rows; ++row) {
    std::fill_n(args.out.as<std::uint8_t>() + std::size_t(row) * H * kLatentDim * elem,
                std::size_t(H) * kLatentDim * elem, std::uint8_t(0));
    std::fill_n(args.lse.as<float>() + std::size_t(row) * H, H, -INFINITY);
  }
}

}  // namespace dcpmla::cpu
