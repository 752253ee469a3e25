#include <fmt/format.h>

#include "dcpmla/backend.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "device_backends.h"
#include "error_translation.h"
#include "ops.h"
#include "schedule_registry.h"

namespace dcpmla::torch_ops {
namespace {

const python::ArgumentNames kPlanNames = {{"total_len", "seq_lens"},
                                          {"world", "dcp_world_size"},
                                          {"rank", "dcp_rank"},
                                          {"interleave", "dcp_interleave"},
                                          {"memory", "schedule"}};

constexpr std::size_t kScheduleAlignment = 16;

// An int32 or int64 CPU tensor of n values as int64.
std::vector<std::int64_t> host_values(const Tensor& t, const char* name, std::int64_t n,
                                      const char* layout) {
  const TensorRef v = tensor_arg(t, name, {DType::i32, DType::i64}, {n}, layout, Place{});
  std::vector<std::int64_t> values(static_cast<std::size_t>(v.shape[0]));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] =
        v.dtype == DType::i32 ? v.as<const std::int32_t>()[i] : v.as<const std::int64_t>()[i];
  }
  return values;
}

Batch host_batch(const Tensor& query_start_loc, const Tensor& seq_lens, std::int64_t num_tokens,
                 const std::vector<std::string>& mask) {
  Batch batch;
  const std::int64_t B = seq_lens.defined() && seq_lens.dim() == 1 ? seq_lens.size(0) : -1;
  const auto lens = host_values(seq_lens, "seq_lens", -1, "[num_reqs]");
  const auto starts = host_values(query_start_loc, "query_start_loc", B + 1, "[num_reqs + 1]");
  batch.total_len = lens;
  batch.query_start_loc.reserve(starts.size());
  for (std::size_t i = 0; i < starts.size(); ++i) {
    DCPMLA_REQUIRE(starts[i] >= 0 && starts[i] <= std::numeric_limits<std::int32_t>::max(),
                   ErrorCode::out_of_range, fmt::format("query_start_loc[{}]", i),
                   "a row index in [0, 2^31)", std::to_string(starts[i]));
    batch.query_start_loc.push_back(std::int32_t(starts[i]));
  }
  DCPMLA_REQUIRE(mask.size() <= 1 || std::int64_t(mask.size()) == B, ErrorCode::shape_mismatch,
                 "mask", fmt::format("one mask or {} (one a request)", B),
                 fmt::format("{} masks", mask.size()));
  for (std::size_t b = 0; b < (mask.empty() ? 0 : std::size_t(B)); ++b) {
    batch.mask.push_back(parse_mask(mask[mask.size() == 1 ? 0 : b], "mask"));
  }
  batch.num_tokens = num_tokens;
  return batch;
}

}  // namespace

std::vector<std::int64_t> schedule_sizes(std::int64_t device, std::vector<std::int64_t> config,
                                         std::vector<std::int64_t> limits) {
  return translated(kPlanNames, [&] {
    DCPMLA_REQUIRE(device >= -1 && device < 65536, ErrorCode::invalid_argument, "device",
                   "-1 (cpu) or a CUDA device index", std::to_string(device));
    const BackendCall call(Place{int(device)});
    const PlanConfig c = plan_config(config, call.backend());
    const ScheduleCapacity cap = capacity(c, limits);
    return std::vector<std::int64_t>{
        std::int64_t(schedule_bytes(cap)),
        std::int64_t(decode_workspace_bytes(cap.partial_rows, c.num_heads))};
  });
}

std::vector<std::int64_t> plan_host(Tensor schedule, Tensor query_start_loc, Tensor seq_lens,
                                    std::int64_t num_tokens, std::vector<std::string> mask,
                                    std::vector<std::int64_t> config,
                                    std::vector<std::int64_t> limits) {
  return translated(kPlanNames, [&] {
    const Place place = place_of(schedule, "schedule");
    const TensorRef memory = bytes_arg(schedule, "schedule", place, kScheduleAlignment);
    const Batch batch = host_batch(query_start_loc, seq_lens, num_tokens, mask);
    const BackendCall call(place);
    const PlanConfig c = plan_config(config, call.backend());
    const auto sizes = [&](const ScheduleCapacity& cap) {
      return std::vector<std::int64_t>{
          std::int64_t(schedule_bytes(cap)),
          std::int64_t(decode_workspace_bytes(cap.partial_rows, c.num_heads))};
    };
    if (limits != std::vector<std::int64_t>{-1, -1, -1}) {
      const ScheduleCapacity cap = capacity(c, limits);
      Schedule& s = prepare_schedule(place, call.backend(), c, cap, memory);
      s.plan(batch, call.stream());
      return sizes(cap);
    }
    // Fit the batch: exactly the capacity its plan needs (the host state of the schedule is made
    // again when that changes; its memory is reused while large enough).
    const Plan plan = make_plan(batch, c);
    const ScheduleCapacity cap = capacity_of(plan);
    if (memory.bytes() < schedule_bytes(cap)) return sizes(cap);  // the caller grows it
    prepare_schedule(place, call.backend(), c, cap, memory).update(plan, call.stream());
    return sizes(cap);
  });
}

void plan_device(Tensor schedule, Tensor query_start_loc, Tensor seq_lens, std::int64_t num_tokens,
                 std::vector<std::int64_t> config, std::vector<std::int64_t> limits) {
  translated(kPlanNames, [&] {
    const Place place = place_of(schedule, "schedule");
    const TensorRef memory = bytes_arg(schedule, "schedule", place, kScheduleAlignment);
    DeviceBatchRef batch;
    batch.seq_lens = tensor_arg(seq_lens, "seq_lens", {DType::i32}, {-1}, "[num_reqs]", place);
    batch.query_start_loc = tensor_arg(query_start_loc, "query_start_loc", {DType::i32},
                                       {batch.seq_lens.shape[0] + 1}, "[num_reqs + 1]", place);
    batch.num_tokens = num_tokens;
    const BackendCall call(place);
    const PlanConfig c = plan_config(config, call.backend());
    Schedule& s = prepare_schedule(place, call.backend(), c, capacity(c, limits), memory);
    s.plan_on_device(batch, call.stream());
  });
}

std::tuple<std::int64_t, std::int64_t, std::string> schedule_status(Tensor schedule) {
  return translated(kPlanNames, [&] {
    const Place place = place_of(schedule, "schedule");
    const TensorRef memory = bytes_arg(schedule, "schedule", place, kScheduleAlignment);
    Schedule& s = registered_schedule(place, memory, "schedule");
    const BackendCall call(place);
    const ScheduleStatus st = s.status(call.stream());
    return std::tuple<std::int64_t, std::int64_t, std::string>(std::int64_t(st.fault), st.request,
                                                               st.message);
  });
}

void schedule_release(Tensor schedule) {
  translated(kPlanNames, [&] {
    if (schedule.defined()) release_schedule(schedule.data_ptr());
  });
}

bool has_cuda_backend() {
  return built_with_cuda();
}

}  // namespace dcpmla::torch_ops
