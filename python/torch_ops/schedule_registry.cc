#include "schedule_registry.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "dcpmla/backend.h"
#include "dcpmla/error.h"

namespace dcpmla::torch_ops {
namespace {

struct Entry {
  Place place;
  std::size_t bytes = 0;
  std::unique_ptr<Schedule> schedule;
};

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<const void*, Entry>& registry() {
  static std::map<const void*, Entry> entries;
  return entries;
}

bool same_config(const PlanConfig& a, const PlanConfig& b) {
  return a.num_heads == b.num_heads && a.block_size == b.block_size &&
         a.num_blocks == b.num_blocks && a.sharding.world == b.sharding.world &&
         a.sharding.rank == b.sharding.rank && a.sharding.interleave == b.sharding.interleave &&
         a.model.workers == b.model.workers && a.model.tile_pairs == b.model.tile_pairs &&
         a.model.min_split_tokens == b.model.min_split_tokens;
}

}  // namespace

PlanConfig plan_config(const std::vector<std::int64_t>& c, const Backend& backend) {
  DCPMLA_REQUIRE(c.size() == 6, ErrorCode::invalid_argument, "config",
                 "[num_heads, block_size, num_blocks, dcp_world_size, dcp_rank, dcp_interleave]",
                 fmt::format("{} values", c.size()));
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  const char* names[] = {"num_heads", "block_size", "num_blocks"};
  for (int i = 0; i < 3; ++i) {
    DCPMLA_REQUIRE(c[i] >= 1 && (i == 2 || c[i] <= kMax), ErrorCode::invalid_argument, names[i],
                   ">= 1", std::to_string(c[i]));
  }
  for (int i = 3; i < 6; ++i) {
    DCPMLA_REQUIRE(c[i] >= 0 && c[i] <= kMax, ErrorCode::invalid_argument,
                   i == 3   ? "world"
                   : i == 4 ? "rank"
                            : "interleave",
                   "a 32-bit count", std::to_string(c[i]));
  }
  PlanConfig config;
  config.num_heads = int(c[0]);
  config.block_size = int(c[1]);
  config.num_blocks = c[2];
  config.sharding = {int(c[3]), int(c[4]), int(c[5])};
  config.sharding.validate(config.block_size);
  config.model = backend.device_model();
  return config;
}

ScheduleCapacity capacity(const PlanConfig& config, const std::vector<std::int64_t>& l) {
  DCPMLA_REQUIRE(l.size() == 3, ErrorCode::invalid_argument, "limits",
                 "[max_num_reqs, max_num_tokens, max_blocks_per_req]",
                 fmt::format("{} values", l.size()));
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  DCPMLA_REQUIRE(l[0] >= 1 && l[0] <= kMax, ErrorCode::invalid_argument, "max_num_reqs",
                 "in [1, 2^31)", std::to_string(l[0]));
  DCPMLA_REQUIRE(l[1] >= l[0] && l[1] <= kMax, ErrorCode::invalid_argument, "max_num_tokens",
                 fmt::format("in [max_num_reqs = {}, 2^31)", l[0]), std::to_string(l[1]));
  DCPMLA_REQUIRE(l[2] >= 1 && l[2] <= kMax, ErrorCode::invalid_argument, "max_blocks_per_req",
                 "in [1, 2^31)", std::to_string(l[2]));
  return capacity_for_limits(config, std::int32_t(l[0]), l[1], std::int32_t(l[2]));
}

Schedule& prepare_schedule(Place place, Backend& backend, const PlanConfig& config,
                           const ScheduleCapacity& cap, const TensorRef& memory) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  Entry& e = registry()[memory.data];
  if (e.schedule && e.place == place && e.bytes == memory.bytes() &&
      same_config(e.schedule->config(), config) && e.schedule->capacity() == cap) {
    return *e.schedule;
  }
  try {
    e.schedule.reset();
    e.schedule = std::make_unique<Schedule>(backend, config, cap, memory.data, memory.bytes());
  } catch (...) {
    registry().erase(memory.data);
    throw;
  }
  e.place = place;
  e.bytes = memory.bytes();
  return *e.schedule;
}

Schedule& registered_schedule(Place place, const TensorRef& memory, const char* name) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  const auto it = registry().find(memory.data);
  DCPMLA_REQUIRE(
      it != registry().end() && it->second.bytes <= memory.bytes() && it->second.place == place,
      ErrorCode::invalid_argument, name,
      fmt::format("a schedule tensor on {} that plan_host_ or plan_device_ wrote", describe(place)),
      it == registry().end() ? "a tensor no plan was written into"
                             : "a smaller tensor or one on another device");
  return *it->second.schedule;
}

void release_schedule(const void* memory) {
  const std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(memory);
}

}  // namespace dcpmla::torch_ops
