// Schedules on the GPU: several schedules of one backend captured in CUDA graphs and replayed in
// any order, each written before its replay from the host (update) or planned on the device
// (plan_on_device); the device planner against make_plan on random ragged DCP batches; and every
// rule of bad device input with its fault and poisoned outputs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/schedule_layout.h"
#include "cuda/kernels.h"
#include "dcpmla/error.h"
#include "dcpmla/schedule.h"
#include "gpu_test_support.h"

namespace dcpmla {
namespace {

using gpu_testing::make_backend;
using gpu_testing::on_cpu;
using gpu_testing::to_device;
using gpu_testing::to_host;

std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// A device batch over buffers that live as long as it does.
struct DeviceBatch {
  DeviceBuffer qsl, lens;
  DeviceBatchRef ref;
  DeviceBatch(Backend& be, const std::vector<std::int32_t>& q, const std::vector<std::int32_t>& t,
              std::int64_t num_tokens)
      : qsl(to_device(be, q.empty() ? std::vector<std::int32_t>{0} : q)),
        lens(to_device(be, t.empty() ? std::vector<std::int32_t>{0} : t)) {
    ref = {qsl.tensor(DType::i32, {std::int64_t(q.size())}),
           lens.tensor(DType::i32, {std::int64_t(t.size())}), num_tokens};
  }
};

// (1) Schedules for 4, 16 and 48 rows on one backend, each decode captured once in its own graph,
// replayed 30 times in random order; before each replay the schedule is written from a host plan
// or planned on the device from device tensors. Each replay equals an eager decode of the same
// plan bit for bit (unused pages NaN, block tables permuted).
TEST(CudaSchedule, GraphsOfSeveralSchedulesReplayInAnyOrder) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  const int H = 16, bs = 16, max_requests = 8, cols = 64;
  const std::int64_t num_blocks = 600;  // 512 used by the tables, the rest NaN
  PlanConfig config;
  config.sharding = {2, 0, 1};
  config.num_heads = H;
  config.block_size = bs;
  config.num_blocks = num_blocks;
  config.model = on_cpu() ? gpu_testing::kH200Model : be->device_model();
  std::mt19937_64 rng(41);
  // Cache: bf16 random values in the tables' pages, NaN elsewhere.
  std::vector<std::int32_t> table(std::size_t(max_requests) * cols);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::copy_n(perm.begin(), table.size(), table.begin());
  const std::size_t page = std::size_t(bs) * kHeadDim;
  std::vector<std::uint16_t> cache_host(std::size_t(num_blocks) * page, float_to_bf16(NAN));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::int32_t blk : table) {
    for (std::size_t i = 0; i < page; ++i) cache_host[blk * page + i] = float_to_bf16(normal(rng));
  }
  const std::int64_t max_rows = 48;
  std::vector<float> q_values(std::size_t(max_rows) * H * kHeadDim);
  for (auto& x : q_values) x = normal(rng);
  const DeviceBuffer cache_buf = to_device(*be, cache_host);
  const DeviceBuffer q_buf = to_device(*be, gpu_testing::encode(q_values, DType::bf16));
  const DeviceBuffer table_buf = to_device(*be, table);

  cudaStream_t s = nullptr;
  if (!on_cpu()) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  }
  // A random causal batch of at most `rows` rows (padded to them) and 2 x 64 x 16 tokens.
  auto random_batch = [&](std::int64_t rows) {
    Batch b;
    const int B = int(uniform(rng, 1, std::min<std::int64_t>(max_requests, rows)));
    b.query_start_loc = {0};
    std::int64_t left = rows - B;
    for (int r = 0; r < B; ++r) {
      const int Q = 1 + int(uniform(rng, 0, std::min<std::int64_t>(left, 7)));
      left -= Q - 1;
      b.query_start_loc.push_back(b.query_start_loc.back() + Q);
      b.total_len.push_back(uniform(rng, Q, uniform(rng, 0, 3) == 0 ? 2 * cols * bs : 300));
    }
    b.max_blocks = cols;
    b.block_table.assign(table.begin(), table.begin() + std::ptrdiff_t(B) * cols);
    b.num_tokens = rows;
    return b;
  };

  struct Slot {
    std::int64_t rows;
    Schedule sched;
    DeviceBuffer out, lse, ws;
    DecodeArgs args;
    cudaGraphExec_t exec = nullptr;
  };
  std::vector<std::unique_ptr<Slot>> slots;
  for (const std::int64_t rows : {4, 16, 48}) {
    const ScheduleCapacity cap = capacity_for_limits(
        config, std::int32_t(std::min<std::int64_t>(max_requests, rows)), rows, cols);
    auto slot = std::make_unique<Slot>(
        Slot{rows, Schedule(*be, config, cap), DeviceBuffer(*be, rows * H * kLatentDim * 4),
             DeviceBuffer(*be, rows * H * 4),
             DeviceBuffer(*be, decode_workspace_bytes(cap.partial_rows, H) + 16), DecodeArgs{},
             nullptr});
    DecodeArgs& a = slot->args;
    a.schedule = &slot->sched;
    a.q = q_buf.tensor(DType::bf16, {rows, H, kHeadDim});
    a.cache = {cache_buf.data(), DType::bf16, num_blocks, bs, 1.0f};
    a.block_table = table_buf.tensor(DType::i32, {max_requests, cols});
    a.out = slot->out.tensor(DType::f32, {rows, H, kLatentDim});
    a.lse = slot->lse.tensor(DType::f32, {rows, H});
    a.softmax_scale = 0.07f;
    a.workspace = slot->ws.tensor(DType::fp8_e4m3, {std::int64_t(slot->ws.bytes())});
    slot->sched.update(make_plan(random_batch(rows), slot->sched.config()), s);
    if (!on_cpu()) {
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      be->decode(a, s);
      ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&slot->exec, graph, 0), cudaSuccess);
      cudaGraphDestroy(graph);
    }
    slots.push_back(std::move(slot));
  }
  int device_planned = 0;
  for (int replay = 0; replay < 30; ++replay) {
    Slot& slot = *slots[std::size_t(uniform(rng, 0, 2))];
    const Batch b = random_batch(slot.rows);
    const Plan plan = make_plan(b, slot.sched.config());
    const bool on_device = uniform(rng, 0, 1) == 1;
    SCOPED_TRACE("replay " + std::to_string(replay) + ", " + std::to_string(slot.rows) + " rows, " +
                 std::to_string(b.num_requests()) + " requests" +
                 (on_device ? ", planned on the device" : ""));
    std::unique_ptr<DeviceBatch> db;
    if (on_device) {
      db = std::make_unique<DeviceBatch>(
          *be, b.query_start_loc, std::vector<std::int32_t>(b.total_len.begin(), b.total_len.end()),
          slot.rows);
      slot.sched.plan_on_device(db->ref, s);
      ++device_planned;
    } else {
      slot.sched.update(plan, s);
    }
    std::vector<float> poison(std::size_t(slot.rows) * H * kLatentDim, 1e30f);
    be->upload(slot.out.data(), poison.data(), slot.out.bytes(), s);
    be->upload(slot.lse.data(), poison.data(), slot.lse.bytes(), s);
    if (on_cpu()) {
      be->decode(slot.args, s);
    } else {
      ASSERT_EQ(cudaGraphLaunch(slot.exec, s), cudaSuccess);
    }
    be->synchronize(s);
    ASSERT_TRUE(slot.sched.status(s).ok()) << slot.sched.status(s).message;
    const auto got_out = to_host<float>(*be, slot.out.data(), poison.size());
    const auto got_lse = to_host<float>(*be, slot.lse.data(), std::size_t(slot.rows) * H);
    // The eager decode of the host plan, on the same backend.
    DecodeArgs eager = slot.args;
    eager.schedule = nullptr;
    eager.plan = &plan;
    DeviceBuffer out(*be, slot.out.bytes()), lse(*be, slot.lse.bytes());
    eager.out = out.tensor(DType::f32, {slot.rows, H, kLatentDim});
    eager.lse = lse.tensor(DType::f32, {slot.rows, H});
    be->decode(eager, s);
    be->synchronize(s);
    ASSERT_EQ(got_out, to_host<float>(*be, out.data(), poison.size()));
    ASSERT_EQ(got_lse, to_host<float>(*be, lse.data(), std::size_t(slot.rows) * H));
  }
  EXPECT_GT(device_planned, 5);
  for (auto& slot : slots) {
    if (slot->exec) cudaGraphExecDestroy(slot->exec);
  }
  if (s) cudaStreamDestroy(s);
}

// (2) The device plan equals make_plan's on 2000 random ragged DCP batches: W in {1, 2, 4, 8},
// Q 1..8, T up to 40K, padding, models with and without splits, sometimes a forced chunk.
TEST(CudaSchedule, DevicePlanEqualsHostPlanOnRandomBatches) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  std::mt19937_64 rng(20261204);
  auto pick = [&](std::initializer_list<int> v) {
    return *(v.begin() + uniform(rng, 0, std::int64_t(v.size()) - 1));
  };
  int split = 0, skipped = 0, in_shared_memory = 0, large_batches = 0, medium_batches = 0,
      roomy_batches = 0;
  // DCPMLA_RANDOM_BATCHES lowers the count for slow runs (compute-sanitizer racecheck).
  const char* count_env = std::getenv("DCPMLA_RANDOM_BATCHES");
  const int count = count_env ? std::max(1, std::atoi(count_env)) : 2000;
  for (int i = 0; i < count; ++i) {
    PlanConfig config;
    const int W = pick({1, 2, 4, 8});
    const int bs = pick({16, 32, 64});
    config.sharding = {W, int(uniform(rng, 0, W - 1)), pick({1, 1, 2, 16})};
    if (bs % config.sharding.interleave != 0) config.sharding.interleave = 1;
    config.num_heads = pick({16, 64, 96, 128});
    config.block_size = bs;
    config.num_blocks = 1 << 20;
    config.model = {pick({0, 2, 8, 132}), 64, pick({256, 256, 64})};
    config.kv_chunk_blocks = uniform(rng, 0, 5) == 0 ? int(uniform(rng, 1, 8)) : 0;
    // One batch in 20 of over 512 requests (the planner's larger block) and one of 257 to 512
    // (more keys than the small sort takes), with few heads so that their work items stay
    // sortable; one in 20 planned into a schedule of 600 requests whatever its size (the larger
    // block on a small batch, as an engine's larger capture sizes plan smaller steps).
    const int size_class = int(uniform(rng, 0, 19));
    const bool large = size_class == 0, medium = size_class == 1, roomy = size_class == 2;
    if (large || medium) config.num_heads = 16;
    const int B = large    ? int(uniform(rng, 513, 900))
                  : medium ? int(uniform(rng, 257, 512))
                  : uniform(rng, 0, 9) == 0
                      ? int(uniform(rng, 0, 2))
                      : int(uniform(rng, 1, uniform(rng, 0, 4) == 0 ? 300 : 40));
    const std::int64_t max_t = pick({64, 4096, 40000});
    Batch b;
    b.query_start_loc.assign(1, 0);
    std::int32_t max_blocks = 0;
    for (int r = 0; r < B; ++r) {
      const auto Q = uniform(rng, 1, 8);
      b.query_start_loc.push_back(b.query_start_loc.back() + std::int32_t(Q));
      b.total_len.push_back(uniform(rng, Q, std::max<std::int64_t>(Q, uniform(rng, Q, max_t))));
      // Rank 0 holds the most of every request: the plan's blocks_per_request.
      const Sharding fullest{config.sharding.world, 0, config.sharding.interleave};
      max_blocks =
          std::max(max_blocks, std::int32_t((fullest.local_len(b.total_len.back()) + bs - 1) / bs));
    }
    b.num_tokens = uniform(rng, 0, 2) == 0 ? b.real_tokens() + uniform(rng, 0, 5) : -1;
    const auto cap =
        roomy ? capacity_for_limits(config, 600, std::max<std::int64_t>(b.rows(), 600), max_blocks)
              : capacity_for_limits(config, B, b.rows(), max_blocks);
    if (cap.work_items > 16384) {  // more work items than the device planner sorts
      ++skipped;
      continue;
    }
    SCOPED_TRACE("batch " + std::to_string(i));
    Schedule sched(*be, config, cap);
    const Plan plan = make_plan(b, sched.config());
    ASSERT_EQ(max_capacity(capacity_of(plan), cap), cap);
    const std::size_t bytes = schedule_bytes(cap);
    const std::vector<std::uint8_t> garbage(bytes, 0xab);
    be->upload(sched.memory(), garbage.data(), bytes, nullptr);
    const DeviceBatch db(*be, b.query_start_loc,
                         std::vector<std::int32_t>(b.total_len.begin(), b.total_len.end()),
                         b.rows());
    sched.plan_on_device(db.ref, nullptr);
    std::vector<std::byte> got(bytes), want(bytes);
    be->download(got.data(), sched.memory(), bytes, nullptr);
    be->synchronize(nullptr);
    pack_schedule(plan, cap, want.data());
    const ScheduleView g = schedule_view(got.data(), cap), w = schedule_view(want.data(), cap);
    ASSERT_EQ(g.header->fault, kNoFault) << decode_fault(g.header->fault).message;
    ASSERT_EQ(std::memcmp(g.header, w.header, sizeof(ScheduleHeader)), 0) << "header";
    ASSERT_EQ(std::memcmp(g.row_bound, w.row_bound, std::size_t(plan.num_rows) * 4), 0)
        << "row bounds";
    ASSERT_EQ(std::memcmp(g.merge_rows, w.merge_rows, plan.merges.size() * sizeof(MergeRow)), 0)
        << "merge rows";
    for (std::size_t k = 0; k < plan.work.size(); ++k) {
      ASSERT_EQ(std::memcmp(&g.items[k], &w.items[k], sizeof(WorkItem)), 0)
          << "work item " << k << " of " << plan.work.size();
    }
    ASSERT_TRUE(sched.status(nullptr).ok());
    split += plan.max_splits > 1;
    in_shared_memory += cuda::plans_in_shared_memory(sched);
    large_batches += large;
    medium_batches += medium;
    roomy_batches += roomy;
  }
  // The coverage the full count reaches: splits, and few batches over the sortable size.
  if (count == 2000) {
    EXPECT_GT(split, 150);
    EXPECT_LT(skipped, 200);
    // Both forms of the planner's scratch: shared memory and the schedule's global memory.
    EXPECT_GT(in_shared_memory, 200);
    EXPECT_GT(count - skipped - in_shared_memory, 10);
    EXPECT_GT(large_batches, 50);
    EXPECT_GT(medium_batches, 50);
    EXPECT_GT(roomy_batches, 50);
  }
}

// (3) Every rule of bad device input: its fault and request through Schedule::status, NaN in
// every output row, and the bytes after the outputs untouched.
TEST(CudaSchedule, BadDeviceBatchFaultsAndPoisonsEveryRow) {
  DCPMLA_REQUIRE_GPU();
  auto be = make_backend();
  const int H = 16;
  PlanConfig config;
  config.sharding = {2, 1, 1};
  config.num_heads = H;
  config.block_size = 16;
  config.num_blocks = 64;
  config.model = gpu_testing::kNoSplitModel;
  const ScheduleCapacity cap{3, 12, 4, 8, 12, 24};
  struct FaultCase {
    const char* name;
    std::vector<std::int32_t> qsl, lens;
    ScheduleFault fault;
    std::int32_t request;  // -1: batch-wide
    ScheduleCapacity cap;
    int chunk = 0;
  };
  ScheduleCapacity few_items = cap, few_merges = cap, few_partials = cap;
  few_items.work_items = 2;
  few_merges.merge_rows = 1;
  few_partials.partial_rows = 1;
  const std::vector<FaultCase> cases = {
      {"first start", {1, 2, 3, 4}, {5, 5, 5}, ScheduleFault::first_start_not_zero, 0, cap},
      {"decreasing starts", {0, 3, 2, 4}, {5, 5, 5}, ScheduleFault::query_not_increasing, 1, cap},
      {"empty request", {0, 3, 3, 4}, {5, 5, 5}, ScheduleFault::query_not_increasing, 1, cap},
      {"T < Q", {0, 3, 5, 6}, {5, 1, 5}, ScheduleFault::length_below_query, 1, cap},
      {"negative T", {0, 1, 2, 3}, {5, 5, -7}, ScheduleFault::length_below_query, 2, cap},
      {"rows past num_tokens",
       {0, 4, 8, 13},
       {9, 9, 13},
       ScheduleFault::rows_over_capacity,
       2,
       cap},
      {"blocks over capacity",
       {0, 1, 2, 3},
       {5, 200, 5},
       ScheduleFault::blocks_over_capacity,
       1,
       cap},
      {"work over capacity",
       {0, 1, 2, 3},
       {5, 5, 5},
       ScheduleFault::work_over_capacity,
       -1,
       few_items},
      {"merges over capacity",
       {0, 2, 3},
       {100, 100},
       ScheduleFault::merges_over_capacity,
       -1,
       few_merges,
       1},
      {"partials over capacity",
       {0, 1, 2},
       {100, 5},
       ScheduleFault::partials_over_capacity,
       -1,
       few_partials,
       1},
  };
  const std::int64_t rows = 12;
  HostKvCache cache_host(DType::bf16, 64, 16);
  const KvCacheRef cache_ref = cache_host.ref();
  DeviceBuffer cache(*be, cache_ref.bytes());
  be->upload(cache.data(), cache_ref.data, cache_ref.bytes(), nullptr);
  const DeviceBuffer q = to_device(*be, std::vector<float>(std::size_t(rows * H * kHeadDim), 1.0f));
  const DeviceBuffer table = to_device(*be, std::vector<std::int32_t>(3 * 4, 0));
  for (const FaultCase& f : cases) {
    SCOPED_TRACE(f.name);
    PlanConfig c = config;
    c.kv_chunk_blocks = f.chunk;
    Schedule sched(*be, c, f.cap);
    const DeviceBatch db(*be, f.qsl, f.lens, rows);
    sched.plan_on_device(db.ref, nullptr);
    const ScheduleStatus st = sched.status(nullptr);
    EXPECT_EQ(st.fault, f.fault) << st.message;
    EXPECT_EQ(st.request, f.request) << st.message;
    if (f.request >= 0) {
      EXPECT_NE(st.message.find("request " + std::to_string(f.request)), std::string::npos)
          << st.message;
    }
    const DeviceBuffer out =
        to_device(*be, std::vector<float>(std::size_t((rows + 1) * H * kLatentDim), 7.0f));
    const DeviceBuffer lse = to_device(*be, std::vector<float>(std::size_t((rows + 1) * H), 7.0f));
    DeviceBuffer ws(*be, decode_workspace_bytes(std::max<std::int64_t>(f.cap.partial_rows, 1), H));
    DecodeArgs a;
    a.schedule = &sched;
    a.q = q.tensor(DType::f32, {rows, H, kHeadDim});
    a.cache = {cache.data(), DType::bf16, 64, 16, 1.0f};
    a.block_table = table.tensor(DType::i32, {3, 4});
    a.out = out.tensor(DType::f32, {rows, H, kLatentDim});
    a.lse = lse.tensor(DType::f32, {rows, H});
    a.softmax_scale = 0.1f;
    a.workspace = ws.tensor(DType::fp8_e4m3, {std::int64_t(ws.bytes())});
    be->decode(a, nullptr);
    const auto o = to_host<float>(*be, out.data(), std::size_t((rows + 1) * H * kLatentDim));
    const auto l = to_host<float>(*be, lse.data(), std::size_t((rows + 1) * H));
    for (std::int64_t i = 0; i < rows * H * kLatentDim; ++i) ASSERT_TRUE(std::isnan(o[i])) << i;
    for (std::int64_t i = 0; i < rows * H; ++i) ASSERT_TRUE(std::isnan(l[i])) << i;
    for (std::size_t i = std::size_t(rows * H * kLatentDim); i < o.size(); ++i) {
      ASSERT_EQ(o[i], 7.0f);
    }
    for (std::size_t i = std::size_t(rows * H); i < l.size(); ++i) ASSERT_EQ(l[i], 7.0f);
  }
}

}  // namespace
}  // namespace dcpmla
