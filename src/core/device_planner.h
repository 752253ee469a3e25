// The plan of make_plan computed from a batch in device memory, written as steps over index
// ranges for an executor: the GPU runs each step with the threads of one block (cuda/plan), the
// CPU backend runs them one index after another (cpu/device_planner_emulation.cc), so CI checks
// the same steps against make_plan. Every rule comes from plan_rules.h, as in make_plan.
//
// On the GPU each step ends at a block-wide barrier and the planner's time is the chain of its
// steps, so the steps are few: one pass over the requests folds the faults, the longest KV and
// the unsplit work; every split count is costed in one segmented sum; one scan gives the splits,
// partial rows, merge rows and work items of every request.
//
// Executor interface (all of a step's threads call each function; each returns after a barrier):
//   threads()                  how many threads run a step (1 on the CPU)
//   parallel(n, f)             f(i) for every i in [0, n), in any order
//   serial(f)                  f() once
//   reduce<R>(n, f)            R::combine over f(i) (R() for n = 0), known to every thread
//   sum(n, f) / max(n, f)      int64 reductions of f(i), the result known to every thread
//   min_u64(n, f)              uint64 minimum of f(i)
//   segmented_sum(m, n, active, setup, f, out)  out[2k, 2k + 1] = sums over i < n of
//                              f(setup(k), i) (two int64s), for the k < m where active(k);
//                              others untouched
//   exclusive_scans<K>(n, f, out)  out.out[j][i] = sum over i' < i of f(i').v[j] (out.out[j]
//                              may be null); returns the totals
//   sort(keys, n)              ascending (the keys are distinct)
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
  std::int32_t* q;              // [requests]
  std::int32_t* local;          // [requests] local KV tokens
  std::int32_t* start;          // [requests] query_start_loc, read once from the batch
  std::int32_t* total;          // [requests] seq_lens (global T)
  std::int64_t* kv_blocks;      // [requests]
  std::int64_t* tiles;          // [requests] work items a split of the request needs
  std::int64_t* chunk;          // [requests] chunk in blocks (the last-wave cut only)
  std::int64_t* split_first;    // [requests] first split index
  std::int64_t* partial_first;  // [requests]
  std::int64_t* merge_first;    // [requests]
  std::int64_t* position;       // [requests] (tail cut) first work item in request order
  std::uint64_t* keys;          // [sort_capacity]
  std::int64_t* item_first;     // [work_items] first work item of each split, launch order
  std::int32_t* split_request;  // [work_items] the request of each split (request order)
  // [work_items] each work item's split (request-order index, high 32 bits) and its place in it
  std::uint64_t* item_split;
  std::int64_t* candidate_sums;  // [2 * max_candidates]: work items, split pairs a split count
  std::uint64_t* costs;          // [max_candidates]: each split count's chunk_cost (~0: none)
  std::int64_t max_candidates;
};
// Split counts evaluated at most: 1 .. 2 x workers. The schedule's scratch has room for
// kMaxWorkers; the GPU's copy in shared memory for the config's workers.
inline constexpr std::int64_t kMaxWorkers = 1024;
inline constexpr std::int64_t kMaxCandidates = 2 * kMaxWorkers;
// Split keys sorted at once (in shared memory on the GPU): bounds the work items of a schedule
// that the device plans.
inline constexpr std::int64_t kMaxSortKeys = 16384;

DCPMLA_HD std::size_t align16(std::size_t n) {
  return (n + 15) / 16 * 16;
}
DCPMLA_HD std::int64_t sort_capacity(std::int64_t requests, std::int64_t work_items) {
  const std::int64_t n = requests > work_items ? requests : work_items;
  // The least power of two >= n (a loop here was ~100 instructions of each GPU planner launch).
  return n <= 1 ? 1 : std::int64_t(1) << (64 - rules::count_leading_zeros(std::uint64_t(n - 1)));
}
// The scratch's arrays in order: take(bytes) gives each one's start (16-byte aligned).
template <class Take>
DCPMLA_HD Scratch scratch_arrays(std::int64_t requests, std::int64_t work_items,
                                 std::int64_t max_candidates, Take&& take) {
  const std::size_t r = std::size_t(requests), m = std::size_t(max_candidates);
  Scratch s;
  s.max_candidates = max_candidates;
  s.q = reinterpret_cast<std::int32_t*>(take(r * 4));
  s.local = reinterpret_cast<std::int32_t*>(take(r * 4));
  s.start = reinterpret_cast<std::int32_t*>(take(r * 4));
  s.total = reinterpret_cast<std::int32_t*>(take(r * 4));
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
  s.item_split = reinterpret_cast<std::uint64_t*>(take(std::size_t(work_items) * 8));
  s.candidate_sums = reinterpret_cast<std::int64_t*>(take(2 * m * 8));
  s.costs = reinterpret_cast<std::uint64_t*>(take(m * 8));
  return s;
}
// Bytes of scratch and the pointers into it.
DCPMLA_HD std::size_t scratch_bytes(std::int64_t requests, std::int64_t work_items,
                                    std::int64_t max_candidates = kMaxCandidates) {
  std::size_t bytes = 0;
  scratch_arrays(requests, work_items, max_candidates, [&](std::size_t n) -> std::byte* {
    bytes += align16(n);
    return nullptr;
  });
  return bytes;
}
DCPMLA_HD Scratch scratch_view(std::byte* p, std::int64_t requests, std::int64_t work_items,
                               std::int64_t max_candidates = kMaxCandidates) {
  return scratch_arrays(requests, work_items, max_candidates, [&](std::size_t n) {
    std::byte* q = p;
    p += align16(n);
    return q;
  });
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

// segmented_sum's segment k summed by one thread, one index after another: out[2k, 2k + 1].
template <class Setup, class F>
DCPMLA_HD void sum_segment_alone(std::int64_t k, std::int64_t n, Setup&& setup, F&& f,
                                 std::int64_t* out) {
  const auto context = setup(k);
  std::int64_t a = 0, b = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto t = f(context, i);
    a += t.work_items;
    b += t.split_pairs;
  }
  out[2 * k] = a;
  out[2 * k + 1] = b;
}

DCPMLA_HD std::uint64_t fault_word(std::int64_t request, ScheduleFault f) {
  return (std::uint64_t(request + 1) << 8) | std::uint64_t(f);
}

// The schedule's work items are 16-byte aligned (schedule_layout): on the GPU an item is two
// 16-byte stores rather than eight of 4 bytes.
DCPMLA_HD void store_item(WorkItem* dst, const WorkItem& w) {
#ifdef __CUDA_ARCH__
  auto* d = reinterpret_cast<int4*>(dst);
  d[0] = make_int4(w.request, w.row_begin, w.pair_begin, w.num_pairs);
  d[1] = make_int4(w.kv_begin, w.kv_end, w.kv_visible_end, w.partial_row);
#else
  *dst = w;
#endif
}

// A request's entries of the batch, read once: its query rows [start, end) and T.
struct RequestInput {
  std::int64_t start, end, total;
};
DCPMLA_HD RequestInput request_input(const DeviceBatchArgs& a, std::int64_t b) {
  return {a.query_start_loc[b], a.query_start_loc[b + 1], a.seq_lens[b]};
}

// The first rule request b breaks, or kNoFault.
DCPMLA_HD std::uint64_t request_fault(const DeviceBatchArgs& a, std::int64_t b,
                                      const RequestInput& in) {
  const std::int64_t start = in.start, end = in.end;
  if (b == 0 && start != 0) return fault_word(b, ScheduleFault::first_start_not_zero);
  if (end - start < 1) return fault_word(b, ScheduleFault::query_not_increasing);
  const std::int64_t T = in.total;
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

// K int64 sums carried through a scan.
// Folded values expose their 64-bit words (kWords, word, set_word) so that the GPU shuffles them
// word by word in registers.
template <int K>
struct Sums {
  static constexpr int kWords = K;
  std::int64_t v[K];
  DCPMLA_HD static Sums combine(const Sums& a, const Sums& b) {
    Sums c;
    for (int j = 0; j < K; ++j) c.v[j] = a.v[j] + b.v[j];
    return c;
  }
  DCPMLA_HD std::int64_t word(int j) const { return v[j]; }
  DCPMLA_HD void set_word(int j, std::int64_t x) { v[j] = x; }
};
// Where exclusive_scans writes each of its K sums (null: nowhere).
template <int K>
struct ScanOutputs {
  std::int64_t* out[K];
};

// exclusive_scans for one value: out[i] = sum over i' < i of f(i'); returns the total.
template <class Exec, class F>
DCPMLA_HD std::int64_t exclusive_scan(Exec& ex, std::int64_t n, F&& f, std::int64_t* out) {
  return ex
      .template exclusive_scans<1>(
          n, [&](std::int64_t i) { return Sums<1>{{f(i)}}; }, ScanOutputs<1>{{out}})
      .v[0];
}

// What the request step folds: the first fault, the longest local KV in blocks, the work items
// of the batch unsplit.
struct RequestFold {
  static constexpr int kWords = 3;
  std::uint64_t fault = kNoFault;
  std::int64_t longest = 0;
  std::int64_t tiles = 0;
  DCPMLA_HD static RequestFold combine(const RequestFold& a, const RequestFold& b) {
    return {a.fault < b.fault ? a.fault : b.fault, a.longest > b.longest ? a.longest : b.longest,
            a.tiles + b.tiles};
  }
  DCPMLA_HD std::int64_t word(int j) const {
    return j == 0 ? std::int64_t(fault) : j == 1 ? longest : tiles;
  }
  DCPMLA_HD void set_word(int j, std::int64_t x) {
    if (j == 0) fault = std::uint64_t(x);
    if (j == 1) longest = x;
    if (j == 2) tiles = x;
  }
};

// The last-wave cut (split_policy.cc's tail_cut, step by step). Where it cuts, writes every
// request's chunk to s.chunk (the cut ones' and `chunk` for the others) and returns true.
template <class Exec>
DCPMLA_HD bool tail_cut(Exec& ex, const DeviceBatchArgs& a, const Scratch& s, std::int64_t total,
                        std::int64_t chunk, std::int64_t min_chunk) {
  const std::int64_t B = a.num_requests, S = a.workers;
  if (total <= S || total > rules::kMaxTailWaves * S) return false;
  ex.parallel(B, [&](std::int64_t b) { s.keys[b] = rules::order_key(s.kv_blocks[b], b); });
  ex.sort(s.keys, B);
  auto request = [&](std::int64_t k) { return std::int64_t(s.keys[k] & 0xffffffffu); };
  exclusive_scan(
      ex, B, [&](std::int64_t k) { return s.tiles[request(k)]; }, s.position);
  const std::int64_t waves = rules::ceil_div(total, S);
  const std::int64_t tail_start = (waves - 1) * S;
  // The sorted request holding work item x (positions ascend).
  auto holder = [&](std::int64_t x) { return last_at_most(s.position, B, x); };
  auto walk = [&](std::int64_t b) { return s.kv_blocks[b] * a.block_size + rules::kFixedTokens; };
  // The first tail request holds the tail's first item, or is the one after a request ending at it.
  const std::int64_t first_tail = holder(tail_start);
  const std::int64_t parts = rules::min64(rules::kMaxTailParts, S / (total - tail_start));
  if (parts < 2) return false;
  auto cut_chunk = [&](std::int64_t b) {
    return rules::max64(min_chunk, rules::ceil_div(s.kv_blocks[b], parts));
  };
  auto cut_splits = [&](std::int64_t i) {
    const std::int64_t b = request(first_tail + i);
    const std::int64_t c = cut_chunk(b);
    return s.kv_blocks[b] <= c ? std::int64_t(1) : rules::ceil_div(s.kv_blocks[b], c);
  };
  // The estimate before the cut, the cut's split pairs and its extra work items, in one fold.
  const auto terms =
      ex.template reduce<Sums<3>>(rules::max64(waves, B - first_tail), [&](std::int64_t i) {
        Sums<3> t{{0, 0, 0}};
        if (i < waves) t.v[0] = walk(request(holder(i * S)));
        if (i < B - first_tail) {
          const std::int64_t n = cut_splits(i);
          const std::int64_t b = request(first_tail + i);
          t.v[1] = n > 1 ? n * s.q[b] * a.num_heads : 0;
          t.v[2] = (n - 1) * s.tiles[b];
        }
        return t;
      });
  const std::int64_t estimate = terms.v[0], split_pairs = terms.v[1], items = total + terms.v[2];
  if (!rules::within_limits(items, split_pairs, a.num_heads, a.max_work_items,
                            a.max_partial_rows)) {
    return false;
  }
  const std::int64_t split_milli = split_pairs * rules::kSplitPairMilli;
  const std::int64_t longest_tail = request(first_tail);
  const std::int64_t cut_walk =
      rules::min64(cut_chunk(longest_tail), s.kv_blocks[longest_tail]) * a.block_size +
      rules::kFixedTokens;
  const auto after = (unsigned __int128)(estimate - walk(longest_tail) + cut_walk) * rules::kMilli +
                     std::uint64_t(split_milli);
  const auto before = (unsigned __int128)(estimate)*rules::kMilli;
  if (after * 100 > before * rules::kTailGainPercent) return false;
  ex.parallel(B, [&](std::int64_t i) {
    const std::int64_t b = request(i);
    s.chunk[b] = i >= first_tail ? cut_chunk(b) : chunk;
  });
  return true;
}

template <class Exec>
DCPMLA_HD void plan_batch(Exec& ex, const DeviceBatchArgs& a, const ScheduleView& v,
                          const Scratch& s) {
  const std::int64_t B = a.num_requests, N = a.num_tokens, H = a.num_heads;
  if (B == 0 && a.query_start_loc[0] != 0) {
    return poison(ex, a, v, fault_word(0, ScheduleFault::first_start_not_zero));
  }
  // Meaningful only for a batch without faults (then 0 < real_rows <= N).
  const std::int64_t real_rows = a.query_start_loc[B];
  const std::int64_t padding = real_rows >= 0 && real_rows <= N ? N - real_rows : std::int64_t(0);

  // The rank's share of a length below 2^31 (every T is an int32) by a multiplier made once,
  // where W x I allows (rules::LocalLen), else by local_len.
  const bool share_by_multiplier = rules::LocalLen::fits(a.world, a.interleave);
  const rules::LocalLen local_share = share_by_multiplier
                                          ? rules::LocalLen(a.world, a.rank, a.interleave)
                                          : rules::LocalLen(1, 0, 1);
  auto local_len_of_any = [&](std::int64_t L) {
    return rules::local_len(L, a.world, a.rank, a.interleave);
  };
  // f(local_len_of): f given the fastest form of the rank's share that this sharding allows.
  auto with_local_len = [&](auto&& f) {
    if (share_by_multiplier) {
      f(local_share);
    } else {
      f(local_len_of_any);
    }
  };

  // Every request at once: its fault, its scratch and its rows' local bounds (written only where
  // its own rows lie inside the batch's rows, so a faulting batch writes nothing out of bounds),
  // and the padding rows' bounds.
  const RequestFold fold =
      ex.template reduce<RequestFold>(rules::max64(B, padding), [&](std::int64_t i) {
        if (i < padding) v.row_bound[real_rows + i] = 0;
        RequestFold r;
        if (i >= B) return r;
        const std::int64_t b = i;
        // Read once: the scratch and row-bound writes below could alias the batch for the
        // compiler, which would then read it again after each.
        const RequestInput in = request_input(a, b);
        r.fault = request_fault(a, b, in);
        if (r.fault != kNoFault) return r;
        const std::int64_t start = in.start;
        const std::int64_t Q = in.end - start, T = in.total;
        const std::int64_t local = rules::local_len(T, a.world, a.rank, a.interleave);
        s.q[b] = std::int32_t(Q);
        s.local[b] = std::int32_t(local);
        s.start[b] = std::int32_t(start);
        s.total[b] = std::int32_t(T);
        s.kv_blocks[b] = rules::ceil_div(local, a.block_size);
        s.tiles[b] = rules::tiles_per_split(Q, a.num_heads, a.tile_pairs);
        if (start >= 0 && start + Q <= N) {
          with_local_len([&](const auto& local_len_of) {
            for (std::int64_t j = 0; j < Q; ++j) {
              v.row_bound[start + j] =
                  std::int32_t(local_len_of(rules::causal_row_length(T, Q, j)));
            }
          });
        }
        r.longest = s.kv_blocks[b];
        r.tiles = s.tiles[b];
        return r;
      });
  if (fold.fault != kNoFault) return poison(ex, a, v, fold.fault);

  // The chunk of every request (split_policy.cc's choose_chunks).
  const std::int64_t longest = rules::max64(1, fold.longest);
  const std::int64_t min_chunk = rules::ceil_div(a.min_split_tokens, a.block_size);
  std::int64_t chunk = a.kv_chunk_blocks > 0 ? a.kv_chunk_blocks : longest;
  const bool choose = a.kv_chunk_blocks == 0 && a.workers > 0 && B > 0 && longest > min_chunk;
  bool cut = false;
  if (choose) {
    // next_candidate's sequence is the distinct values of split_chunk(n) for split counts n = 1 ..
    // 2 x workers (non-increasing, split_chunk(1) = longest): n gives a candidate where its chunk
    // is below n - 1's. Every split count k + 1 that gives one is costed (one segmented sum), then
    // the best cost is found and the first candidate within 2 % of it (two folds), in candidate
    // order, which is the order of k.
    auto split_chunk = [&](std::int64_t n) {
      return rules::max64(min_chunk, rules::ceil_div(longest, n));
    };
    // split_chunk(k + 1) < split_chunk(k): k's chunk c = ceil(longest / k) is above min_chunk
    // and longest / (k + 1) <= c - 1 (one division instead of two).
    auto starts_candidate = [&](std::int64_t k) {
      if (k == 0) return true;
      const std::int64_t c = rules::ceil_div(longest, k);
      return c > min_chunk && longest <= (c - 1) * (k + 1);
    };
    // Split counts 1 .. 2 x workers; past (longest - 1) / min_chunk + 1 every chunk is
    // min_chunk's and none starts a candidate, so the steps below stop there.
    const std::int64_t counts =
        min_chunk > 0 ? rules::min64(2 * std::int64_t(a.workers), (longest - 1) / min_chunk + 1)
                      : 2 * std::int64_t(a.workers);
    // A candidate's chunk divides every request's blocks: by a multiplier made once, where the
    // requests are enough to pay for making it (a 64-bit division on the host; on the GPU always,
    // so that the sum's loop has no branch).
    struct Chunk {
      std::int64_t blocks;
      rules::CeilDivider divider;  // of blocks where by_multiplier
    };
#ifdef __CUDA_ARCH__
    constexpr bool by_multiplier = true;
#else
    const bool by_multiplier = B >= 32;
#endif
    ex.segmented_sum(
        counts, B, starts_candidate,
        [&](std::int64_t k) {
          const std::int64_t c = split_chunk(k + 1);
          return Chunk{c, by_multiplier ? rules::CeilDivider(c) : rules::CeilDivider()};
        },
        [&](const Chunk& c, std::int64_t b) {
          const std::int64_t kv = s.kv_blocks[b];
          const std::int64_t n = kv <= c.blocks  ? 1
                                 : by_multiplier ? c.divider.ceil(kv)
                                                 : rules::ceil_div(kv, c.blocks);
          return rules::split_terms_of(n, s.tiles[b], s.q[b], H);
        },
        s.candidate_sums);
    // ~0 where k gives no candidate or breaks the limits (the unsplit one always counts, as in
    // split_policy.cc).
    constexpr std::uint64_t kOut = ~std::uint64_t(0);
    auto cost = [&](std::int64_t k) {
      if (!starts_candidate(k)) return kOut;
      const std::int64_t items = s.candidate_sums[2 * k], pairs = s.candidate_sums[2 * k + 1];
      const bool feasible = k == 0 || rules::within_limits(items, pairs, a.num_heads,
                                                           a.max_work_items, a.max_partial_rows);
      return feasible ? rules::chunk_cost(split_chunk(k + 1), longest, a.block_size, items, pairs,
                                          a.workers)
                      : kOut;
    };
    const std::uint64_t best = ex.min_u64(counts, [&](std::int64_t k) {
      s.costs[k] = cost(k);
      return s.costs[k];
    });
    const std::uint64_t first = ex.min_u64(counts, [&](std::int64_t k) {
      const std::uint64_t c = s.costs[k];
      return c != kOut && c * 100 <= best * rules::kTolerancePercent ? std::uint64_t(k) : kOut;
    });
    chunk = split_chunk(std::int64_t(first) + 1);
    if (chunk >= longest) cut = tail_cut(ex, a, s, fold.tiles, chunk, min_chunk);
  }
  auto chunk_of = [&](std::int64_t b) { return cut ? s.chunk[b] : chunk; };
  auto splits = [&](std::int64_t b) {
    return rules::splits_of(s.local[b], chunk_of(b) * a.block_size);
  };

  // Splits, partial rows, merge rows and work items of every request, in request order.
  const ScanOutputs<4> scan_out{{s.split_first, s.partial_first, s.merge_first, nullptr}};
  const Sums<4> totals = ex.template exclusive_scans<4>(
      B,
      [&](std::int64_t b) {
        const std::int64_t n = splits(b), Q = s.q[b];
        return Sums<4>{{n, n > 1 ? n * Q : 0, n > 1 ? Q : 0, n * s.tiles[b]}};
      },
      scan_out);
  const std::int64_t num_splits = totals.v[0], partial_rows = totals.v[1];
  const std::int64_t merge_rows = totals.v[2], items = totals.v[3];
  if (items > a.work_items || num_splits > kMaxSortKeys) {
    return poison(ex, a, v, fault_word(-1, ScheduleFault::work_over_capacity));
  }
  if (merge_rows > a.merge_rows) {
    return poison(ex, a, v, fault_word(-1, ScheduleFault::merges_over_capacity));
  }
  if (partial_rows > a.partial_rows) {
    return poison(ex, a, v, fault_word(-1, ScheduleFault::partials_over_capacity));
  }

  // Split keys (walk descending, then split index) and the merge rows; the most splits.
  // A request's split count, from the scan (no division).
  auto scanned_splits = [&](std::int64_t b) {
    return (b + 1 < B ? s.split_first[b + 1] : num_splits) - s.split_first[b];
  };
  // 2^g threads a request where threads are to spare (a small batch; one on the CPU): each
  // writes every 2^g-th split and merge row of its request, so a request of many splits is not
  // one thread's loop.
  auto spread_log2 = [&](std::int64_t count) {
    int g = 0;
    while (count > 0 && (count << (g + 1)) <= ex.threads()) ++g;
    return g;
  };
  const int request_log2 = spread_log2(B);
  const std::int64_t max_splits = rules::max64(1, ex.max(B << request_log2, [&](std::int64_t t) {
    const std::int64_t b = t >> request_log2, first = t & ((1 << request_log2) - 1);
    const std::int64_t stride = std::int64_t(1) << request_log2;
    const std::int64_t n = scanned_splits(b), Q = s.q[b], start = s.start[b];
    const std::int64_t chunk_tokens = chunk_of(b) * a.block_size;
    for (std::int64_t i = first; i < n; i += stride) {
      const auto begin = std::int32_t(i * chunk_tokens);
      const auto end = std::int32_t(rules::min64(s.local[b], (i + 1) * chunk_tokens));
      // The split's last row sees all T: its local bound is the request's local length.
      const std::int32_t visible = rules::clamp_visible(s.local[b], begin, end);
      s.keys[s.split_first[b] + i] =
          rules::order_key(rules::walk_tiles(begin, visible), s.split_first[b] + i);
      s.split_request[s.split_first[b] + i] = std::int32_t(b);
    }
    if (n > 1) {
      for (std::int64_t j = first; j < Q; j += stride) {
        v.merge_rows[s.merge_first[b] + j] = {std::int32_t(start + j),
                                              std::int32_t(s.partial_first[b] + j), std::int32_t(n),
                                              std::int32_t(Q)};
      }
    }
    return n;
  }));
  ex.sort(s.keys, num_splits);

  auto sorted_index = [&](std::int64_t k) { return std::int64_t(s.keys[k] & 0xffffffffu); };
  exclusive_scan(
      ex, num_splits, [&](std::int64_t k) { return s.tiles[s.split_request[sorted_index(k)]]; },
      s.item_first);
  // Work items. A split's values, read once, and the item of pairs [pb, pb + np) of it.
  struct SplitView {
    std::int64_t b, Q, start, T;
    std::int32_t pairs, step;  // a request's pairs fit 31 bits (make_plan checks Q x H)
    std::int32_t begin, end, partial;
  };
  // The split of request-order index `index`.
  auto split_view = [&](std::int64_t index) {
    const std::int64_t b = s.split_request[index], i = index - s.split_first[b];
    const std::int64_t Q = s.q[b], chunk_tokens = chunk_of(b) * a.block_size;
    const auto pairs = std::int32_t(Q * H);
    return SplitView{b,
                     Q,
                     s.start[b],
                     s.total[b],
                     pairs,
                     rules::tile_step(pairs, s.tiles[b], a.tile_pairs),
                     std::int32_t(i * chunk_tokens),
                     std::int32_t(rules::min64(s.local[b], (i + 1) * chunk_tokens)),
                     scanned_splits(b) > 1 ? std::int32_t(s.partial_first[b] + i * Q) : -1};
  };
  // row_of(p): the row of pair p, p / H; local_len_of(L): the rank's share of L < 2^31.
  auto write_item = [&](const SplitView& sv, std::int32_t x, std::int64_t item, const auto& row_of,
                        const auto& local_len_of) {
    const std::int32_t pb = x * sv.step;
    const std::int32_t np = sv.step < sv.pairs - pb ? sv.step : sv.pairs - pb;
    // The bound of the item's last row, from the rules (the schedule's copy is in global memory
    // that an earlier step wrote).
    const std::int64_t last_row = row_of(pb + np - 1);
    const auto last_bound =
        std::int32_t(local_len_of(rules::causal_row_length(sv.T, sv.Q, last_row)));
    store_item(&v.items[item],
               {std::int32_t(sv.b), std::int32_t(sv.start), pb, np, sv.begin, sv.end,
                rules::clamp_visible(last_bound, sv.begin, sv.end), sv.partial});
  };
  // With threads to spare (few splits: a small batch), 2^group_log2 threads a split, each
  // writing every 2^group_log2-th item of it; otherwise one thread an item, which reads its split
  // and its place in it from a map that a thread a split writes first (a search of item_first
  // was a quarter of the GPU planner's time at 256 requests).
  const int group_log2 = spread_log2(num_splits);
  if (group_log2 > 0) {
    const std::int64_t group = std::int64_t(1) << group_log2;
    auto row_of = [&](std::int32_t p) { return std::int64_t(std::uint32_t(p) / std::uint32_t(H)); };
    with_local_len([&](const auto& local_len_of) {
      ex.parallel(num_splits << group_log2, [&](std::int64_t t) {
        const std::int64_t k = t >> group_log2;
        const SplitView sv = split_view(sorted_index(k));
        const std::int64_t count = s.tiles[sv.b];
        for (std::int64_t x = t & (group - 1); x < count; x += group) {
          write_item(sv, std::int32_t(x), s.item_first[k] + x, row_of, local_len_of);
        }
      });
    });
  } else {
    ex.parallel(num_splits, [&](std::int64_t k) {
      const std::int64_t first = s.item_first[k];
      const std::int64_t count = (k + 1 < num_splits ? s.item_first[k + 1] : items) - first;
      const std::uint64_t index = std::uint64_t(sorted_index(k)) << 32;
      for (std::int64_t x = 0; x < count; ++x) s.item_split[first + x] = index | std::uint64_t(x);
    });
    // Many items: multipliers of H and of the sharding, made once, instead of divisions (and a
    // branch) an item, so that the items' loop body is one block whose iterations overlap.
    const rules::CeilDivider heads(H);
    auto row_of = [&](std::int32_t p) { return heads.floor(p); };
    with_local_len([&](const auto& local_len_of) {
      ex.parallel(items, [&](std::int64_t x) {
        const std::uint64_t e = s.item_split[x];
        write_item(split_view(std::int64_t(e >> 32)), std::int32_t(e & 0xffffffffu), x, row_of,
                   local_len_of);
      });
    });
  }
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
