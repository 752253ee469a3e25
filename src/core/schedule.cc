#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "core/device_planner.h"
#include "core/plan_into.h"
#include "core/plan_rules.h"
#include "core/schedule_layout.h"
#include "dcpmla/backend.h"
#include "dcpmla/error.h"
#include "dcpmla/schedule.h"

namespace dcpmla {
namespace {

using planner::align16;

std::string describe(const ScheduleCapacity& c) {
  return fmt::format(
      "{} requests, {} rows, {} blocks a request, {} work items, {} merge rows, {} partial rows",
      c.requests, c.rows, c.blocks_per_request, c.work_items, c.merge_rows, c.partial_rows);
}

void validate_capacity(const ScheduleCapacity& c, const PlanConfig& config) {
  // The device planner divides by the config's sizes and must plan exactly as make_plan does.
  validate_config(config);
  DCPMLA_REQUIRE(c.requests >= 0 && c.rows >= 0 && c.blocks_per_request >= 0 && c.work_items >= 0 &&
                     c.merge_rows >= 0 && c.partial_rows >= 0,
                 ErrorCode::invalid_argument, "capacity", "non-negative counts", describe(c));
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  // Rows, pairs and partial rows are indexed with int32 on the device.
  DCPMLA_REQUIRE(c.rows <= kMax / std::max(config.num_heads, 1) &&
                     c.partial_rows <= kMax / std::max(config.num_heads, 1) &&
                     c.work_items <= kMax && c.merge_rows <= kMax,
                 ErrorCode::out_of_range, "capacity",
                 fmt::format("rows and partial rows x {} heads, work items and merge rows below "
                             "2^31",
                             config.num_heads),
                 describe(c));
}

}  // namespace

const char* to_string(ScheduleFault fault) {
  switch (fault) {
    case ScheduleFault::none:
      return "none";
    case ScheduleFault::first_start_not_zero:
      return "query_start_loc[0] must be 0";
    case ScheduleFault::query_not_increasing:
      return "query_start_loc must increase (every request has Q >= 1)";
    case ScheduleFault::length_below_query:
      return "seq_lens must be >= the request's query tokens (T includes them)";
    case ScheduleFault::rows_over_capacity:
      return "query_start_loc[B] must be <= num_tokens (the decode's rows)";
    case ScheduleFault::blocks_over_capacity:
      return "a request's KV must fit capacity.blocks_per_request blocks";
    case ScheduleFault::work_over_capacity:
      return "the plan's work items exceed the capacity";
    case ScheduleFault::merges_over_capacity:
      return "the plan's merge rows exceed the capacity";
    case ScheduleFault::partials_over_capacity:
      return "the plan's split-KV partial rows exceed the capacity";
  }
  return "unknown fault";
}

ScheduleStatus decode_fault(std::uint64_t fault) {
  ScheduleStatus st;
  if (fault == kNoFault) return st;
  const auto rule = std::int32_t(fault & 0xff);
  st.fault = rule >= 1 && rule <= std::int32_t(ScheduleFault::partials_over_capacity)
                 ? ScheduleFault(rule)
                 : ScheduleFault::work_over_capacity;
  st.request = std::int32_t(std::int64_t(fault >> 8) - 1);
  st.message = st.request >= 0 ? fmt::format("request {}: {}", st.request, to_string(st.fault))
                               : fmt::format("batch: {}", to_string(st.fault));
  return st;
}

ScheduleLayout schedule_layout(const ScheduleCapacity& c) {
  ScheduleLayout l;
  l.row_bound = align16(sizeof(ScheduleHeader));
  l.merge_rows = l.row_bound + align16(std::size_t(c.rows) * sizeof(std::int32_t));
  l.items = l.merge_rows + align16(std::size_t(c.merge_rows) * sizeof(MergeRow));
  l.scratch = l.items + align16(std::size_t(c.work_items) * sizeof(WorkItem));
  l.bytes = l.scratch + planner::scratch_bytes(c.requests, c.work_items);
  return l;
}

ScheduleView schedule_view(void* memory, const ScheduleCapacity& c) {
  const ScheduleLayout l = schedule_layout(c);
  auto* base = static_cast<std::byte*>(memory);
  return {reinterpret_cast<ScheduleHeader*>(base),
          reinterpret_cast<std::int32_t*>(base + l.row_bound),
          reinterpret_cast<MergeRow*>(base + l.merge_rows),
          reinterpret_cast<WorkItem*>(base + l.items), base + l.scratch};
}

std::size_t pack_schedule(const Plan& plan, const ScheduleCapacity& c, std::byte* image) {
  const ScheduleLayout l = schedule_layout(c);
  if (!plan.work.empty()) {
    std::memcpy(image + l.items, plan.work.data(), plan.work.size() * sizeof(WorkItem));
  }
  return pack_schedule_counts(plan, std::int64_t(plan.work.size()), c, image);
}

std::size_t pack_schedule_counts(const Plan& plan, std::int64_t work_items,
                                 const ScheduleCapacity& c, std::byte* image) {
  const ScheduleLayout l = schedule_layout(c);
  const ScheduleHeader header{work_items,         std::int64_t(plan.merges.size()),
                              plan.num_real_rows, plan.num_rows,
                              kNoFault,           plan.num_partial_rows,
                              plan.max_splits,    plan.num_requests,
                              plan.num_rows};
  std::memcpy(image, &header, sizeof header);
  if (!plan.row_local_bound.empty()) {
    std::memcpy(image + l.row_bound, plan.row_local_bound.data(),
                plan.row_local_bound.size() * sizeof(std::int32_t));
  }
  if (!plan.merges.empty()) {
    std::memcpy(image + l.merge_rows, plan.merges.data(), plan.merges.size() * sizeof(MergeRow));
  }
  return l.items + std::size_t(work_items) * sizeof(WorkItem);
}

ScheduleCapacity capacity_of(const Plan& plan) {
  ScheduleCapacity c;
  c.requests = plan.num_requests;
  c.rows = plan.num_rows;
  c.blocks_per_request = plan.blocks_per_request;
  c.work_items = std::int64_t(plan.work.size());
  c.merge_rows = std::int64_t(plan.merges.size());
  c.partial_rows = plan.num_partial_rows;
  return c;
}

ScheduleCapacity max_capacity(const ScheduleCapacity& a, const ScheduleCapacity& b) {
  return {std::max(a.requests, b.requests),
          std::max(a.rows, b.rows),
          std::max(a.blocks_per_request, b.blocks_per_request),
          std::max(a.work_items, b.work_items),
          std::max(a.merge_rows, b.merge_rows),
          std::max(a.partial_rows, b.partial_rows)};
}

ScheduleCapacity capacity_for_limits(const PlanConfig& config, std::int32_t max_requests,
                                     std::int64_t max_rows, std::int32_t max_blocks_per_request) {
  DCPMLA_REQUIRE(max_requests >= 0 && max_rows >= max_requests && max_blocks_per_request >= 0,
                 ErrorCode::invalid_argument, "limits",
                 "max_requests >= 0, max_rows >= max_requests, max_blocks_per_request >= 0",
                 fmt::format("{}, {}, {}", max_requests, max_rows, max_blocks_per_request));
  validate_config(config);
  // Rows x heads are indexed with int32 on the device (the Schedule refuses more), which also
  // keeps the products below within 64 bits.
  DCPMLA_REQUIRE(
      max_rows <= std::numeric_limits<std::int32_t>::max() / config.num_heads,
      ErrorCode::out_of_range, "max_rows",
      fmt::format("at most {} rows ({} heads: 2^31 - 1 pairs)",
                  std::numeric_limits<std::int32_t>::max() / config.num_heads, config.num_heads),
      std::to_string(max_rows));
  const DeviceModel& m = config.model;
  const std::int64_t H = config.num_heads;
  // Unsplit, a batch needs one work item per tile of each request: ceil(Q H / tp) <= Q H / tp + 1
  // summed over the requests. Splits come where a batch leaves the workers idle: room for four
  // waves more. The planner never exceeds the capacity it plans for (PlanConfig's limits).
  const std::int64_t tiles =
      m.tile_pairs > 0 ? rules::ceil_div(max_rows * H, m.tile_pairs) + max_requests : max_requests;
  const bool splits = config.kv_chunk_blocks > 0 || m.workers > 0;
  ScheduleCapacity c;
  c.requests = max_requests;
  c.rows = max_rows;
  c.blocks_per_request = max_blocks_per_request;
  c.merge_rows = splits ? max_rows : 0;
  if (config.kv_chunk_blocks > 0) {
    // A forced chunk splits every request it exceeds, whatever the capacity.
    const std::int64_t most =
        rules::ceil_div(std::max(max_blocks_per_request, 1), config.kv_chunk_blocks);
    c.work_items = tiles * most;
    c.partial_rows = most > 1 ? max_rows * most : 0;
    return c;
  }
  c.work_items = tiles + (splits ? 4 * std::int64_t(std::max(m.workers, 1)) : 0);
  // A split work item holds at most tile_pairs / H + 1 rows of partials.
  const std::int64_t rows_per_item = m.tile_pairs > 0 ? m.tile_pairs / H + 1 : max_rows;
  c.partial_rows = splits ? std::min(c.work_items * rows_per_item,
                                     max_rows * 2 * std::int64_t(std::max(m.workers, 1)))
                          : 0;
  return c;
}

std::size_t schedule_bytes(const ScheduleCapacity& capacity) {
  return schedule_layout(capacity).bytes;
}

Schedule::Schedule(Backend& backend, const PlanConfig& config, const ScheduleCapacity& capacity,
                   void* memory, std::size_t bytes)
    : backend_(&backend), config_(config), capacity_(capacity), memory_(memory) {
  validate_capacity(capacity, config);
  const std::size_t need = schedule_bytes(capacity);
  DCPMLA_REQUIRE(bytes >= need && memory != nullptr, ErrorCode::shape_mismatch, "memory",
                 fmt::format(">= {} bytes (schedule_bytes)", need),
                 fmt::format("{} bytes at {}", bytes, memory));
  DCPMLA_REQUIRE(reinterpret_cast<std::uintptr_t>(memory) % 16 == 0, ErrorCode::invalid_argument,
                 "memory", "a 16-byte aligned address", fmt::format("{}", memory));
  limit_config();
}

void Schedule::limit_config() {
  auto clamp = [](std::int64_t limit, std::int64_t cap) {
    return limit < 0 ? cap : std::min(limit, cap);
  };
  config_.max_work_items = clamp(config_.max_work_items, capacity_.work_items);
  config_.max_partial_rows = clamp(config_.max_partial_rows, capacity_.partial_rows);
}

Schedule::Schedule(Backend& backend, const PlanConfig& config, const ScheduleCapacity& capacity)
    : backend_(&backend), config_(config), capacity_(capacity) {
  validate_capacity(capacity, config);
  memory_ = backend.allocate(schedule_bytes(capacity));
  owned_ = true;
  limit_config();
}

Schedule::Schedule(Schedule&& o) noexcept
    : backend_(o.backend_),
      config_(o.config_),
      capacity_(o.capacity_),
      memory_(std::exchange(o.memory_, nullptr)),
      owned_(std::exchange(o.owned_, false)),
      host_(o.host_),
      state_(std::move(o.state_)) {}

Schedule& Schedule::operator=(Schedule&& o) noexcept {
  if (this != &o) {
    state_.reset();  // staging first: it may wait for copies into memory_
    if (owned_ && memory_) backend_->deallocate(memory_);
    backend_ = o.backend_;
    config_ = o.config_;
    capacity_ = o.capacity_;
    memory_ = std::exchange(o.memory_, nullptr);
    owned_ = std::exchange(o.owned_, false);
    host_ = o.host_;
    state_ = std::move(o.state_);
  }
  return *this;
}

Schedule::~Schedule() {
  state_.reset();  // staging first: it may wait for copies into memory_
  if (owned_ && memory_) backend_->deallocate(memory_);
}

bool Schedule::accepts(const PlanConfig& c) const {
  return c.num_heads == config_.num_heads && c.block_size == config_.block_size &&
         c.num_blocks == config_.num_blocks && c.sharding.world == config_.sharding.world &&
         c.sharding.rank == config_.sharding.rank &&
         c.sharding.interleave == config_.sharding.interleave &&
         c.model.tile_pairs == config_.model.tile_pairs;
}

void Schedule::require_fits(const ScheduleCapacity& need) const {
  DCPMLA_REQUIRE(max_capacity(need, capacity_) == capacity_, ErrorCode::shape_mismatch, "plan",
                 "a plan within the schedule's capacity: " + describe(capacity_), describe(need));
}

void Schedule::update(const Plan& plan, Stream s) {
  const PlanConfig& c = plan.config;
  DCPMLA_REQUIRE(
      accepts(c), ErrorCode::inconsistent, "plan.config",
      fmt::format("the schedule's: {} heads, block size {}, {} cache blocks, rank {} "
                  "of {} (interleave {}), {} pairs a work item",
                  config_.num_heads, config_.block_size, config_.num_blocks, config_.sharding.rank,
                  config_.sharding.world, config_.sharding.interleave, config_.model.tile_pairs),
      fmt::format("{} heads, block size {}, {} cache blocks, rank {} of {} "
                  "(interleave {}), {} pairs a work item",
                  c.num_heads, c.block_size, c.num_blocks, c.sharding.rank, c.sharding.world,
                  c.sharding.interleave, c.model.tile_pairs));
  require_fits(capacity_of(plan));
  backend_->write_schedule(
      *this, [&](std::byte* image) { return pack_schedule(plan, capacity_, image); }, s);
  const auto items = std::int64_t(plan.work.size());
  host_ = {true,
           false,
           plan.num_requests,
           plan.num_rows,
           plan.num_real_rows,
           items,
           std::int64_t(plan.merges.size()),
           plan.max_splits,
           plan.kv_shared_tokens > plan.kv_alone_tokens};
}

void Schedule::plan(const Batch& batch, Stream s) {
  const std::size_t items_offset = schedule_layout(capacity_).items;
  HostView view;
  backend_->write_schedule(
      *this,
      [&](std::byte* image) {
        auto* items = reinterpret_cast<WorkItem*>(image + items_offset);
        std::int64_t n = 0;
        const Plan made = make_plan_into(batch, config_, [&](Plan& p, std::int64_t count) {
          ScheduleCapacity need = capacity_of(p);
          need.work_items = count;
          require_fits(need);
          n = count;
          return items;
        });
        view = {true,
                false,
                made.num_requests,
                made.num_rows,
                made.num_real_rows,
                n,
                std::int64_t(made.merges.size()),
                made.max_splits,
                made.kv_shared_tokens > made.kv_alone_tokens};
        return pack_schedule_counts(made, n, capacity_, image);
      },
      s);
  host_ = view;
}

void Schedule::plan_on_device(const DeviceBatchRef& batch, Stream s) {
  DCPMLA_REQUIRE(batch.seq_lens.shape.size() == 1, ErrorCode::shape_mismatch, "seq_lens",
                 "shape [B] (one dimension)", shape_string(batch.seq_lens.shape));
  const std::int64_t B = batch.seq_lens.shape[0];
  check_tensor(batch.seq_lens, "seq_lens", DType::i32, {B});
  check_tensor(batch.query_start_loc, "query_start_loc", DType::i32, {B + 1});
  DCPMLA_REQUIRE(B <= capacity_.requests, ErrorCode::shape_mismatch, "seq_lens",
                 fmt::format("at most {} requests (the schedule's capacity)", capacity_.requests),
                 fmt::format("{} requests", B));
  const std::int64_t N = batch.num_tokens < 0 ? capacity_.rows : batch.num_tokens;
  DCPMLA_REQUIRE(N <= capacity_.rows, ErrorCode::shape_mismatch, "num_tokens",
                 fmt::format("at most {} rows (the schedule's capacity)", capacity_.rows),
                 std::to_string(N));
  DCPMLA_REQUIRE(capacity_.work_items <= planner::kMaxSortKeys &&
                     capacity_.requests <= planner::kMaxSortKeys &&
                     config_.model.workers <= planner::kMaxWorkers,
                 ErrorCode::unsupported, "schedule",
                 fmt::format("at most {} requests and work items and a model of at most {} "
                             "workers for planning on the device",
                             planner::kMaxSortKeys, planner::kMaxWorkers),
                 fmt::format("{} requests, {} work items, {} workers", capacity_.requests,
                             capacity_.work_items, config_.model.workers));
  const std::int64_t H = config_.num_heads;
  DCPMLA_REQUIRE(capacity_.rows * H <= std::numeric_limits<std::int32_t>::max(),
                 ErrorCode::unsupported, "schedule",
                 "rows x num_heads below 2^31 for planning on the device (a request's pairs are "
                 "counted in int32)",
                 fmt::format("{} rows x {} heads", capacity_.rows, H));
  backend_->plan_schedule(*this, batch, N, s);
  host_ = {
      true, true, std::int32_t(B), N, -1, -1, -1,
      // The split merge's kernel for few splits merges any count correctly.
      1,
      // Bulk copies that keep the KV in L2 pay where a request's rows need several tiles.
      B > 0 && config_.model.tile_pairs > 0 && N * H > std::int64_t(config_.model.tile_pairs) * B};
}

ScheduleStatus Schedule::status(Stream s) const {
  std::uint64_t fault = kNoFault;
  if (!host_.on_device) return {};
  backend_->download(&fault, &static_cast<ScheduleHeader*>(memory_)->fault, sizeof fault, s);
  backend_->synchronize(s);
  return decode_fault(fault);
}

}  // namespace dcpmla
