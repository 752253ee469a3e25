// The GPU planner: core/device_planner.h's steps run by one thread block (256, 512 or 1024
// threads), with block-wide reductions, scans and a bitonic sort in shared memory. One launch
// writes a whole schedule (or its fault), so a captured graph can plan and decode batches whose
// lengths exist only on the device. The steps are short and each waits for the one before, so the
// planner's time is latency: its scratch lives in shared memory wherever it fits (the schedule's
// own scratch in global memory serves larger capacities), and the sort's stages within a warp use
// shuffles instead of barriers.
#include <algorithm>
#include <cstdint>

#include "core/device_planner.h"
#include "cuda/kernels.h"
#include "gpu/check.h"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

#ifdef DCPMLA_PLAN_STAMPS
// [count] (SM clock << 8) | step kind, of the last launch (one block): kept in shared memory
// while the planner runs (a global counter would put a load's latency on every stamp), copied
// out at its end.
__device__ std::uint64_t plan_stamps[kMaxPlanStamps];
__device__ int plan_stamp_count;
__shared__ std::uint64_t plan_stamps_running[kMaxPlanStamps];
__shared__ int plan_stamps_recorded;

__device__ void record_plan_stamp(char kind) {
  if (threadIdx.x == 0 && plan_stamps_recorded < kMaxPlanStamps) {
    plan_stamps_running[plan_stamps_recorded++] =
        (std::uint64_t(clock64()) << 8) | std::uint8_t(kind);
  }
}
#endif

// Reductions and scans meet at one barrier each: the warps' values go to one of two slot sets
// that alternate, and every warp combines them itself (lane l reads warp l % kWarps's slot). A set
// is written again two reductions later, after every thread has passed the next reduction's
// barrier, so after it has read it.
//
// Every phase costs each warp its loop control and reductions whatever the batch, and a scheduler
// issues one instruction a cycle: a block sized for the batch (plan_threads) plans small batches
// several times sooner than 1024 threads. Nsight Compute at 256 requests (H200, 2026-12-03): ~65K
// warp instructions at 0.84 a cycle, so the planner's time is its instruction count over few
// warps; a 64-bit division or a loop a thread walks alone shows at once.
template <int kThreads>
struct GpuExecutor {
  static constexpr int kWarps = kThreads / 32;
  static_assert(kWarps >= 1 && kWarps <= 32 && (kWarps & (kWarps - 1)) == 0);
  // 64-bit words a reduction or scan carries at most.
  static constexpr int kMaxWords = 4;
  std::int64_t* partial;  // shared [2 * kMaxWords * kWarps]
  std::uint64_t* sorted;  // shared [sort_capacity]
  std::int64_t sort_capacity;
  int slot_set = 0;

  __device__ std::int64_t* next_slots() {
    std::int64_t* slots = partial + slot_set * kMaxWords * kWarps;
    slot_set ^= 1;
    return slots;
  }

  // Every step ends here. With DCPMLA_PLAN_STAMPS thread 0 records the SM clock and the kind of
  // step after each barrier (plan_stamps), to see where the planner's time goes.
  __device__ static void barrier([[maybe_unused]] char kind) {
    __syncthreads();
#ifdef DCPMLA_PLAN_STAMPS
    record_plan_stamp(kind);
#endif
  }

  __device__ static std::int64_t tid() {
    return threadIdx.x;
  }
  __device__ static std::int64_t threads() {
    return kThreads;
  }

  // Unrolled: independent indices overlap their loads (a work item's search of item_first).
  template <class F>
  __device__ void parallel(std::int64_t n, F&& f) {
#pragma unroll 4
    for (std::int64_t i = tid(); i < n; i += kThreads) f(i);
    barrier('p');
  }
  template <class F>
  __device__ void serial(F&& f) {
    if (threadIdx.x == 0) f();
    barrier('s');
  }
  // Block-wide fold of one 64-bit value per thread with op; every thread gets the result.
  template <class T, class Op>
  __device__ T fold(T v, Op op) {
    static_assert(sizeof(T) == sizeof(std::int64_t));
    for (int o = 16; o > 0; o /= 2) v = op(v, T(__shfl_xor_sync(0xffffffffu, v, o)));
    auto* slots = reinterpret_cast<T*>(next_slots());
    if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
    barrier('f');
    T w = slots[threadIdx.x % kWarps];
    for (int o = kWarps / 2; o > 0; o /= 2) w = op(w, T(__shfl_xor_sync(0xffffffffu, w, o)));
    return w;
  }
  // The same for a value of R::kWords words combined by R::combine.
  template <class R>
  __device__ static R shfl_xor_words(const R& v, int mask) {
    R r;
#pragma unroll
    for (int j = 0; j < R::kWords; ++j) {
      r.set_word(j, __shfl_xor_sync(0xffffffffu, (long long)v.word(j), mask));
    }
    return r;
  }
  template <class R, class F>
  __device__ R reduce(std::int64_t n, F&& f) {
    static_assert(R::kWords <= kMaxWords);
    R v{};
    for (std::int64_t i = tid(); i < n; i += kThreads) v = R::combine(v, f(i));
    for (int o = 16; o > 0; o /= 2) v = R::combine(v, shfl_xor_words(v, o));
    std::int64_t* slots = next_slots();
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int j = 0; j < R::kWords; ++j) slots[j * kWarps + threadIdx.x / 32] = v.word(j);
    }
    barrier('r');
    R w;
#pragma unroll
    for (int j = 0; j < R::kWords; ++j) w.set_word(j, slots[j * kWarps + threadIdx.x % kWarps]);
    for (int o = kWarps / 2; o > 0; o /= 2) w = R::combine(w, shfl_xor_words(w, o));
    return w;
  }
  template <class F>
  __device__ std::int64_t sum(std::int64_t n, F&& f) {
    std::int64_t v = 0;
    for (std::int64_t i = tid(); i < n; i += kThreads) v += f(i);
    return fold(v, [](std::int64_t a, std::int64_t b) { return a + b; });
  }
  template <class F>
  __device__ std::int64_t max(std::int64_t n, F&& f) {
    std::int64_t v = INT64_MIN;
    for (std::int64_t i = tid(); i < n; i += kThreads) v = rules::max64(v, f(i));
    return fold(v, [](std::int64_t a, std::int64_t b) { return a > b ? a : b; });
  }
  template <class F>
  __device__ std::uint64_t min_u64(std::int64_t n, F&& f) {
    std::uint64_t v = ~std::uint64_t(0);
    for (std::int64_t i = tid(); i < n; i += kThreads) {
      const std::uint64_t x = f(i);
      v = x < v ? x : v;
    }
    return fold(v, [](std::uint64_t a, std::uint64_t b) { return a < b ? a : b; });
  }
  // A batch of at most kThreadSumRequests requests: a thread a segment sums them itself (no
  // shuffles, every active segment at once). Else, where there are at least as many segments as
  // warps, warp w takes segments w, w + kWarps, ...: its lanes test 32 of them for activity at
  // once and the warp sums the active ones, one at a time, writing the sums itself. Otherwise
  // several warps take each segment, adding their parts to out atomically.
  static constexpr std::int64_t kThreadSumRequests = 8;
  template <class Active, class Setup, class F>
  __device__ void segmented_sum(std::int64_t m, std::int64_t n, Active&& active, Setup&& setup,
                                F&& f, std::int64_t* out) {
    if (n <= kThreadSumRequests) {
      for (std::int64_t k = tid(); k < m; k += kThreads) {
        if (active(k)) planner::sum_segment_alone(k, n, setup, f, out);
      }
      barrier('g');
      return;
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    auto sum_segment = [&](std::int64_t k, std::int64_t first, std::int64_t stride) {
      const auto context = setup(k);
      std::int64_t a = 0, b = 0;
#pragma unroll 4
      for (std::int64_t i = first; i < n; i += stride) {
        const auto t = f(context, i);
        a += t.work_items;
        b += t.split_pairs;
      }
      for (int o = 16; o > 0; o /= 2) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
      }
      return rules::SplitTerms{a, b};
    };
    if (m >= kWarps) {
      for (std::int64_t base = warp; base < m; base += 32 * kWarps) {
        const std::int64_t mine = base + std::int64_t(lane) * kWarps;
        unsigned todo = __ballot_sync(0xffffffffu, mine < m && active(mine));
        while (todo != 0) {
          const int l = __ffs(todo) - 1;
          todo &= todo - 1;
          const std::int64_t k = base + std::int64_t(l) * kWarps;
          const rules::SplitTerms t = sum_segment(k, lane, 32);
          if (lane == 0) out[2 * k] = t.work_items, out[2 * k + 1] = t.split_pairs;
        }
      }
      barrier('g');
      return;
    }
    const std::int64_t warps_per_segment = kWarps / m;
    for (std::int64_t k = threadIdx.x; k < 2 * m; k += kThreads) out[k] = 0;
    barrier('g');
    const std::int64_t k = warp / warps_per_segment, part = warp % warps_per_segment;
    if (k < m && active(k)) {
      const rules::SplitTerms t = sum_segment(k, part * 32 + lane, 32 * warps_per_segment);
      if (lane == 0) {
        atomicAdd(reinterpret_cast<unsigned long long*>(&out[2 * k]),
                  (unsigned long long)t.work_items);
        atomicAdd(reinterpret_cast<unsigned long long*>(&out[2 * k + 1]),
                  (unsigned long long)t.split_pairs);
      }
    }
    barrier('g');
  }
  // Chunks of kThreads: a warp scan of the K values, then every warp scans the warps' totals
  // itself (lanes past kWarps scan copies that no lane reads).
  template <int K, class F>
  __device__ planner::Sums<K> exclusive_scans(std::int64_t n, F&& f,
                                              const planner::ScanOutputs<K>& out) {
    static_assert(K <= kMaxWords);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    auto inclusive_warp_scan = [&](std::int64_t v) {
      for (int o = 1; o < 32; o *= 2) {
        const std::int64_t y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
      }
      return v;
    };
    planner::Sums<K> carry{};
    for (std::int64_t base = 0; base < n; base += kThreads) {
      const std::int64_t i = base + threadIdx.x;
      const planner::Sums<K> x = i < n ? f(i) : planner::Sums<K>{};
      std::int64_t incl[K];
#pragma unroll
      for (int j = 0; j < K; ++j) incl[j] = inclusive_warp_scan(x.v[j]);
      std::int64_t* slots = next_slots();
      if (lane == 31) {
#pragma unroll
        for (int j = 0; j < K; ++j) slots[j * kWarps + warp] = incl[j];
      }
      barrier('x');
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const std::int64_t total = slots[j * kWarps + lane % kWarps];
        const std::int64_t totals = inclusive_warp_scan(total);
        const std::int64_t before = __shfl_sync(0xffffffffu, totals - total, warp);
        if (i < n && out.out[j] != nullptr) {
          out.out[j][i] = carry.v[j] + before + incl[j] - x.v[j];
        }
        carry.v[j] += __shfl_sync(0xffffffffu, totals, kWarps - 1);
      }
    }
    // The outputs are read by other threads in the next step.
    barrier('x');
    return carry;
  }
  // At most kMaxRuns warps' worth of keys (a key a thread): each warp sorts its 32 keys in
  // registers (shuffles), then a key's place is its place in its warp's run plus the keys below
  // it in every other run (a binary search of each; the keys are distinct). Three barriers
  // instead of the bitonic sort's one a stage (11 for 256 keys).
  static constexpr int kMaxRuns = 8;
  __device__ void run_sort(std::uint64_t* keys, std::int64_t n) {
    const int i = threadIdx.x, lane = i % 32;
    // Padding sorts last: a key's high word is at most 0x7fffffff (rules::order_key).
    std::uint64_t v = i < n ? keys[i] : ~std::uint64_t(0);
    for (int k = 2; k <= 32; k *= 2) {
      for (int j = k / 2; j > 0; j /= 2) {
        const std::uint64_t other = __shfl_xor_sync(0xffffffffu, v, j);
        const bool ascending = (lane & k) == 0 || k == 32;
        v = ((lane & j) == 0) == ascending ? (v < other ? v : other) : (v < other ? other : v);
      }
    }
    if (i < n) keys[i] = v;
    barrier('o');
    // One run (a small batch's splits): warp 0's keys are in place already.
    if (n <= 32) return;
    // Every run's binary search at once, a step of each in turn: the loads of one step are
    // independent, so they overlap (a search at a time waited for each load in turn). Own run
    // included: v's place in it is its lane, which the search gives as well.
    int below[kMaxRuns];
#pragma unroll
    for (int r = 0; r < kMaxRuns; ++r) below[r] = 0;
#pragma unroll
    for (int step = 32; step > 0; step /= 2) {
#pragma unroll
      for (int r = 0; r < kMaxRuns; ++r) {
        const int len = int(rules::min64(rules::max64(n - 32 * r, 0), 32));
        const bool inside = below[r] + step <= len;
        const std::uint64_t key = keys[inside ? 32 * r + below[r] + step - 1 : 0];
        below[r] += inside && key < v ? step : 0;
      }
    }
    int place = 0;
#pragma unroll
    for (int r = 0; r < kMaxRuns; ++r) place += below[r];
    barrier('o');
    if (i < n) keys[place] = v;
    barrier('o');
  }
  // Bitonic sort of keys[0, n), padded to a power of two with the largest key: in place when
  // the keys are in shared memory (room for the padding: sort_capacity), else through `sorted`.
  // Partners closer than a warp (j < 32) exchange through shuffles: one barrier per merge level
  // for those stages instead of one per stage.
  __device__ void sort(std::uint64_t* keys, std::int64_t n) {
    if (n <= 32 * kMaxRuns) return run_sort(keys, n);
    std::int64_t size = 1;
    while (size < n) size *= 2;
    const bool in_place = __isShared(keys);
    std::uint64_t* buf = in_place ? keys : sorted;
    for (std::int64_t i = tid(); i < size; i += kThreads) {
      if (i >= n) {
        buf[i] = ~std::uint64_t(0);
      } else if (!in_place) {
        buf[i] = keys[i];
      }
    }
    barrier('o');
    // Partners within a warp (j < 32) exchange through shuffles in registers: the merge levels
    // k <= 32 in one pass, then one pass a level for j < 32 after the stages through memory.
    // Below a warp's width the shuffles would leave lanes idle in a partial warp: all in memory.
    auto in_warp = [&](std::int64_t k_first, std::int64_t k_last) {
      for (std::int64_t i = tid(); i < size; i += kThreads) {
        std::uint64_t v = buf[i];
        for (std::int64_t k = k_first; k <= k_last; k *= 2) {
          const bool ascending = (i & k) == 0;
          for (int j = int(k / 2 < 16 ? k / 2 : 16); j > 0; j /= 2) {
            const std::uint64_t other = __shfl_xor_sync(0xffffffffu, v, j);
            const bool lower = (i & j) == 0;  // the lower index keeps the smaller when ascending
            v = (lower == ascending) == (v < other) ? v : other;
          }
        }
        buf[i] = v;
      }
      barrier('o');
    };
    if (size >= 32) in_warp(2, 32);
    for (std::int64_t k = size >= 32 ? 64 : 2; k <= size; k *= 2) {
      for (std::int64_t j = k / 2; j >= (size >= 32 ? 32 : 1); j /= 2) {
        for (std::int64_t i = tid(); i < size; i += kThreads) {
          const std::int64_t partner = i ^ j;
          if (partner > i) {
            const bool ascending = (i & k) == 0;
            const std::uint64_t a = buf[i], b = buf[partner];
            if ((a > b) == ascending) buf[i] = b, buf[partner] = a;
          }
        }
        barrier('o');
      }
      // size is a power of two >= 32 here: whole warps take part.
      if (size >= 32) in_warp(k, k);
    }
    if (!in_place) {
      for (std::int64_t i = tid(); i < n; i += kThreads) keys[i] = buf[i];
      barrier('o');
    }
  }
};

struct PlanParams {
  planner::DeviceBatchArgs batch;
  ScheduleView view;
  planner::Scratch scratch;
  std::int64_t sort_capacity;
  bool smem_scratch;                                  // plans_in_shared_memory
  std::int64_t requests, work_items, max_candidates;  // the shared-memory scratch's shape
};

// Dynamic shared memory of the planner (the opt-in maximum of sm_90 is 227 KiB a block).
constexpr std::uint32_t kMaxSmem = 200 * 1024;
static_assert(planner::kMaxSortKeys * sizeof(std::uint64_t) <= kMaxSmem);

// The scratch in shared memory (kSharedScratch) or the schedule's (then `sorted` holds the sort).
// The two are separate kernels so that the compiler knows the shared scratch's address space:
// its reads and writes are then shared-memory instructions, which it may reorder around the
// schedule's stores in global memory (through a generic pointer it may not, and a work item's
// scratch reads waited for the item before it).
// One block a launch: said explicitly, else ptxas held the 256-thread form to 64 registers and
// spilled.
template <int kThreads, bool kSharedScratch>
__global__ void __launch_bounds__(kThreads, 1) plan_kernel(const PlanParams p) {
  extern __shared__ std::uint64_t smem[];
  __shared__ std::int64_t
      partial[2 * GpuExecutor<kThreads>::kMaxWords * GpuExecutor<kThreads>::kWarps];
#ifdef DCPMLA_PLAN_STAMPS
  if (threadIdx.x == 0) plan_stamps_recorded = 0;
  record_plan_stamp('b');
#endif
  GpuExecutor<kThreads> ex{partial, smem, p.sort_capacity};
  if constexpr (kSharedScratch) {
    const planner::Scratch scratch = planner::scratch_view(
        reinterpret_cast<std::byte*>(smem), p.requests, p.work_items, p.max_candidates);
    planner::plan_batch(ex, p.batch, p.view, scratch);
  } else {
    planner::plan_batch(ex, p.batch, p.view, p.scratch);
  }
#ifdef DCPMLA_PLAN_STAMPS
  __syncthreads();
  record_plan_stamp('e');
  if (threadIdx.x == 0) {
    for (int i = 0; i < plan_stamps_recorded; ++i) plan_stamps[i] = plan_stamps_running[i];
    plan_stamp_count = plan_stamps_recorded;
  }
#endif
}

template <int kThreads>
void launch_planner(const PlanParams& p, cudaStream_t s) {
  if (p.smem_scratch) {
    gpu::launch_with_shared_memory<plan_kernel<kThreads, true>>(1, kThreads, kMaxSmem, p, s,
                                                                "plan_kernel");
  } else {
    gpu::launch_with_shared_memory<plan_kernel<kThreads, false>>(1, kThreads, kMaxSmem, p, s,
                                                                 "plan_kernel");
  }
}

// Threads of the planner's block for a capacity. Measured on one H200 (W 8, H 128, B ragged
// requests of Q 1..8, T up to 32K; us for B = 1 / 256 / 1024): 128 threads 22.8 / 51.9 / 255,
// 256 threads 19.2 / 33.3 / 159, 512 threads 20.1 / 33.0 / 123, 1024 threads 27.7 / 43.8 / 110
// (2026-12-03). After the planner's later changes (4555057, 2026-12-04, a call in a graph):
// B 512 43.0 us with 256 threads, 32.9 with 512; B 256 17.4 with 256, 18.7 with 512.
int plan_threads(const ScheduleCapacity& c) {
  return c.requests <= 256 ? 256 : c.requests <= 512 ? 512 : 1024;
}

std::int64_t max_candidates(const Schedule& schedule) {
  return std::max<std::int64_t>(1, 2 * schedule.config().model.workers);
}

}  // namespace

#ifdef DCPMLA_PLAN_STAMPS
std::vector<PlanStamp> read_plan_stamps(cudaStream_t s) {
  int count = 0;
  std::uint64_t raw[kMaxPlanStamps];
  gpu::check(cudaStreamSynchronize(s), "read_plan_stamps: stream");
  gpu::check(cudaMemcpyFromSymbol(&count, plan_stamp_count, sizeof count), "plan_stamp_count");
  gpu::check(cudaMemcpyFromSymbol(raw, plan_stamps, sizeof raw), "plan_stamps");
  std::vector<PlanStamp> out;
  for (int i = 0; i < count; ++i) out.push_back({char(raw[i] & 0xff), raw[i] >> 8});
  return out;
}
#endif

bool plans_in_shared_memory(const Schedule& schedule) {
  const ScheduleCapacity& c = schedule.capacity();
  return planner::scratch_bytes(c.requests, c.work_items, max_candidates(schedule)) <= kMaxSmem;
}

void plan_on_device(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens,
                    cudaStream_t s) {
  const ScheduleCapacity& c = schedule.capacity();
  const ScheduleView v = schedule_view(schedule.memory(), c);
  const planner::Scratch scratch = planner::scratch_view(v.scratch, c.requests, c.work_items);
  const PlanParams p{planner::device_batch_args(schedule, batch, num_tokens),
                     v,
                     scratch,
                     planner::sort_capacity(c.requests, c.work_items),
                     plans_in_shared_memory(schedule),
                     c.requests,
                     c.work_items,
                     max_candidates(schedule)};
  // One size for every launch (the attribute is set once): the most any form uses.
  switch (plan_threads(c)) {
    case 256:
      launch_planner<256>(p, s);
      break;
    case 512:
      launch_planner<512>(p, s);
      break;
    default:
      launch_planner<1024>(p, s);
  }
}

}  // namespace dcpmla::cuda
