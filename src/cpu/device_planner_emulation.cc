#include "device_planner_emulation.h"

#include <algorithm>
#include <limits>

#include "core/device_planner.h"

namespace dcpmla::cpu {
namespace {

// One thread doing every thread's part. parallel() walks its range backwards: a step that
// depended on the order of its indices would come out different from make_plan here. It tells
// the steps it has as many threads as the GPU's block for small batches, so that they take the
// same forms as there.
struct SerialExecutor {
  static std::int64_t threads() { return 256; }
  template <class F>
  void parallel(std::int64_t n, F&& f) {
    for (std::int64_t i = n - 1; i >= 0; --i) f(i);
  }
  template <class F>
  void serial(F&& f) {
    f();
  }
  template <class R, class F>
  R reduce(std::int64_t n, F&& f) {
    R r{};
    for (std::int64_t i = 0; i < n; ++i) r = R::combine(r, f(i));
    return r;
  }
  template <class F>
  std::int64_t sum(std::int64_t n, F&& f) {
    std::int64_t total = 0;
    for (std::int64_t i = 0; i < n; ++i) total += f(i);
    return total;
  }
  template <class F>
  std::int64_t max(std::int64_t n, F&& f) {
    std::int64_t m = std::numeric_limits<std::int64_t>::min();
    for (std::int64_t i = 0; i < n; ++i) m = std::max<std::int64_t>(m, f(i));
    return m;
  }
  template <class F>
  std::uint64_t min_u64(std::int64_t n, F&& f) {
    std::uint64_t m = ~std::uint64_t(0);
    for (std::int64_t i = 0; i < n; ++i) m = std::min<std::uint64_t>(m, f(i));
    return m;
  }
  template <class Active, class Setup, class F>
  void segmented_sum(std::int64_t m, std::int64_t n, Active&& active, Setup&& setup, F&& f,
                     std::int64_t* out) {
    for (std::int64_t k = 0; k < m; ++k) {
      if (active(k)) planner::sum_segment_alone(k, n, setup, f, out);
    }
  }
  template <int K, class F>
  planner::Sums<K> exclusive_scans(std::int64_t n, F&& f, const planner::ScanOutputs<K>& out) {
    planner::Sums<K> total{};
    for (std::int64_t i = 0; i < n; ++i) {
      const planner::Sums<K> x = f(i);
      for (int j = 0; j < K; ++j) {
        if (out.out[j] != nullptr) out.out[j][i] = total.v[j];
        total.v[j] += x.v[j];
      }
    }
    return total;
  }
  void sort(std::uint64_t* keys, std::int64_t n) { std::sort(keys, keys + n); }
};

}  // namespace

void plan_on_host(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens) {
  const ScheduleCapacity& c = schedule.capacity();
  const ScheduleView v = schedule_view(schedule.memory(), c);
  const planner::Scratch s = planner::scratch_view(v.scratch, c.requests, c.work_items);
  SerialExecutor ex;
  planner::plan_batch(ex, planner::device_batch_args(schedule, batch, num_tokens), v, s);
}

}  // namespace dcpmla::cpu
