// The plan of make_plan computed from a batch in device memory, written as steps over index
// ranges for an executor: the GPU runs each step with the threads of one block (cuda/plan), the
// CPU backend runs them one index after another (cpu/device_planner_emulation.cc), so CI checks
// the same steps against make_plan. Every rule comes from plan_rules.h, as in make_plan.
//
// Executor interface (all of a step's threads call each function; each returns after a barrier):
//   parallel(n, f)           f(i) for every i in [0, n), in any order
//   serial(f)                f() once
//   sum(n, f) / max(n, f)    int64 reductions of f(i), the result known to every thread
//   min_u64(n, f)            uint64 minimum of f(i)
//   segmented_sum(m, n, f, out)  out[k] = sum over i < n of f(k, i), for k < m (two int64s)
//   exclusive_scan(n, f, out)    out[i] = sum over j < i of f(j); returns the total
//   sort(keys, n)            ascending
#pragma once

#include <cstdint>

#include "core/plan_rules.h"
#include "core/schedule_layout.h"

namespace dcpmla::planner {

// The planner's inputs beside the schedule: the batch (device pointers) and fixed shapes.
struct DeviceBatchArgs {
  const std::int32_t* query_start_loc;  // [B + 1]
  const std::int32_t* seq_lens;         // [B]
  std::int32_t num_requests;            // B
  std::int64_t num_tokens;              // N: the decode's q rows
  int world, rank, interleave;
  int num_heads, block_size;
  int workers, tile_pairs, min_split_tokens, kv_chunk_blocks;
  std::int64_t max_work_items, max_partial_rows;  // PlanConfig's limits
  std::int32_t blocks_per_request;                // capacities
  std::int64_t work_items, merge_rows, partial_rows;
};

// Scratch of the planner inside the schedule (ScheduleLayout::scratch), sized for a capacity.
struct Scratch {
  std::int32_t* q;               // [requests]
  std::int32_t* local;           // [requests] local KV tokens
  std::int64_t* kv_blocks;       // [requests]
  std::int64_t* tiles;           // [requests] work items a split of the request needs
  std::int64_t* chunk;           // [requests] chunk in blocks
  std::int64_t* split_first;     // [requests] first split index
  std::int64_t* partial_first;   // [requests]
  std::int64_t* merge_first;     // [requests]
  std::int64_t* position;        // [requests] (tail cut) first work item in request order
  std::uint64_t* keys;           // [sort_capacity]
  std::int64_t* item_first;      // [work_items] first work item of each split, launch order
  std::int32_t* split_request;   // [work_items] the request of each split (request order)
  std::uint64_t* costs;          // [max_candidates] chunk_cost, ~0 where over the limits
  std::int64_t* candidates;      // [max_candidates + 1]: chunks, then the choice
  std::int64_t* candidate_sums;  // [2 * max_candidates]: work items, split pairs
  std::int64_t max_candidates;
};
// Candidate chunks at most: one per split count 1 .. 2 x workers. The schedule's scratch has room
// for kMaxWorkers; the GPU's copy in shared memory for the config's workers.
inline constexpr std::int64_t kMaxWorkers = 1024;
inline constexpr std::int64_t kMaxCandidates = 2 * kMaxWorkers;
// Split keys sorted at once (in shared memory on the GPU): bounds the work items of a schedule
// that the device plans.
inline constexpr std::int64_t kMaxSortKeys = 16384;

DCPMLA_HD std::size_t align16(std::size_t n) {
  return (n + 15) / 16 * 16;
}
DCPMLA_HD std::int64_t sort_capacity(std::int64_t requests, std::int64_t work_items) {
  std::int64_t n = requests > work_items ? requests : work_items;
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
// Bytes of scratch and the pointers into it.
DCPMLA_HD std::size_t scratch_bytes(std::int64_t requests, std::int64_t work_items,
                                    std::int64_t max_candidates = kMaxCandidates) {
  const std::size_t r = std::size_t(requests), m = std::size_t(max_candidates);
  return align16(r * 4) * 2 + align16(r * 8) * 7 +
         align16(std::size_t(sort_capacity(requests, work_items)) * 8) +
         align16(std::size_t(work_items) * 8) + align16(std::size_t(work_items) * 4) +
         align16(m * 8) + align16((m + 1) * 8) + align16(2 * m * 8);
}
DCPMLA_HD Scratch scratch_view(std::byte* p, std::int64_t requests, std::int64_t work_items,
                               std::int64_t max_candidates = kMaxCandidates) {
  const std::size_t r = std::size_t(requests), m = std::size_t(max_candidates);
  Scratch s;
  s.max_candidates = max_candidates;
  auto take = [&](std::size_t bytes) {
    std::byte* q = p;
    p += align16(bytes);
    return q;
  };
  s.q = reinterpret_cast<std::int32_t*>(take(r * 4));
  s.local = reinterpret_cast<std::int32_t*>(take(r * 4));
  s.kv_blocks = reinterpret_cast<std::int64_t*>(take(r * 8));
  s.tiles = reinterpret_cast<std::int64_t*>(take(r * 8));
  s.chunk = reinterpret_cast<std::int64_t*>(take(r * 8));
  s.split_first = reinterpret_cast<std::int64_t*>(take(r * 8));
  s.partial_first = reinterpret_cast<std::int64_t*>(take(r * 8));
  s.merge_first = reinterpret_cast<std::int64_t*>(take(r * 8));
  s.position = reinterpret_cast<std::int64_t*>(take(r * 8));
  s.keys =
      reinterpret_cast<std::uint64_t*>(take(std::size_t(sort_capacity(requests, work_items)) * 8));
  s.item_first = reinterpret_cast<std::int64_t*>(take(std::size_t(work_items) * 8));
  s.split_request = reinterpret_cast<std::int32_t*>(take(std::size_t(work_items) * 4));
  s.costs = reinterpret_cast<std::uint64_t*>(take(m * 8));
  s.candidates = reinterpret_cast<std::int64_t*>(take((m + 1) * 8));
  s.candidate_sums = reinterpret_cast<std::int64_t*>(take(2 * m * 8));
  return s;
}

// The last index k < n with first[k] <= x, for first[0] <= x and first ascending: the range of
// an exclusive scan that holds x.
DCPMLA_HD std::int64_t last_at_most(const std::int64_t* first, std::int64_t n, std::int64_t x) {
  std::int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (first[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

DCPMLA_HD std::uint64_t fault_word(std::int64_t request, ScheduleFault f) {
  return (std::uint64_t(request + 1) << 8) | std::uint64_t(f);
}

// The first rule request b breaks, or kNoFault.
DCPMLA_HD std::uint64_t request_fault(const DeviceBatchArgs& a, std::int64_t b) {
  const std::int64_t start = a.query_start_loc[b], end = a.query_start_loc[b + 1];
  if (b == 0 && start != 0) return fault_word(b, ScheduleFault::first_start_not_zero);
  if (end - start < 1) return fault_word(b, ScheduleFault::query_not_increasing);
  const std::int64_t T = a.seq_lens[b];
  if (T < end - start) return fault_word(b, ScheduleFault::length_below_query);
  if (b == a.num_requests - 1 && end > a.num_tokens) {
    return fault_word(b, ScheduleFault::rows_over_capacity);
  }
  // Rank 0 holds the most of every request: all ranks of a group fault alike.
  const std::int64_t fullest = rules::local_len(T, a.world, 0, a.interleave);
  if (rules::ceil_div(fullest, a.block_size) > a.blocks_per_request) {
    return fault_word(b, ScheduleFault::blocks_over_capacity);
  }
  return kNoFault;
}

template <class Exec>
DCPMLA_HD void poison(Exec& ex, const DeviceBatchArgs& a, const ScheduleView& v,
                      std::uint64_t fault) {
  ex.serial([&] {
    ScheduleHeader& h = *v.header;
    h.num_items = 0;
    h.num_merge_rows = 0;
    h.padding_begin = 0;
    h.padding_end = a.num_tokens;
    h.fault = fault;
    h.num_partial_rows = 0;
    h.max_splits = 1;
    h.num_requests = a.num_requests;
    h.num_rows = a.num_tokens;
  });
}

// The last-wave cut (split_policy.cc's tail_cut, step by step). Writes s.chunk of the cut
// requests; the others keep the unsplit chunk.
template <class Exec>
DCPMLA_HD void tail_cut(Exec& ex, const DeviceBatchArgs& a, const Scratch& s, std::int64_t total,
                        std::int64_t min_chunk) {
  const std::int64_t B = a.num_requests, S = a.workers;
  if (total <= S || total > rules::kMaxTailWaves * S) return;
  ex.parallel(B, [&](std::int64_t b) { s.keys[b] = rules::order_key(s.kv_blocks[b], b); });
  ex.sort(s.keys, B);
  auto request = [&](std::int64_t k) { return std::int64_t(s.keys[k] & 0xffffffffu); };
  ex.exclusive_scan(
      B, [&](std::int64_t k) { return s.tiles[request(k)]; }, s.position);
  const std::int64_t waves = rules::ceil_div(total, S);
  const std::int64_t tail_start = (waves - 1) * S;
  // The sorted request holding work item x (positions ascend).
  auto holder = [&](std::int64_t x) { return last_at_most(s.position, B, x); };
  auto walk = [&](std::int64_t b) { return s.kv_blocks[b] * a.block_size + rules::kFixedTokens; };
  const std::int64_t estimate =
      ex.sum(waves, [&](std::int64_t w) { return walk(request(holder(w * S))); });
  // The first tail request holds the tail's first item, or is the one after a request ending at it.
  const std::int64_t first_tail = holder(tail_start);
  const std::int64_t parts = rules::min64(rules::kMaxTailParts, S / (total - tail_start));
  if (parts < 2) return;
  auto cut_chunk = [&](std::int64_t b) {
    return rules::max64(min_chunk, rules::ceil_div(s.kv_blocks[b], parts));
  };
  auto cut_splits = [&](std::int64_t i) {
    const std::int64_t b = request(first_tail + i);
    const std::int64_t chunk = cut_chunk(b);
    return s.kv_blocks[b] <= chunk ? std::int64_t(1) : rules::ceil_div(s.kv_blocks[b], chunk);
  };
  const std::int64_t split_pairs = ex.sum(B - first_tail, [&](std::int64_t i) {
    const std::int64_t n = cut_splits(i);
    return n > 1 ? n * s.q[request(first_tail + i)] * a.num_heads : std::int64_t(0);
  });
  const std::int64_t items = total + ex.sum(B - first_tail, [&](std::int64_t i) {
    return (cut_splits(i) - 1) * s.tiles[request(first_tail + i)];
  });
  if (!rules::within_limits(items, split_pairs, a.num_heads, a.max_work_items,
                            a.max_partial_rows)) {
    return;
  }
  const std::int64_t split_milli = split_pairs * rules::kSplitPairMilli;
  const std::int64_t longest_tail = request(first_tail);
  const std::int64_t cut_walk =
      rules::min64(cut_chunk(longest_tail), s.kv_blocks[longest_tail]) * a.block_size +
      rules::kFixedTokens;
  const auto after = (unsigned __int128)(estimate - walk(longest_tail) + cut_walk) * rules::kMilli +
                     std::uint64_t(split_milli);
  const auto before = (unsigned __int128)(estimate)*rules::kMilli;
  if (after * 100 > before * rules::kTailGainPercent) return;
  ex.parallel(B - first_tail, [&](std::int64_t i) {
    const std::int64_t b = request(first_tail + i);
    s.chunk[b] = cut_chunk(b);
  });
}

template <class Exec>
DCPMLA_HD void plan_batch(Exec& ex, const DeviceBatchArgs& a, const ScheduleView& v,
                          const Scratch& s) {
  const std::int64_t B = a.num_requests, N = a.num_tokens, H = a.num_heads;
  const std::uint64_t fault = ex.min_u64(B, [&](std::int64_t b) { return request_fault(a, b); });
  if (fault != kNoFault) return poison(ex, a, v, fault);
  if (B == 0 && a.query_start_loc[0] != 0) {
    return poison(ex, a, v, fault_word(0, ScheduleFault::first_start_not_zero));
  }
  const std::int64_t real_rows = a.query_start_loc[B];

  ex.parallel(B, [&](std::int64_t b) {
    const std::int64_t start = a.query_start_loc[b];
    const std::int64_t Q = a.query_start_loc[b + 1] - start, T = a.seq_lens[b];
    const std::int64_t local = rules::local_len(T, a.world, a.rank, a.interleave);
    s.q[b] = std::int32_t(Q);
    s.local[b] = std::int32_t(local);
    s.kv_blocks[b] = rules::ceil_div(local, a.block_size);
    s.tiles[b] = rules::tiles_per_split(Q, a.num_heads, a.tile_pairs);
    for (std::int64_t j = 0; j < Q; ++j) {
      v.row_bound[start + j] =
          std::int32_t(rules::row_local_bound(T, Q, j, false, a.world, a.rank, a.interleave));
    }
  });
  ex.parallel(N - real_rows, [&](std::int64_t i) { v.row_bound[real_rows + i] = 0; });

  // The chunk of every request (split_policy.cc's choose_chunks).
  const std::int64_t longest =
      rules::max64(1, ex.max(B, [&](std::int64_t b) { return s.kv_blocks[b]; }));
  const std::int64_t min_chunk = rules::ceil_div(a.min_split_tokens, a.block_size);
  std::int64_t chunk = a.kv_chunk_blocks > 0 ? a.kv_chunk_blocks : longest;
  const bool choose = a.kv_chunk_blocks == 0 && a.workers > 0 && B > 0 && longest > min_chunk;
  if (choose) {
    // Candidates in order (k = 0 unsplit), then their costs, then the first within 2 % of the best.
    // next_candidate's sequence is the distinct values of split_chunk(n) for split counts n = 1 ..
    // 2 x workers (non-increasing, split_chunk(1) = longest): n gives a candidate where its chunk
    // is below n - 1's, and its index is the count of those before it (a scan).
    auto split_chunk = [&](std::int64_t n) {
      return rules::max64(min_chunk, rules::ceil_div(longest, n));
    };
    auto starts_candidate = [&](std::int64_t i) {
      return i == 0 || split_chunk(i + 1) < split_chunk(i) ? std::int64_t(1) : std::int64_t(0);
    };
    const std::int64_t counts = 2 * std::int64_t(a.workers);
    const std::int64_t count = ex.exclusive_scan(counts, starts_candidate, s.candidate_sums);
    ex.parallel(counts, [&](std::int64_t i) {
      if (starts_candidate(i)) s.candidates[s.candidate_sums[i]] = split_chunk(i + 1);
    });
    ex.segmented_sum(
        count, B,
        [&](std::int64_t k, std::int64_t b) {
          const auto t =
              rules::split_terms(s.kv_blocks[b], s.candidates[k], s.tiles[b], s.q[b], a.num_heads);
          return rules::SplitTerms{t.work_items, t.split_pairs};
        },
        s.candidate_sums);
    // Each candidate's cost (~0 where it breaks the limits; the unsplit one always counts, as in
    // split_policy.cc), the best, then the first within 2 % of it: all in parallel.
    constexpr std::uint64_t kOut = ~std::uint64_t(0);
    ex.parallel(count, [&](std::int64_t k) {
      const std::int64_t items = s.candidate_sums[2 * k], pairs = s.candidate_sums[2 * k + 1];
      const bool feasible = k == 0 || rules::within_limits(items, pairs, a.num_heads,
                                                           a.max_work_items, a.max_partial_rows);
      s.costs[k] = feasible ? rules::chunk_cost(s.candidates[k], longest, a.block_size, items,
                                                pairs, a.workers)
                            : kOut;
    });
    const std::uint64_t best = ex.min_u64(count, [&](std::int64_t k) { return s.costs[k]; });
    const std::uint64_t first = ex.min_u64(count, [&](std::int64_t k) {
      return s.costs[k] != kOut && s.costs[k] * 100 <= best * rules::kTolerancePercent
                 ? std::uint64_t(k)
                 : kOut;
    });
    ex.serial([&] { s.candidates[s.max_candidates] = s.candidates[first]; });
    chunk = s.candidates[s.max_candidates];
  }
  ex.parallel(B, [&](std::int64_t b) { s.chunk[b] = chunk; });
  if (choose && chunk >= longest) {
    const std::int64_t total = ex.sum(B, [&](std::int64_t b) { return s.tiles[b]; });
    tail_cut(ex, a, s, total, min_chunk);
  }

  // Splits, partial rows and merge rows in request order.
  auto splits = [&](std::int64_t b) {
    return rules::splits_of(s.local[b], s.chunk[b] * a.block_size);
  };
  const std::int64_t num_splits = ex.exclusive_scan(B, splits, s.split_first);
  const std::int64_t partial_rows = ex.exclusive_scan(
      B,
      [&](std::int64_t b) {
        const std::int64_t n = splits(b);
        return n > 1 ? n * s.q[b] : std::int64_t(0);
      },
      s.partial_first);
  const std::int64_t merge_rows = ex.exclusive_scan(
      B, [&](std::int64_t b) { return splits(b) > 1 ? std::int64_t(s.q[b]) : std::int64_t(0); },
      s.merge_first);
  const std::int64_t items = ex.sum(B, [&](std::int64_t b) { return splits(b) * s.tiles[b]; });
  const std::int64_t max_splits = rules::max64(1, ex.max(B, splits));
  if (items > a.work_items || num_splits > kMaxSortKeys) {
    return poison(ex, a, v, fault_word(-1, ScheduleFault::work_over_capacity));
  }
  if (merge_rows > a.merge_rows) {
    return poison(ex, a, v, fault_word(-1, ScheduleFault::merges_over_capacity));
  }
  if (partial_rows > a.partial_rows) {
    return poison(ex, a, v, fault_word(-1, ScheduleFault::partials_over_capacity));
  }

  // Split keys (walk descending, then split index) and the merge rows.
  ex.parallel(B, [&](std::int64_t b) {
    const std::int64_t n = splits(b), Q = s.q[b], start = a.query_start_loc[b];
    const std::int64_t chunk_tokens = s.chunk[b] * a.block_size;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto begin = std::int32_t(i * chunk_tokens);
      const auto end = std::int32_t(rules::min64(s.local[b], (i + 1) * chunk_tokens));
      // The split's last row sees all T: its local bound is the request's local length.
      const std::int32_t visible = rules::clamp_visible(s.local[b], begin, end);
      s.keys[s.split_first[b] + i] =
          rules::order_key(rules::walk_tiles(begin, visible), s.split_first[b] + i);
      s.split_request[s.split_first[b] + i] = std::int32_t(b);
    }
    if (n == 1) return;
    for (std::int64_t j = 0; j < Q; ++j) {
      v.merge_rows[s.merge_first[b] + j] = {std::int32_t(start + j),
                                            std::int32_t(s.partial_first[b] + j), std::int32_t(n),
                                            std::int32_t(Q)};
    }
  });
  ex.sort(s.keys, num_splits);

  auto sorted_index = [&](std::int64_t k) { return std::int64_t(s.keys[k] & 0xffffffffu); };
  ex.exclusive_scan(
      num_splits, [&](std::int64_t k) { return s.tiles[s.split_request[sorted_index(k)]]; },
      s.item_first);
  // Work items, one each: the split holding item x is the last whose first item is <= x.
  ex.parallel(items, [&](std::int64_t x) {
    const std::int64_t lo = last_at_most(s.item_first, num_splits, x);
    const std::int64_t index = sorted_index(lo);
    const std::int64_t b = s.split_request[index], i = index - s.split_first[b];
    const std::int64_t Q = s.q[b], start = a.query_start_loc[b], T = a.seq_lens[b];
    const std::int64_t chunk_tokens = s.chunk[b] * a.block_size;
    const auto begin = std::int32_t(i * chunk_tokens);
    const auto end = std::int32_t(rules::min64(s.local[b], (i + 1) * chunk_tokens));
    const std::int64_t pairs = Q * H;
    const std::int64_t step = a.tile_pairs > 0 ? a.tile_pairs : pairs;
    const std::int64_t pb = (x - s.item_first[lo]) * step;
    const std::int64_t np = rules::min64(step, pairs - pb);
    // The bound of the item's last row, from the rules (the schedule's copy is in global memory
    // that this step wrote).
    const std::int64_t last_row = std::uint32_t(pb + np - 1) / std::uint32_t(H);
    const auto last_bound =
        std::int32_t(rules::row_local_bound(T, Q, last_row, false, a.world, a.rank, a.interleave));
    v.items[x] = {std::int32_t(b),
                  std::int32_t(start),
                  std::int32_t(pb),
                  std::int32_t(np),
                  begin,
                  end,
                  rules::clamp_visible(last_bound, begin, end),
                  splits(b) > 1 ? std::int32_t(s.partial_first[b] + i * Q) : -1};
  });
  ex.serial([&] {
    ScheduleHeader& h = *v.header;
    h.num_items = items;
    h.num_merge_rows = merge_rows;
    h.padding_begin = real_rows;
    h.padding_end = N;
    h.fault = kNoFault;
    h.num_partial_rows = partial_rows;
    h.max_splits = std::int32_t(max_splits);
    h.num_requests = std::int32_t(B);
    h.num_rows = N;
  });
}

}  // namespace dcpmla::planner

namespace dcpmla::planner {

// The planner's arguments for a schedule and a device batch (checked by Schedule).
inline DeviceBatchArgs device_batch_args(const Schedule& schedule, const DeviceBatchRef& batch,
                                         std::int64_t num_tokens) {
  const PlanConfig& c = schedule.config();
  const ScheduleCapacity& cap = schedule.capacity();
  return {batch.query_start_loc.as<const std::int32_t>(),
          batch.seq_lens.as<const std::int32_t>(),
          std::int32_t(batch.seq_lens.shape[0]),
          num_tokens,
          c.sharding.world,
          c.sharding.rank,
          c.sharding.interleave,
          c.num_heads,
          c.block_size,
          c.model.workers,
          c.model.tile_pairs,
          c.model.min_split_tokens,
          c.kv_chunk_blocks,
          c.max_work_items,
          c.max_partial_rows,
          cap.blocks_per_request,
          cap.work_items,
          cap.merge_rows,
          cap.partial_rows};
}

}  // namespace dcpmla::planner
