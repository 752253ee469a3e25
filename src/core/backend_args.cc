// Validation of every backend argument struct: one place, run before any output is written.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dcpmla/backend.h"
#include "dcpmla/error.h"

namespace dcpmla {
namespace {

void require_world_divides_heads(int world, std::int64_t heads, const std::string& argument) {
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
  DCPMLA_REQUIRE(heads % world == 0, ErrorCode::shape_mismatch, argument,
                 fmt::format("a head count divisible by world {}", world), std::to_string(heads));
}

std::int64_t dim(const TensorRef& t, std::size_t i) {
  return i < t.shape.size() ? t.shape[i] : -1;
}

}  // namespace

void validate_slot_values(const KvWriteArgs& a) {
  const auto n = a.slots.shape[0];
  const auto capacity = a.cache.num_blocks * a.cache.block_size;
  const auto* slots = a.slots.as<const std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    if (slots[i] >= -1 && slots[i] < capacity) continue;
    DCPMLA_REQUIRE(slots[i] >= -1 && slots[i] < capacity, ErrorCode::out_of_range,
                   fmt::format("slots[{}]", i), fmt::format("-1 or a slot in [0, {})", capacity),
                   std::to_string(slots[i]));
  }
}

void validate(const KvWriteArgs& a) {
  validate_cache(a.cache, "cache");
  const auto n = dim(a.latents, 0);
  check_tensor(a.latents, "latents", {DType::f32, DType::bf16}, {n, kHeadDim});
  check_tensor(a.slots, "slots", DType::i64, {n});
}

DecodeShape decode_shape(const DecodeArgs& a) {
  DCPMLA_REQUIRE((a.plan != nullptr) != (a.schedule != nullptr), ErrorCode::invalid_argument,
                 a.plan ? "schedule" : "plan", "exactly one of plan and schedule",
                 a.plan ? "both" : "neither");
  if (a.plan) {
    const Plan& p = *a.plan;
    return {&p.config, p.num_rows, p.num_requests, p.blocks_per_request, decode_workspace_bytes(p)};
  }
  const Schedule& s = *a.schedule;
  const Schedule::HostView& h = s.host_view();
  DCPMLA_REQUIRE(h.written, ErrorCode::invalid_argument, "schedule",
                 "a schedule written by update or plan_on_device", "one never written");
  return {&s.config(), h.rows, h.requests, s.capacity().blocks_per_request,
          decode_workspace_bytes(s.capacity().partial_rows, s.config().num_heads)};
}

void validate(const DecodeArgs& a) {
  const DecodeShape shape = decode_shape(a);
  const PlanConfig& config = *shape.config;
  const auto rows = shape.rows;
  const auto H = std::int64_t(config.num_heads);
  validate_cache(a.cache, "cache");
  DCPMLA_REQUIRE(a.cache.block_size == config.block_size, ErrorCode::inconsistent,
                 "cache.block_size", fmt::format("the plan's block_size {}", config.block_size),
                 std::to_string(a.cache.block_size));
  DCPMLA_REQUIRE(a.cache.num_blocks == config.num_blocks, ErrorCode::inconsistent,
                 "cache.num_blocks", fmt::format("the plan's num_blocks {}", config.num_blocks),
                 std::to_string(a.cache.num_blocks));
  const bool gathered = query_is_gathered(a);
  DCPMLA_REQUIRE(dim(a.q, gathered ? 1 : 0) == rows, ErrorCode::shape_mismatch, "q",
                 fmt::format("{} rows (the batch's query_start_loc and padding)", rows),
                 fmt::format("{} rows", dim(a.q, gathered ? 1 : 0)));
  if (gathered) {
    const auto W = dim(a.q, 0);
    DCPMLA_REQUIRE(
        W >= 1 && H % W == 0, ErrorCode::shape_mismatch, "q",
        fmt::format("[W, {}, H / W, {}] with W dividing the plan's {} heads", rows, kHeadDim, H),
        shape_string(a.q.shape));
    check_tensor(a.q, "q", {DType::f32, DType::bf16}, {W, rows, H / W, kHeadDim});
  } else {
    check_tensor(a.q, "q", {DType::f32, DType::bf16}, {rows, H, kHeadDim});
  }
  DCPMLA_REQUIRE(a.block_table.dtype == DType::i32, ErrorCode::dtype_mismatch, "block_table",
                 "dtype i32", to_string(a.block_table.dtype));
  DCPMLA_REQUIRE(
      a.block_table.shape.size() == 2 && dim(a.block_table, 0) >= shape.requests &&
          dim(a.block_table, 1) >= shape.blocks_per_request &&
          (a.block_table.data != nullptr || a.block_table.numel() == 0),
      ErrorCode::shape_mismatch, "block_table",
      fmt::format("i32 [>= {}, >= {}] (the plan's requests and blocks a request)", shape.requests,
                  shape.blocks_per_request),
      fmt::format("{} {}", to_string(a.block_table.dtype), shape_string(a.block_table.shape)));
  if (decodes_into_send(a)) {
    DCPMLA_REQUIRE(a.out.data == nullptr && a.lse.data == nullptr, ErrorCode::invalid_argument,
                   a.out.data ? "out" : "lse", "empty (the decode writes send instead)",
                   "a buffer");
    DCPMLA_REQUIRE(a.send_world >= 1 && H % a.send_world == 0, ErrorCode::invalid_argument,
                   "send_world", fmt::format("a divisor of the plan's {} heads", H),
                   std::to_string(a.send_world));
    const std::int64_t W = a.send_world;
    check_tensor(a.send, "send", {DType::f32, DType::bf16},
                 {W, rows, H / W, packed_row(a.send.dtype)});
  } else {
    check_tensor(a.out, "out", {DType::f32, a.q.dtype}, {rows, H, kLatentDim});
    check_tensor(a.lse, "lse", DType::f32, {rows, H});
  }
  DCPMLA_REQUIRE(std::isfinite(a.softmax_scale) && a.softmax_scale > 0.0f,
                 ErrorCode::invalid_argument, "softmax_scale", "finite and > 0",
                 fmt::format("{}", a.softmax_scale));
  DCPMLA_REQUIRE(std::isfinite(a.q_scale) && a.q_scale > 0.0f, ErrorCode::invalid_argument,
                 "q_scale", "finite and > 0", fmt::format("{}", a.q_scale));
  const auto need = shape.workspace_bytes;
  DCPMLA_REQUIRE(a.workspace.bytes() >= need && (need == 0 || a.workspace.data != nullptr),
                 ErrorCode::shape_mismatch, "workspace",
                 fmt::format(">= {} bytes (decode_workspace_bytes)", need),
                 fmt::format("{} bytes", a.workspace.bytes()));
}

void validate(const CombineRescaleArgs& a) {
  DCPMLA_REQUIRE(a.world >= 1, ErrorCode::invalid_argument, "world", ">= 1",
                 std::to_string(a.world));
  DCPMLA_REQUIRE(a.rank >= 0 && a.rank < a.world, ErrorCode::out_of_range, "rank",
                 fmt::format("in [0, {})", a.world), std::to_string(a.rank));
  const auto N = dim(a.partial_out, 0), H = dim(a.partial_out, 1);
  require_world_divides_heads(a.world, H, "partial_out");
  const auto W = std::int64_t(a.world), Hl = H / W;
  check_tensor(a.partial_out, "partial_out", DType::f32, {N, H, kLatentDim});
  check_tensor(a.gathered_lse, "gathered_lse", DType::f32, {W, N, H});
  check_tensor(a.send, "send", DType::f32, {W, N, Hl, kLatentDim});
  check_tensor(a.lse_out, "lse_out", DType::f32, {N, Hl});
}

void validate(const CombinePackArgs& a) {
  const auto N = dim(a.partial_out, 0), H = dim(a.partial_out, 1);
  require_world_divides_heads(a.world, H, "partial_out");
  const auto W = std::int64_t(a.world), Hl = H / W;
  check_tensor(a.partial_out, "partial_out", DType::f32, {N, H, kLatentDim});
  check_tensor(a.partial_lse, "partial_lse", DType::f32, {N, H});
  check_tensor(a.send, "send", {DType::f32, DType::bf16}, {W, N, Hl, packed_row(a.send.dtype)});
}

void validate(const CombineMergeArgs& a) {
  const auto W = dim(a.recv, 0), N = dim(a.recv, 1), Hl = dim(a.recv, 2);
  check_tensor(a.recv, "recv", {DType::f32, DType::bf16}, {W, N, Hl, packed_row(a.recv.dtype)});
  check_tensor(a.out, "out", {DType::f32, DType::bf16}, {N, Hl, kLatentDim});
  check_tensor(a.lse, "lse", DType::f32, {N, Hl});
  if (a.own_rank == -1 && a.own.data == nullptr && a.own.shape.empty()) return;
  DCPMLA_REQUIRE(a.own_rank >= 0 && a.own_rank < W, ErrorCode::out_of_range, "own_rank",
                 fmt::format("-1, or a rank in [0, {}) with own", W), std::to_string(a.own_rank));
  check_tensor(a.own, "own", a.recv.dtype, {N, Hl, packed_row(a.recv.dtype)});
}

void validate(const MergeStatesArgs& a) {
  const auto S = dim(a.v, 0), N = dim(a.v, 1), H = dim(a.v, 2), D = dim(a.v, 3);
  check_tensor(a.v, "v", {DType::f32, DType::bf16}, {S, N, H, D});
  DCPMLA_REQUIRE(S >= 1, ErrorCode::shape_mismatch, "v", "at least one state (S >= 1)",
                 shape_string(a.v.shape));
  check_tensor(a.s, "s", DType::f32, {S, N, H});
  check_tensor(a.v_out, "v_out", {DType::f32, a.v.dtype}, {N, H, D});
  check_tensor(a.s_out, "s_out", DType::f32, {N, H});
  // The CUDA kernel stages the S weights of a pair in shared memory; widths are int32.
  DCPMLA_REQUIRE(S <= 1024 && D <= std::numeric_limits<std::int32_t>::max(), ErrorCode::unsupported,
                 "v", "at most 1024 states of fewer than 2^31 elements", shape_string(a.v.shape));
}

void validate(const UnpackQueryArgs& a) {
  const auto W = dim(a.gathered, 0), N = dim(a.gathered, 1), Hl = dim(a.gathered, 2);
  check_tensor(a.gathered, "gathered", {DType::f32, DType::bf16}, {W, N, Hl, kHeadDim});
  check_tensor(a.q, "q", a.gathered.dtype, {N, W * Hl, kHeadDim});
}

void validate(const ConvertArgs& a) {
  DCPMLA_REQUIRE(a.src.dtype == DType::f32, ErrorCode::dtype_mismatch, "src", "dtype fp32",
                 to_string(a.src.dtype));
  DCPMLA_REQUIRE(a.src.data != nullptr || a.src.numel() == 0, ErrorCode::invalid_argument, "src",
                 "a non-null buffer", "null");
  DCPMLA_REQUIRE(a.dst.numel() == a.src.numel(), ErrorCode::shape_mismatch, "dst",
                 fmt::format("{} elements", a.src.numel()), std::to_string(a.dst.numel()));
  DCPMLA_REQUIRE(a.dst.dtype == DType::f32 || a.dst.dtype == DType::bf16, ErrorCode::dtype_mismatch,
                 "dst", "fp32 or bf16", to_string(a.dst.dtype));
  DCPMLA_REQUIRE(a.dst.data != nullptr || a.dst.numel() == 0, ErrorCode::invalid_argument, "dst",
                 "a non-null buffer", "null");
}

void Backend::accept_decode(const DecodeArgs& args, Stream s) const {
  DCPMLA_REQUIRE(args.schedule == nullptr || &args.schedule->backend() == this,
                 ErrorCode::inconsistent, "schedule",
                 fmt::format("a schedule made on this backend ({})", name()),
                 fmt::format("one of another backend ({})",
                             args.schedule ? args.schedule->backend().name() : ""));
  check_decode(args, s);
}

void Backend::decode(const DecodeArgs& args, Stream s) {
  validate(args);
  accept_decode(args, s);
  run_decode(args, s);
}

DeviceBuffer::DeviceBuffer(Backend& backend, std::size_t bytes)
    : backend_(&backend), data_(bytes ? backend.allocate(bytes) : nullptr), bytes_(bytes) {}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : backend_(o.backend_), data_(o.data_), bytes_(o.bytes_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) backend_->deallocate(data_);
    backend_ = o.backend_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) backend_->deallocate(data_);
}

TensorRef DeviceBuffer::tensor(DType t, std::vector<std::int64_t> shape) const {
  TensorRef ref(data_, t, std::move(shape));
  DCPMLA_REQUIRE(ref.bytes() <= bytes_, ErrorCode::shape_mismatch, "buffer view",
                 fmt::format("<= {} bytes", bytes_), fmt::format("{} bytes", ref.bytes()));
  return ref;
}

}  // namespace dcpmla
