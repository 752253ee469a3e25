// Planner benchmarks: make_plan for 1, 64 and 1024 ragged requests on rank 3 of a W = 8 DCP group,
// and flatten() + make_plan for 1024. Targets: planning 1024 requests under 100 us; a step's host
// planning into a schedule for 256 requests under 20 us (BM_PlanIntoSchedule, Schedule::plan; the
// CPU backend's schedule is its image: on a GPU the image is pinned memory and one asynchronous
// copy follows). BM_PlanAndUpdate: make_plan, then Schedule::update copying the plan.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dcpmla/batch.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/plan.h"
#include "dcpmla/schedule.h"
#include "dcpmla/sharding.h"
#include "splitmix_rng.h"

namespace {

using namespace dcpmla;
using bench::SplitMixRng;

constexpr int kWorld = 8, kRank = 3, kInterleave = 1;
constexpr int kBlockSize = 64, kHeads = 128;
constexpr std::int64_t kMaxContext = 32768;
constexpr int kMaxQ = 8;
// An H200's model: 132 SMs, tiles of 64 (row, head) pairs (the CUDA backend's).
constexpr DeviceModel kModel{132, 64, 256};
constexpr double kBudgetUs = 100.0;  // for 1024 requests

struct Input {
  Batch batch;
  PlanConfig config;
};

// Q drawn from 1..8, T uniform in [Q, 32768], every block-table column a distinct block id.
Input make_input(int requests) {
  Input in;
  in.config.sharding = Sharding{kWorld, kRank, kInterleave};
  in.config.num_heads = kHeads;
  in.config.block_size = kBlockSize;
  in.config.model = kModel;
  Batch& b = in.batch;
  SplitMixRng rng(0xb10c + std::uint64_t(requests));
  b.query_start_loc.assign(1, 0);
  for (int r = 0; r < requests; ++r) {
    const auto Q = rng.range(1, kMaxQ);
    b.query_start_loc.push_back(b.query_start_loc.back() + std::int32_t(Q));
    b.total_len.push_back(rng.range(Q, kMaxContext));
  }
  const auto& sh = in.config.sharding;
  b.max_blocks = std::int32_t((sh.local_len(kMaxContext) + kBlockSize - 1) / kBlockSize);
  b.block_table.resize(std::size_t(requests) * b.max_blocks);
  std::iota(b.block_table.begin(), b.block_table.end(), 0);
  for (std::size_t i = b.block_table.size(); i > 1; --i) {
    std::swap(b.block_table[i - 1], b.block_table[rng.next() % i]);
  }
  in.config.num_blocks = std::int64_t(b.block_table.size());
  return in;
}

void report(benchmark::State& state, const Input& in, const Plan& plan, double seconds,
            std::int64_t calls) {
  const int B = in.batch.num_requests();
  const double us = seconds / double(calls) * 1e6;
  state.counters["requests"] = B;
  state.counters["rows"] = double(plan.num_rows);
  state.counters["work_items"] = double(plan.work.size());
  state.counters["us_per_call"] = us;
  state.counters["ns_per_request"] = us * 1e3 / B;
  std::string label = fmt::format("{} requests, {} rows, {} work items, {:.1f} us/call", B,
                                  plan.num_rows, plan.work.size(), us);
  if (B == 1024) {
    state.counters["budget_us"] = kBudgetUs;
    label += us <= kBudgetUs ? fmt::format(" [within the {:.0f} us budget]", kBudgetUs)
                             : fmt::format(" [OVER the {:.0f} us budget by {:.1f}x]", kBudgetUs,
                                           us / kBudgetUs);
  }
  state.SetLabel(label);
}

void BM_MakePlan(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  Plan plan = make_plan(in.batch, in.config);  // warm-up, and the plan the counters describe
  std::int64_t calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Plan p = make_plan(in.batch, in.config);
    benchmark::DoNotOptimize(p.work.data());
    ++calls;
  }
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  report(state, in, plan, dt.count(), calls);
}

// make_plan, then Schedule::update copies the plan into the schedule's image.
void BM_PlanAndUpdate(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  const auto backend = make_cpu_backend(1);
  const ScheduleCapacity cap =
      capacity_for_limits(in.config, in.batch.num_requests(), in.batch.rows(), in.batch.max_blocks);
  Schedule schedule(*backend, in.config, cap);
  Plan plan = make_plan(in.batch, schedule.config());
  schedule.update(plan, nullptr);
  std::int64_t calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Plan p = make_plan(in.batch, schedule.config());
    schedule.update(p, nullptr);
    benchmark::DoNotOptimize(schedule.memory());
    ++calls;
  }
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  report(state, in, plan, dt.count(), calls);
}

// Schedule::plan: the same plan and image, the work items planned straight into the image (what
// the torch op's host planning runs); the 20 us target for 256 requests is this path's.
void BM_PlanIntoSchedule(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  const auto backend = make_cpu_backend(1);
  const ScheduleCapacity cap =
      capacity_for_limits(in.config, in.batch.num_requests(), in.batch.rows(), in.batch.max_blocks);
  Schedule schedule(*backend, in.config, cap);
  const Plan plan = make_plan(in.batch, schedule.config());  // what the counters describe
  schedule.plan(in.batch, nullptr);
  std::int64_t calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    schedule.plan(in.batch, nullptr);
    benchmark::DoNotOptimize(schedule.memory());
    ++calls;
  }
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  report(state, in, plan, dt.count(), calls);
  if (in.batch.num_requests() == 256) {
    const double us = dt.count() / double(calls) * 1e6;
    state.counters["target_us"] = 20.0;
    state.SetLabel(
        fmt::format("{} requests, {} work items, plan into the schedule {:.1f} us/call {}", 256,
                    plan.work.size(), us,
                    us <= 20.0 ? "[within the 20 us target]" : "[OVER the 20 us target]"));
  }
}

void BM_FlattenMakePlan(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  Plan plan = make_plan(flatten(in.batch), in.config);
  std::int64_t calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const Batch flat = flatten(in.batch);
    Plan p = make_plan(flat, in.config);
    benchmark::DoNotOptimize(p.work.data());
    ++calls;
  }
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  report(state, in, plan, dt.count(), calls);
}

// The validation make_plan starts with, alone: where the planner's time goes.
void BM_ValidateBatch(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  for (auto _ : state) {
    validate_batch(in.batch, in.config);
    benchmark::ClobberMemory();
  }
  state.counters["requests"] = in.batch.num_requests();
}

// flatten() alone.
void BM_Flatten(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  for (auto _ : state) {
    const Batch flat = flatten(in.batch);
    benchmark::DoNotOptimize(flat.block_table.data());
  }
  state.counters["requests"] = in.batch.num_requests();
}

// validate_block_ids (make_plan does not read the block table; callers check it when asked).
void BM_ValidateBlockIds(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  for (auto _ : state) {
    validate_block_ids(in.batch, in.config);
    benchmark::ClobberMemory();
  }
  state.counters["requests"] = in.batch.num_requests();
}

// The block-id range check validate_block_ids performs, as a min/max reduction per row that
// builds no strings (and vectorises): what the check costs when error text is only formatted on
// failure.
void BM_BlockIdScan(benchmark::State& state) {
  const Input in = make_input(int(state.range(0)));
  const auto& sh = in.config.sharding;
  std::int64_t ids = 0;
  for (auto _ : state) {
    bool ok = true;
    ids = 0;
    for (int b = 0; b < in.batch.num_requests(); ++b) {
      const auto needed = (sh.local_len(in.batch.total_len[b]) + kBlockSize - 1) / kBlockSize;
      const std::int32_t* row = in.batch.block_row(b).data();
      std::int32_t lo = 0, hi = 0;
      for (std::int64_t i = 0; i < needed; ++i) {
        lo = std::min(lo, row[i]);
        hi = std::max(hi, row[i]);
      }
      ok = ok && lo >= 0 && hi < in.config.num_blocks;
      ids += needed;
    }
    benchmark::DoNotOptimize(ok);
  }
  state.counters["block_ids"] = double(ids);
}

void common(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMicrosecond)->MinTime(0.2);
  b->ComputeStatistics(
      "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

}  // namespace

BENCHMARK(BM_MakePlan)->Arg(1)->Arg(64)->Arg(1024)->Apply(common);
BENCHMARK(BM_PlanAndUpdate)->Arg(1)->Arg(256)->Arg(1024)->Apply(common);
BENCHMARK(BM_PlanIntoSchedule)->Arg(1)->Arg(256)->Arg(1024)->Apply(common);
BENCHMARK(BM_FlattenMakePlan)->Arg(1024)->Apply(common);
BENCHMARK(BM_ValidateBatch)->Arg(1024)->Apply(common);
BENCHMARK(BM_Flatten)->Arg(1024)->Apply(common);
BENCHMARK(BM_ValidateBlockIds)->Arg(1024)->Apply(common);
BENCHMARK(BM_BlockIdScan)->Arg(1024)->Apply(common);

BENCHMARK_MAIN();
