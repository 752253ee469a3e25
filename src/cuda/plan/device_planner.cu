// The GPU planner: core/device_planner.h's steps run by one thread block of 1024 threads, with
// block-wide reductions, scans and a bitonic sort in shared memory. One launch writes a whole
// schedule (or its fault), so a captured graph can plan and decode batches whose lengths exist
// only on the device.
#include <cstdint>

#include "core/device_planner.h"
#include "cuda/kernels.h"
#include "gpu/check.h"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct GpuExecutor {
  std::int64_t* partial;  // shared [kWarps + 1]
  std::uint64_t* sorted;  // shared [sort_capacity]
  std::int64_t sort_capacity;

  __device__ static std::int64_t tid() { return threadIdx.x; }

  template <class F>
  __device__ void parallel(std::int64_t n, F&& f) {
    for (std::int64_t i = tid(); i < n; i += kThreads) f(i);
    __syncthreads();
  }
  template <class F>
  __device__ void serial(F&& f) {
    if (threadIdx.x == 0) f();
    __syncthreads();
  }
  // Block-wide fold of one value per thread with op; every thread gets the result.
  template <class T, class Op>
  __device__ T fold(T v, Op op) {
    for (int o = 16; o > 0; o /= 2) v = op(v, T(__shfl_xor_sync(0xffffffffu, v, o)));
    auto* slots = reinterpret_cast<T*>(partial);
    if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
      T w = slots[threadIdx.x];
      for (int o = 16; o > 0; o /= 2) w = op(w, T(__shfl_xor_sync(0xffffffffu, w, o)));
      if (threadIdx.x == 0) slots[kWarps] = w;
    }
    __syncthreads();
    const T result = slots[kWarps];
    __syncthreads();
    return result;
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
  // A warp per segment k, its lanes over i.
  template <class F>
  __device__ void segmented_sum(std::int64_t m, std::int64_t n, F&& f, std::int64_t* out) {
    const int lane = threadIdx.x % 32;
    for (std::int64_t k = threadIdx.x / 32; k < m; k += kWarps) {
      std::int64_t a = 0, b = 0;
      for (std::int64_t i = lane; i < n; i += 32) {
        const auto t = f(k, i);
        a += t.work_items;
        b += t.split_pairs;
      }
      for (int o = 16; o > 0; o /= 2) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
      }
      if (lane == 0) out[2 * k] = a, out[2 * k + 1] = b;
    }
    __syncthreads();
  }
  // Chunks of kThreads: a warp scan, the warps' totals scanned by warp 0, plus the carry.
  template <class F>
  __device__ std::int64_t exclusive_scan(std::int64_t n, F&& f, std::int64_t* out) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    std::int64_t carry = 0;
    for (std::int64_t base = 0; base < n; base += kThreads) {
      const std::int64_t i = base + threadIdx.x;
      const std::int64_t x = i < n ? f(i) : 0;
      std::int64_t incl = x;
      for (int o = 1; o < 32; o *= 2) {
        const std::int64_t y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      if (lane == 31) partial[warp] = incl;
      __syncthreads();
      if (warp == 0) {
        const std::int64_t total = partial[lane];
        std::int64_t scan = total;
        for (int o = 1; o < 32; o *= 2) {
          const std::int64_t y = __shfl_up_sync(0xffffffffu, scan, o);
          if (lane >= o) scan += y;
        }
        partial[lane] = scan - total;  // exclusive over warps
        if (lane == 31) partial[kWarps] = scan;
      }
      __syncthreads();
      if (i < n) out[i] = carry + partial[warp] + incl - x;
      carry += partial[kWarps];
      __syncthreads();
    }
    return carry;
  }
  // Bitonic sort of keys[0, n) in shared memory, padded to a power of two with the largest key.
  __device__ void sort(std::uint64_t* keys, std::int64_t n) {
    std::int64_t size = 1;
    while (size < n) size *= 2;
    for (std::int64_t i = tid(); i < size; i += kThreads) {
      sorted[i] = i < n ? keys[i] : ~std::uint64_t(0);
    }
    __syncthreads();
    for (std::int64_t k = 2; k <= size; k *= 2) {
      for (std::int64_t j = k / 2; j > 0; j /= 2) {
        for (std::int64_t i = tid(); i < size; i += kThreads) {
          const std::int64_t partner = i ^ j;
          if (partner > i) {
            const bool ascending = (i & k) == 0;
            const std::uint64_t a = sorted[i], b = sorted[partner];
            if ((a > b) == ascending) sorted[i] = b, sorted[partner] = a;
          }
        }
        __syncthreads();
      }
    }
    for (std::int64_t i = tid(); i < n; i += kThreads) keys[i] = sorted[i];
    __syncthreads();
  }
};

struct PlanParams {
  planner::DeviceBatchArgs batch;
  ScheduleView view;
  planner::Scratch scratch;
  std::int64_t sort_capacity;
};

__global__ void __launch_bounds__(kThreads) plan_kernel(const PlanParams p) {
  extern __shared__ std::uint64_t sorted[];
  __shared__ std::int64_t partial[kWarps + 1];
  GpuExecutor ex{partial, sorted, p.sort_capacity};
  planner::plan_batch(ex, p.batch, p.view, p.scratch);
}

}  // namespace

void plan_on_device(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens,
                    cudaStream_t s) {
  const ScheduleCapacity& c = schedule.capacity();
  const ScheduleView v = schedule_view(schedule.memory(), c);
  const planner::Scratch scratch = planner::scratch_view(v.scratch, c.requests, c.work_items);
  const std::int64_t sort_capacity = planner::sort_capacity(c.requests, c.work_items);
  const PlanParams p{planner::device_batch_args(schedule, batch, num_tokens), v, scratch,
                     sort_capacity};
  // The most any schedule asks for (Schedule::plan_on_device bounds its capacity), set once.
  constexpr auto kMaxSmem = std::uint32_t(planner::kMaxSortKeys * sizeof(std::uint64_t));
  gpu::launch_with_shared_memory<plan_kernel>(1, kThreads, kMaxSmem, p, s, "plan_kernel");
}

}  // namespace dcpmla::cuda
