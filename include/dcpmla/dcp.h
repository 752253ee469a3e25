// One DCP decode step of one rank: query all-gather over heads, local decode, combine. The decode
// reads the gathered query where the all-gather leaves it and, for the a2a combine, writes the
// all-to-all send rows itself, so no layout launch runs between the collectives.
#pragma once

#include <cstdint>
#include <string_view>

#include "dcpmla/backend.h"
#include "dcpmla/comm.h"
#include "dcpmla/plan.h"

namespace dcpmla {

enum class Combine { ag_rs, a2a };
const char* to_string(Combine c);
Combine parse_combine(std::string_view text, const std::string& argument);

// Buffers of one rank's step, allocated once through the backend and reused across steps.
class DcpWorkspace {
 public:
  // Sized for up to max_rows query rows, heads_per_rank heads on each rank, and a plan whose
  // decode workspace needs up to decode_bytes.
  DcpWorkspace(Backend& backend, int world, std::int64_t max_rows, int heads_per_rank,
               DType q_dtype, std::size_t decode_bytes);

  int world;
  std::int64_t max_rows;
  int heads_per_rank;
  DType q_dtype;
  DeviceBuffer gathered_q;   // [W, N, Hl, 576]
  DeviceBuffer partial_out;  // ag_rs: [N, W*Hl, 512] f32
  DeviceBuffer partial_lse;  // ag_rs: [N, W*Hl] f32
  DeviceBuffer send_out;     // ag_rs: [W, N, Hl, 512] f32; a2a: [W, N, Hl, 513] f32 (O, LSE)
  DeviceBuffer recv_out;     // ag_rs: [N, Hl, 512] f32;    a2a: [W, N, Hl, 513] f32
  DeviceBuffer recv_lse;     // ag_rs: [W, N, W*Hl] f32 gathered LSE
  DeviceBuffer decode;       // the plan's split-KV workspace

  // dcp_exchange_chunk_bytes for this workspace.
  std::size_t exchange_chunk_bytes() const;
};

// The largest chunk, in bytes, any collective of a step with up to max_rows rows moves per rank
// (the chunk capacity a PeerGroup needs): the query, the LSE, or the rows of either combine.
std::size_t dcp_exchange_chunk_bytes(int world, std::int64_t max_rows, int heads_per_rank,
                                     DType q_dtype);

struct DcpStepArgs {
  // This rank's plan (eager) or schedule (DecodeArgs): config.sharding.rank == comm.rank().
  const Plan* plan = nullptr;
  const Schedule* schedule = nullptr;
  TensorRef q_local;      // [N, Hl, 576]: this rank's heads of the query
  KvCacheRef cache;       // this rank's cache
  TensorRef block_table;  // [B, max_blocks] i32
  TensorRef out;          // [N, Hl, 512] f32 or bf16: this rank's heads, combined
  TensorRef lse;          // [N, Hl] f32
  float softmax_scale = 0.0f;
  float q_scale = 1.0f;
  Combine combine = Combine::ag_rs;
  // a2a: the payload of the all-to-all, f32 or bf16 (half the bytes: O is rounded to bf16 before
  // the fp32 merge; the LSE stays fp32). ag_rs sums in its collective and takes f32 only.
  DType combine_payload = DType::f32;
};

// Runs on every rank of comm's group, in the same order. Everything is validated before any
// collective starts, so a bad argument throws on its rank instead of hanging the others only if
// every rank gets the same bad input (the usual case for a shared batch description).
void dcp_step(Backend& backend, Communicator& comm, DcpWorkspace& ws, const DcpStepArgs& args,
              Stream s);

}  // namespace dcpmla
