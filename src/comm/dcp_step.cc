#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "dcpmla/dcp.h"
#include "dcpmla/error.h"

namespace dcpmla {

const char* to_string(Combine c) {
  return c == Combine::ag_rs ? "ag_rs" : "a2a";
}

Combine parse_combine(std::string_view text, const std::string& argument) {
  if (text == "ag_rs") return Combine::ag_rs;
  if (text == "a2a") return Combine::a2a;
  throw Error(ErrorCode::invalid_argument, argument, "ag_rs or a2a", "'" + std::string(text) + "'");
}

DcpWorkspace::DcpWorkspace(Backend& backend, int world_, std::int64_t max_rows_,
                           int heads_per_rank_, DType q_dtype_, std::size_t decode_bytes)
    : world(world_), max_rows(max_rows_), heads_per_rank(heads_per_rank_), q_dtype(q_dtype_) {
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
  DCPMLA_REQUIRE(max_rows >= 0, ErrorCode::invalid_argument, "max_rows", ">= 0",
                 std::to_string(max_rows));
  DCPMLA_REQUIRE(heads_per_rank >= 1, ErrorCode::invalid_argument, "heads_per_rank", ">= 1",
                 std::to_string(heads_per_rank));
  // Rows x heads are indexed with int32 (as a plan's), which keeps every size below in range.
  const std::int64_t heads = std::int64_t(world) * heads_per_rank;
  const std::int64_t most_rows = std::numeric_limits<std::int32_t>::max() / heads;
  DCPMLA_REQUIRE(max_rows <= most_rows, ErrorCode::out_of_range, "max_rows",
                 fmt::format("at most {} rows ({} heads: 2^31 - 1 pairs)", most_rows, heads),
                 std::to_string(max_rows));
  const std::size_t W = world, N = max_rows, Hl = heads_per_rank, H = W * Hl;
  gathered_q = DeviceBuffer(backend, W * N * Hl * kHeadDim * dtype_size(q_dtype));
  partial_out = DeviceBuffer(backend, N * H * kLatentDim * 4);
  partial_lse = DeviceBuffer(backend, N * H * 4);
  send_out = DeviceBuffer(backend, W * N * Hl * kPackedRow * 4);
  recv_out = DeviceBuffer(backend, W * N * Hl * kPackedRow * 4);
  recv_lse = DeviceBuffer(backend, W * N * H * 4);
  decode = DeviceBuffer(backend, decode_bytes);
}

std::size_t dcp_exchange_chunk_bytes(int world, std::int64_t max_rows, int heads_per_rank,
                                     DType q_dtype) {
  const std::size_t W = std::size_t(std::max(world, 0)),
                    N = std::size_t(std::max<std::int64_t>(max_rows, 0)),
                    Hl = std::size_t(std::max(heads_per_rank, 0));
  const std::size_t query = N * Hl * kHeadDim * dtype_size(q_dtype);
  const std::size_t lse = N * W * Hl * 4;
  const std::size_t rows = N * Hl * std::max<std::size_t>(kPackedRow, kLatentDim) * 4;
  return std::max({query, lse, rows});
}

std::size_t DcpWorkspace::exchange_chunk_bytes() const {
  return dcp_exchange_chunk_bytes(world, max_rows, heads_per_rank, q_dtype);
}

void dcp_step(Backend& backend, Communicator& comm, DcpWorkspace& ws, const DcpStepArgs& a,
              Stream s) {
  DecodeArgs decode;
  decode.plan = a.plan;
  decode.schedule = a.schedule;
  const DecodeShape shape = decode_shape(decode);
  const PlanConfig& config = *shape.config;
  const auto& sh = config.sharding;
  const int W = comm.world();
  DCPMLA_REQUIRE(sh.world == W, ErrorCode::inconsistent, "plan.config.sharding.world",
                 fmt::format("the communicator's world {}", W), std::to_string(sh.world));
  DCPMLA_REQUIRE(sh.rank == comm.rank(), ErrorCode::inconsistent, "plan.config.sharding.rank",
                 fmt::format("the communicator's rank {}", comm.rank()), std::to_string(sh.rank));
  const std::int64_t N = shape.rows, H = config.num_heads;
  DCPMLA_REQUIRE(H % W == 0, ErrorCode::shape_mismatch, "num_heads",
                 fmt::format("a multiple of world {} (the query is gathered over heads)", W),
                 std::to_string(H));
  const std::int64_t Hl = H / W;
  check_tensor(a.q_local, "q_local", {DType::f32, DType::bf16}, {N, Hl, kHeadDim});
  check_tensor(a.out, "out", {DType::f32, DType::bf16}, {N, Hl, kLatentDim});
  check_tensor(a.lse, "lse", DType::f32, {N, Hl});
  DCPMLA_REQUIRE(
      ws.world == W && ws.heads_per_rank == Hl && ws.q_dtype == a.q_local.dtype,
      ErrorCode::inconsistent, "workspace",
      fmt::format("world {}, {} heads per rank, q dtype {}", W, Hl, to_string(a.q_local.dtype)),
      fmt::format("world {}, {} heads per rank, q dtype {}", ws.world, ws.heads_per_rank,
                  to_string(ws.q_dtype)));
  DCPMLA_REQUIRE(N <= ws.max_rows, ErrorCode::shape_mismatch, "workspace.max_rows",
                 fmt::format(">= {} rows", N), std::to_string(ws.max_rows));

  const DType qt = a.q_local.dtype;
  const TensorRef gathered = ws.gathered_q.tensor(qt, {W, N, Hl, kHeadDim});
  const TensorRef partial_out = ws.partial_out.tensor(DType::f32, {N, H, kLatentDim});
  const TensorRef partial_lse = ws.partial_lse.tensor(DType::f32, {N, H});
  // The decode reads the query where the all-gather leaves it, so no unpack launch follows it.
  decode.q = gathered;
  decode.cache = a.cache;
  decode.block_table = a.block_table;
  decode.out = partial_out;
  decode.lse = partial_lse;
  decode.softmax_scale = a.softmax_scale;
  decode.q_scale = a.q_scale;
  decode.workspace = ws.decode.tensor(DType::fp8_e4m3, {std::int64_t(ws.decode.bytes())});
  DCPMLA_REQUIRE(a.combine_payload == DType::f32 ||
                     (a.combine_payload == DType::bf16 && a.combine == Combine::a2a),
                 ErrorCode::invalid_argument, "combine_payload",
                 "f32, or bf16 with the a2a combine (ag_rs sums in fp32)",
                 fmt::format("{} with {}", to_string(a.combine_payload), to_string(a.combine)));
  const DType pt = a.combine_payload;
  const std::int64_t row = packed_row(pt);
  // The workspace is sized for the fp32 rows, which are the larger.
  const TensorRef send = ws.send_out.tensor(pt, {W, N, Hl, row});
  const TensorRef recv = ws.recv_out.tensor(pt, {W, N, Hl, row});
  if (W > 1 && a.combine == Combine::a2a) {
    // The decode writes the all-to-all send rows itself: its fp32 result never goes through
    // memory and no pack launch follows it.
    decode.out = {};
    decode.lse = {};
    decode.send_world = W;
    decode.send = send;
  }
  // Every check happens before the first collective, so bad input cannot leave peers waiting
  // in a collective this rank never joins (when all ranks see the same bad input).
  DCPMLA_REQUIRE(shape.workspace_bytes <= ws.decode.bytes(), ErrorCode::shape_mismatch,
                 "workspace.decode", fmt::format(">= {} bytes", shape.workspace_bytes),
                 std::to_string(ws.decode.bytes()));
  validate(decode);
  // No DCP: the local query is the whole query and the local result the final one (a merge of
  // one partial is the identity, bit for bit), so decode straight into out and lse.
  DecodeArgs direct = decode;
  direct.q = a.q_local;
  direct.out = a.out;
  direct.lse = a.lse;
  const DecodeArgs& run = W == 1 ? direct : decode;
  backend.accept_decode(run, s);

  if (W == 1) {
    backend.run_decode(direct, s);
    return;
  }
  comm.all_gather(a.q_local.data, gathered.data, std::size_t(N * Hl * kHeadDim), qt, s);
  backend.run_decode(decode, s);

  if (a.combine == Combine::ag_rs) {
    const TensorRef all_lse = ws.recv_lse.tensor(DType::f32, {W, N, H});
    const TensorRef send = ws.send_out.tensor(DType::f32, {W, N, Hl, kLatentDim});
    const TensorRef summed = ws.recv_out.tensor(DType::f32, {N, Hl, kLatentDim});
    comm.all_gather(partial_lse.data, all_lse.data, std::size_t(N * H), DType::f32, s);
    backend.combine_rescale({W, sh.rank, all_lse, partial_out, send, a.lse}, s);
    comm.reduce_scatter_sum(send.as<const float>(), summed.as<float>(),
                            std::size_t(N * Hl * kLatentDim), s);
    backend.convert({summed, a.out}, s);
  } else {
    // This rank's own rows stay in send (chunk `rank`): only the peers' chunks move.
    comm.all_to_all_peers(send.data, recv.data, std::size_t(N * Hl * row), pt, s);
    const TensorRef own(static_cast<std::uint8_t*>(send.data) +
                            std::size_t(sh.rank * N * Hl * row) * dtype_size(pt),
                        pt, {N, Hl, row});
    backend.combine_merge({recv, a.out, a.lse, sh.rank, own}, s);
  }
}

}  // namespace dcpmla
