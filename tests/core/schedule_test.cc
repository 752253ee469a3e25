// Schedules: the device planner's steps (run here through the CPU backend's emulation) against
// make_plan on random ragged DCP batches, every rule of bad device input with its fault and
// poisoned outputs, and several schedules on one backend used in any order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/schedule_layout.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/schedule.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"

namespace dcpmla {
namespace {

struct RandomCase {
  Batch batch;
  PlanConfig config;
};

// Ragged DCP batches: W in {1, 2, 4, 8}, Q 1..8, T up to 40K (some empty on a rank), padding,
// models with and without splits and row tiles, sometimes a forced chunk.
RandomCase random_case(std::mt19937_64& rng) {
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng));
  };
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  RandomCase c;
  const int W = pick({1, 2, 4, 8});
  const int bs = pick({16, 32, 64});
  c.config.sharding = {W, int(uniform(0, W - 1)), pick({1, 1, 2, 16})};
  if (bs % c.config.sharding.interleave != 0) c.config.sharding.interleave = 1;
  c.config.num_heads = pick({16, 64, 96, 128});
  c.config.block_size = bs;
  c.config.num_blocks = 1 << 20;
  c.config.model = {pick({0, 2, 8, 132}), pick({0, 64, 64}), pick({256, 256, 64})};
  c.config.kv_chunk_blocks = uniform(0, 5) == 0 ? int(uniform(1, 8)) : 0;
  const int B =
      uniform(0, 9) == 0 ? int(uniform(0, 2)) : int(uniform(1, uniform(0, 4) == 0 ? 300 : 40));
  const std::int64_t max_t = pick({64, 4096, 40000});
  Batch& b = c.batch;
  b.query_start_loc.assign(1, 0);
  for (int r = 0; r < B; ++r) {
    const auto Q = uniform(1, 8);
    b.query_start_loc.push_back(b.query_start_loc.back() + std::int32_t(Q));
    b.total_len.push_back(uniform(Q, std::max<std::int64_t>(Q, uniform(Q, max_t))));
  }
  b.num_tokens = uniform(0, 2) == 0 ? b.real_tokens() + uniform(0, 5) : -1;
  return c;
}

// Blocks a request needs at most on the group's fullest rank (rank 0), as Plan counts them.
std::int32_t max_blocks(const Batch& b, const Sharding& sh, int bs) {
  const Sharding fullest{sh.world, 0, sh.interleave};
  std::int64_t m = 0;
  for (const auto T : b.total_len) m = std::max(m, (fullest.local_len(T) + bs - 1) / bs);
  return std::int32_t(m);
}

// The schedule's bytes that make_plan's plan gives, section by section.
void expect_same_schedule(const Schedule& s, const Plan& plan, const std::string& what) {
  const ScheduleCapacity& cap = s.capacity();
  std::vector<std::byte> image(schedule_bytes(cap));
  pack_schedule(plan, cap, image.data());
  const ScheduleView want = schedule_view(image.data(), cap);
  const ScheduleView got = schedule_view(s.memory(), cap);
  ASSERT_EQ(got.header->fault, kNoFault) << what << ": " << decode_fault(got.header->fault).message;
  ASSERT_EQ(std::memcmp(got.header, want.header, sizeof(ScheduleHeader)), 0) << what << ": header";
  ASSERT_EQ(std::memcmp(got.row_bound, want.row_bound, std::size_t(plan.num_rows) * 4), 0)
      << what << ": row bounds";
  ASSERT_EQ(std::memcmp(got.merge_rows, want.merge_rows, plan.merges.size() * sizeof(MergeRow)), 0)
      << what << ": merge rows";
  for (std::size_t i = 0; i < plan.work.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got.items[i], &want.items[i], sizeof(WorkItem)), 0)
        << what << ": work item " << i << " of " << plan.work.size();
  }
}

DeviceBatchRef device_batch(std::vector<std::int32_t>& qsl, std::vector<std::int32_t>& lens,
                            std::int64_t num_tokens) {
  return {TensorRef(qsl.data(), DType::i32, {std::int64_t(qsl.size())}),
          TensorRef(lens.data(), DType::i32, {std::int64_t(lens.size())}), num_tokens};
}

TEST(Schedule, DevicePlanEqualsHostPlanOnRandomBatches) {
  const auto cpu = make_cpu_backend(1);
  std::mt19937_64 rng(20261203);
  int split = 0, cut = 0, skipped = 0;
  for (int i = 0; i < 2500; ++i) {
    const RandomCase c = random_case(rng);
    const Batch& b = c.batch;
    // Every tenth batch into a schedule of twice its size, as an engine's larger capture sizes
    // plan smaller steps.
    const std::int64_t room = i % 10 == 0 ? 2 : 1;
    const auto cap = capacity_for_limits(c.config, room * b.num_requests() + (room - 1),
                                         room * b.rows() + (room - 1),
                                         max_blocks(b, c.config.sharding, c.config.block_size));
    // Forced small chunks of long contexts: more work items than the device planner sorts.
    if (cap.work_items > 16384) {
      ++skipped;
      continue;
    }
    Schedule s(*cpu, c.config, cap);
    const Plan plan = make_plan(b, s.config());
    // The host plan fits the capacity the planner planned for.
    ASSERT_NO_THROW(s.update(plan, nullptr)) << "batch " << i;
    std::vector<std::int32_t> qsl = b.query_start_loc;
    std::vector<std::int32_t> lens(b.total_len.begin(), b.total_len.end());
    std::memset(s.memory(), 0xab, schedule_bytes(cap));
    s.plan_on_device(device_batch(qsl, lens, b.rows()), nullptr);
    expect_same_schedule(s, plan, "batch " + std::to_string(i));
    if (HasFatalFailure()) return;
    ASSERT_TRUE(s.status(nullptr).ok());
    split += plan.max_splits > 1;
    cut += plan.max_splits > 1 && !plan.merges.empty() &&
           std::int64_t(plan.merges.size()) < plan.num_real_rows;
  }
  // The cases reach both the splits and the per-request (last-wave) cuts.
  EXPECT_GT(split, 200);
  EXPECT_GT(cut, 20);
  EXPECT_LT(skipped, 250);
}

struct FaultCase {
  const char* name;
  std::vector<std::int32_t> qsl, lens;
  std::int64_t num_tokens;
  ScheduleFault fault;
  std::int32_t request;
};

TEST(Schedule, BadDeviceBatchFaultsAndPoisonsEveryRow) {
  const auto cpu = make_cpu_backend(1);
  PlanConfig config{{2, 1, 1}, 16, 16, 64, cpu->device_model(), 0};
  ScheduleCapacity cap{3, 12, 4, 8, 12, 24};
  const std::vector<FaultCase> cases = {
      {"first start", {1, 2, 3, 4}, {5, 5, 5}, 12, ScheduleFault::first_start_not_zero, 0},
      {"decreasing starts", {0, 3, 2, 4}, {5, 5, 5}, 12, ScheduleFault::query_not_increasing, 1},
      {"empty request", {0, 3, 3, 4}, {5, 5, 5}, 12, ScheduleFault::query_not_increasing, 1},
      {"T < Q", {0, 3, 5, 6}, {5, 1, 5}, 12, ScheduleFault::length_below_query, 1},
      {"negative T", {0, 1, 2, 3}, {5, 5, -7}, 12, ScheduleFault::length_below_query, 2},
      {"rows past num_tokens", {0, 4, 8, 13}, {9, 9, 13}, 12, ScheduleFault::rows_over_capacity, 2},
      {"blocks over capacity",
       {0, 1, 2, 3},
       {5, 200, 5},
       12,
       ScheduleFault::blocks_over_capacity,
       1},
  };
  for (const FaultCase& f : cases) {
    SCOPED_TRACE(f.name);
    Schedule s(*cpu, config, cap);
    auto qsl = f.qsl, lens = f.lens;
    s.plan_on_device(device_batch(qsl, lens, f.num_tokens), nullptr);
    const ScheduleStatus st = s.status(nullptr);
    EXPECT_EQ(st.fault, f.fault) << st.message;
    EXPECT_EQ(st.request, f.request);
    EXPECT_NE(st.message.find("request " + std::to_string(f.request)), std::string::npos)
        << st.message;
    // The decode writes NaN into every row of out and lse, and nothing past them.
    const std::int64_t rows = f.num_tokens, H = 16;
    HostKvCache cache(DType::bf16, 64, 16);
    std::vector<float> q(std::size_t(rows * H * kHeadDim), 1.0f);
    std::vector<float> out(std::size_t((rows + 1) * H * kLatentDim), 7.0f);
    std::vector<float> lse(std::size_t((rows + 1) * H), 7.0f);
    std::vector<std::int32_t> table(3 * 4, 0);
    std::vector<std::byte> ws(decode_workspace_bytes(cap.partial_rows, 16));
    DecodeArgs a;
    a.schedule = &s;
    a.q = TensorRef(q.data(), DType::f32, {rows, H, kHeadDim});
    a.cache = cache.ref();
    a.block_table = TensorRef(table.data(), DType::i32, {3, 4});
    a.out = TensorRef(out.data(), DType::f32, {rows, H, kLatentDim});
    a.lse = TensorRef(lse.data(), DType::f32, {rows, H});
    a.softmax_scale = 0.1f;
    a.workspace = TensorRef(ws.data(), DType::fp8_e4m3, {std::int64_t(ws.size())});
    cpu->decode(a, nullptr);
    for (std::int64_t i = 0; i < rows * H * kLatentDim; ++i) ASSERT_TRUE(std::isnan(out[i]));
    for (std::int64_t i = 0; i < rows * H; ++i) ASSERT_TRUE(std::isnan(lse[i]));
    for (std::size_t i = std::size_t(rows * H * kLatentDim); i < out.size(); ++i) {
      ASSERT_EQ(out[i], 7.0f);
    }
    for (std::size_t i = std::size_t(rows * H); i < lse.size(); ++i) ASSERT_EQ(lse[i], 7.0f);
  }
}

TEST(Schedule, HostUpdateRefusesPlansOverCapacityAndOtherConfigs) {
  const auto cpu = make_cpu_backend(1);
  Batch b;
  b.query_start_loc = {0, 2, 3};
  b.total_len = {40, 70};
  PlanConfig config{{1, 0, 1}, 16, 16, 64, cpu->device_model(), 0};
  Schedule s(*cpu, config, {1, 3, 8, 8, 0, 0});
  const std::vector<std::byte> before(static_cast<std::byte*>(s.memory()),
                                      static_cast<std::byte*>(s.memory()) + 64);
  try {
    s.update(make_plan(b, config), nullptr);
    FAIL() << "a plan of 2 requests accepted by a schedule of 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "plan");
  }
  PlanConfig other = config;
  other.num_heads = 32;
  b.query_start_loc = {0, 2};
  b.total_len = {40};
  EXPECT_THROW(s.update(make_plan(b, other), nullptr), Error);
  EXPECT_EQ(std::memcmp(before.data(), s.memory(), before.size()), 0);
}

// Schedule::plan (work items planned straight into the image) writes the bytes that make_plan
// and update write.
TEST(Schedule, HostPlanIntoTheScheduleEqualsMakePlanAndUpdate) {
  const auto cpu = make_cpu_backend(1);
  std::mt19937_64 rng(31);
  for (int i = 0; i < 400; ++i) {
    const RandomCase c = random_case(rng);
    const Batch& b = c.batch;
    const auto cap = capacity_for_limits(c.config, b.num_requests(), b.rows(),
                                         max_blocks(b, c.config.sharding, c.config.block_size));
    Schedule s(*cpu, c.config, cap);
    const Plan plan = make_plan(b, s.config());
    std::memset(s.memory(), 0xab, schedule_bytes(cap));
    s.plan(b, nullptr);
    expect_same_schedule(s, plan, "batch " + std::to_string(i));
    if (HasFatalFailure()) return;
    const Schedule::HostView& v = s.host_view();
    EXPECT_EQ(v.work_items, std::int64_t(plan.work.size()));
    EXPECT_EQ(v.merge_rows, std::int64_t(plan.merges.size()));
    EXPECT_EQ(v.real_rows, plan.num_real_rows);
    EXPECT_EQ(v.max_splits, plan.max_splits);
  }
}

// A batch whose plan exceeds the capacity, or an invalid batch, throws before anything of the
// schedule is written.
TEST(Schedule, HostPlanIntoTheScheduleLeavesItUntouchedOnErrors) {
  const auto cpu = make_cpu_backend(1);
  PlanConfig config{{2, 1, 1}, 16, 16, 1024, {8, 0, 16}, 0};
  Batch fits;
  fits.query_start_loc = {0, 1};
  fits.total_len = {40};
  const auto cap = capacity_of(make_plan(fits, config));
  Schedule s(*cpu, config, cap);
  std::memset(s.memory(), 0x5c, schedule_bytes(cap));
  const std::vector<std::byte> before(static_cast<std::byte*>(s.memory()),
                                      static_cast<std::byte*>(s.memory()) + schedule_bytes(cap));
  auto untouched = [&] { return std::memcmp(before.data(), s.memory(), before.size()) == 0; };
  Batch longer = fits;  // more work items (splits) than the capacity holds
  longer.total_len = {4000};
  try {
    s.plan(longer, nullptr);
    FAIL() << "a plan over the capacity accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "plan");
  }
  EXPECT_TRUE(untouched());
  Batch bad = fits;
  bad.total_len = {0};  // T < Q
  EXPECT_THROW(s.plan(bad, nullptr), Error);
  EXPECT_TRUE(untouched());
  EXPECT_FALSE(s.host_view().written);
  s.plan(fits, nullptr);
  EXPECT_TRUE(s.host_view().written);
}

// A DCP step through device-planned schedules agrees with the double-precision reference.
TEST(Schedule, DevicePlannedDcpStepsMatchTheReference) {
  for (const auto combine : {Combine::ag_rs, Combine::a2a}) {
    for (const int world : {1, 2, 4}) {
      testing::ScenarioSpec spec;
      spec.world = world;
      spec.heads = 16;
      spec.requests = 6;
      spec.max_context = 3000;
      spec.padding_rows = 3;
      spec.seed = 7 + world;
      const testing::Scenario sc = testing::make_scenario(spec);
      testing::RunOptions opt;
      opt.combine = combine;
      opt.device_plan = true;
      opt.model = DeviceModel{8, 64, 64};  // row tiles and splits on the CPU too
      const auto cmp = testing::compare(sc,
                                        testing::run_dcp(
                                            sc, [](int) { return make_cpu_backend(2); }, opt),
                                        testing::run_reference(sc), testing::tolerance_for(spec));
      EXPECT_TRUE(cmp.pass) << "W " << world << " " << to_string(combine) << ": |dO| "
                            << cmp.max_out_error << " |dLSE| " << cmp.max_lse_error;
    }
  }
}

// Several schedules on one backend, written from the host or planned on the device in any order,
// each decode equal bit for bit to an eager decode of the same plan.
TEST(Schedule, SeveralSchedulesInAnyOrder) {
  const auto cpu = make_cpu_backend(2);
  std::mt19937_64 rng(5);
  const int H = 16, bs = 16;
  const std::int64_t num_blocks = 512;
  HostKvCache cache(DType::bf16, num_blocks, bs);
  {
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> lat(std::size_t(num_blocks * bs) * kHeadDim);
    for (auto& x : lat) x = n(rng);
    std::vector<std::int64_t> slots(std::size_t(num_blocks * bs));
    for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = std::int64_t(i);
    cpu->write_kv({TensorRef(lat.data(), DType::f32, {std::int64_t(slots.size()), kHeadDim}),
                   TensorRef(slots.data(), DType::i64, {std::int64_t(slots.size())}), cache.ref()},
                  nullptr);
  }
  PlanConfig config{{2, 0, 1}, H, bs, num_blocks, DeviceModel{8, 64, 64}, 0};
  const std::vector<std::int64_t> sizes = {4, 16, 48};  // capture sizes (rows)
  std::vector<Schedule> schedules;
  for (const auto rows : sizes) {
    schedules.emplace_back(*cpu, config, capacity_for_limits(config, std::int32_t(rows), rows, 32));
  }
  std::vector<std::int32_t> table(std::size_t(48 * 32));
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = std::int32_t((i * 7) % num_blocks);
  for (int step = 0; step < 24; ++step) {
    const std::size_t k = std::uniform_int_distribution<std::size_t>(0, sizes.size() - 1)(rng);
    const std::int64_t rows = sizes[k];
    Batch b;
    b.query_start_loc = {0};
    while (b.query_start_loc.back() < rows) {
      const std::int32_t Q =
          std::min<std::int32_t>(std::int32_t(rows) - b.query_start_loc.back(),
                                 std::uniform_int_distribution<std::int32_t>(1, 8)(rng));
      if (b.num_requests() + 1 >= rows && Q < rows - b.query_start_loc.back()) break;
      b.query_start_loc.push_back(b.query_start_loc.back() + Q);
      b.total_len.push_back(std::uniform_int_distribution<std::int64_t>(Q, 900)(rng));
      if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) break;
    }
    b.num_tokens = rows;
    Schedule& s = schedules[k];
    const Plan plan = make_plan(b, s.config());
    const bool on_device = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    std::vector<std::int32_t> qsl = b.query_start_loc;
    std::vector<std::int32_t> lens(b.total_len.begin(), b.total_len.end());
    if (on_device) {
      s.plan_on_device(device_batch(qsl, lens, rows), nullptr);
    } else {
      s.update(plan, nullptr);
    }
    std::vector<float> q(std::size_t(rows * H * kHeadDim));
    for (auto& x : q) x = std::normal_distribution<float>(0.0f, 0.5f)(rng);
    std::vector<float> out(std::size_t(rows * H * kLatentDim)), lse(std::size_t(rows * H));
    std::vector<float> want_out = out, want_lse = lse;
    std::vector<std::byte> ws(decode_workspace_bytes(s.capacity().partial_rows, H));
    DecodeArgs a;
    a.schedule = &s;
    a.q = TensorRef(q.data(), DType::f32, {rows, H, kHeadDim});
    a.cache = cache.ref();
    a.block_table = TensorRef(table.data(), DType::i32, {48, 32});
    a.out = TensorRef(out.data(), DType::f32, {rows, H, kLatentDim});
    a.lse = TensorRef(lse.data(), DType::f32, {rows, H});
    a.softmax_scale = 0.1f;
    a.workspace = TensorRef(ws.data(), DType::fp8_e4m3, {std::int64_t(ws.size())});
    cpu->decode(a, nullptr);
    DecodeArgs eager = a;
    eager.schedule = nullptr;
    eager.plan = &plan;
    eager.out = TensorRef(want_out.data(), DType::f32, {rows, H, kLatentDim});
    eager.lse = TensorRef(want_lse.data(), DType::f32, {rows, H});
    cpu->decode(eager, nullptr);
    ASSERT_EQ(std::memcmp(out.data(), want_out.data(), out.size() * 4), 0) << "step " << step;
    ASSERT_EQ(std::memcmp(lse.data(), want_lse.data(), lse.size() * 4), 0) << "step " << step;
  }
}

}  // namespace
}  // namespace dcpmla
