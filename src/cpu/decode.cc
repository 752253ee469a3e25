#include "decode.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "combine.h"
#include "core/schedule_layout.h"
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
  const PlanConfig* config;
  ScheduleView schedule;
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

// The calling thread's scratch, kept for its lifetime (the pool's workers live as long as the
// backend): a decode of a few tokens then costs no allocation of tile buffers.
Scratch& thread_scratch() {
  thread_local Scratch s = [] {
    Scratch made;
    made.keys.resize(std::size_t(kTileTokens) * kHeadDim);
    made.scores.resize(kTileTokens);
    return made;
  }();
  return s;
}

// Dequantises local tokens [t0, t1) of request b into s.keys.
void gather_keys(const Views& v, int b, std::int32_t t0, std::int32_t t1, Scratch& s) {
  const std::size_t elem = dtype_size(v.cache_dtype);
  const float kscale = v.cache_dtype == DType::fp8_e4m3 ? v.k_scale : 1.0f;
  for (std::int32_t t = t0; t < t1; ++t) {
    const std::int64_t block = v.block_table[b * v.max_blocks + t / v.block_size];
    // As on the GPU: an id outside the cache reads no memory, its keys are NaN (rows that see
    // them come out NaN). validate_block_ids refuses such a table on the host before a step.
    if (block < 0 || block >= v.config->num_blocks) {
      std::fill_n(&s.keys[std::size_t(t - t0) * kHeadDim], kHeadDim, NAN);
      continue;
    }
    const std::int64_t entry = block * v.block_size + t % v.block_size;
    load_f32(v.cache + std::size_t(entry) * kHeadDim * elem, v.cache_dtype, kHeadDim, kscale,
             &s.keys[std::size_t(t - t0) * kHeadDim]);
  }
}

// Pairs [pair_begin, pair_begin + num_pairs) of the item's request (pair = j * H + h).
void run_item(const Views& v, const WorkItem& w, Scratch& s) {
  const int H = v.config->num_heads;
  const std::int64_t P = w.num_pairs;
  const std::int32_t* bounds = v.schedule.row_bound + w.row_begin;
  s.q.resize(std::size_t(P) * kHeadDim);
  s.acc.assign(std::size_t(P) * kLatentDim, 0.0f);
  s.state.assign(std::size_t(P), merge::OnlineSoftmax{});
  load_f32(v.q + (std::size_t(w.row_begin) * H + w.pair_begin) * kHeadDim * dtype_size(v.q_dtype),
           v.q_dtype, P * kHeadDim, v.score_scale, s.q.data());
  const std::int32_t visible_end = w.kv_visible_end;

  for (std::int32_t t0 = w.kv_begin; t0 < visible_end; t0 += kTileTokens) {
    const std::int32_t t1 = std::min(t0 + kTileTokens, visible_end);
    gather_keys(v, w.request, t0, t1, s);
    for (std::int64_t i = 0; i < P; ++i) {
      // Each row applies its own rank-local causal bound.
      const int n = std::min(t1, bounds[(w.pair_begin + i) / H]) - t0;
      if (n <= 0) continue;
      const float* qrow = &s.q[std::size_t(i) * kHeadDim];
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
      float* acc = &s.acc[std::size_t(i) * kLatentDim];
      merge::OnlineSoftmax& st = s.state[std::size_t(i)];
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

  // Normalise and write: final rows directly, or fp32 partials for a later split merge.
  for (std::int64_t i = 0; i < P; ++i) {
    const std::int64_t j = (w.pair_begin + i) / H, h = (w.pair_begin + i) % H;
    const merge::OnlineSoftmax& st = s.state[std::size_t(i)];
    float* acc = &s.acc[std::size_t(i) * kLatentDim];
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

void run_merge(const Views& v, const MergeRow& m) {
  const int H = v.config->num_heads;
  const std::size_t split_stride = std::size_t(m.split_stride_rows) * H;
  const std::size_t elem = dtype_size(v.out_dtype);
  for (int h = 0; h < H; ++h) {
    const std::size_t first = std::size_t(m.first_partial_row) * H + h;
    const std::size_t row = std::size_t(m.out_row) * H + h;
    float merged[kLatentDim];
    v.lse[row] = merge::merge_partials(
        m.num_splits, v.partial_out + first * kLatentDim, long(split_stride * kLatentDim),
        v.partial_lse + first, long(split_stride), kLatentDim, merged, [](float x) { return x; });
    store_f32(merged, kLatentDim, 1.0f, v.out_dtype, v.out + row * kLatentDim * elem);
  }
}

}  // namespace

void decode(ThreadPool& pool, const DecodeArgs& args, const Schedule& schedule) {
  const PlanConfig& config = schedule.config();
  const std::int64_t rows = schedule.host_view().rows;
  const int H = config.num_heads;
  if (query_is_gathered(args)) {
    // The gathered query in the plain layout first: the definition of that input form.
    std::vector<std::uint8_t> q(std::size_t(args.q.numel()) * dtype_size(args.q.dtype));
    DecodeArgs plain = args;
    plain.q = TensorRef(q.data(), args.q.dtype, {rows, H, kHeadDim});
    unpack_query(pool, {args.q, plain.q});
    decode(pool, plain, schedule);
    return;
  }
  if (decodes_into_send(args)) {
    // Here the send rows are the pack of an f32 decode: the definition of that output form.
    std::vector<float> out(std::size_t(rows) * H * kLatentDim), lse(std::size_t(rows) * H);
    DecodeArgs plain = args;
    plain.send_world = 0;
    plain.send = {};
    plain.out = TensorRef(out.data(), DType::f32, {rows, H, kLatentDim});
    plain.lse = TensorRef(lse.data(), DType::f32, {rows, H});
    decode(pool, plain, schedule);
    combine_pack(pool, {args.send_world, plain.out, plain.lse, args.send});
    return;
  }
  const ScheduleView sv = schedule_view(schedule.memory(), schedule.capacity());
  const ScheduleHeader& header = *sv.header;
  auto* ws = static_cast<float*>(args.workspace.data);
  const std::size_t ws_rows =
      args.workspace.bytes() / (std::size_t(H) * (kLatentDim + 1) * sizeof(float));
  const Views v{&config,
                sv,
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
                ws ? ws + ws_rows * H * kLatentDim : nullptr};
  const std::size_t elem = dtype_size(args.out.dtype);
  auto fill_rows = [&](std::int64_t begin, std::int64_t end, float o, float l) {
    for (std::int64_t row = begin; row < end; ++row) {
      float* lse = args.lse.as<float>() + std::size_t(row) * H;
      std::fill_n(lse, H, l);
      std::uint8_t* out = args.out.as<std::uint8_t>() + std::size_t(row) * H * kLatentDim * elem;
      if (o == 0.0f) {
        std::fill_n(out, std::size_t(H) * kLatentDim * elem, std::uint8_t(0));
      } else {
        std::vector<float> nan(std::size_t(H) * kLatentDim, o);
        store_f32(nan.data(), std::int64_t(nan.size()), 1.0f, args.out.dtype, out);
      }
    }
  };
  // A faulted device plan: every row NaN, so nothing downstream takes it for attention.
  if (header.fault != kNoFault) return fill_rows(0, rows, NAN, NAN);

  pool.parallel_for(header.num_items,
                    [&](std::int64_t i, int) { run_item(v, sv.items[i], thread_scratch()); });
  pool.parallel_for(header.num_merge_rows,
                    [&](std::int64_t i, int) { run_merge(v, sv.merge_rows[i]); });
  // Padding rows belong to no request: O = 0, LSE = -inf.
  fill_rows(header.padding_begin, std::min(header.padding_end, rows), 0.0f, -INFINITY);
}

}  // namespace dcpmla::cpu
