// One DCP decode step of one rank: query all-gather over heads, local decode, combine.
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
  DeviceBuffer q;            // [N, W*Hl, 576]
  DeviceBuffer partial_out;  // [N, W*Hl, 512] f32
  DeviceBuffer partial_lse;  // [N, W*Hl] f32
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

// Points of a step at which an optional DcpStepTimer is called, in this order:
// begin | query all-gather + unpack | query_gathered | local decode | decoded | combine | combined.
enum class DcpStepPoint { begin, query_gathered, decoded, combined };
const char* to_string(DcpStepPoint p);

// The operations inside the query-gather and combine phases of a step with W >= 2, in the order
// a step enqueues them (nccl_*: one collective of the communicator; kernel_*: one backend call,
// one kernel on the CUDA backend). No layout kernel precedes the query all-gather: this rank's
// query is sent as it is.
//   query gather: nccl_all_gather_q, kernel_unpack_q (only without query_in_place)
//   ag_rs:        nccl_all_gather_lse, kernel_rescale, nccl_reduce_scatter_o, kernel_convert_o
//   a2a:          kernel_pack (only without pack_in_decode), nccl_all_to_all, kernel_merge
enum class DcpLaunch {
  nccl_all_gather_q,      // the query [N, Hl, 576] from every rank -> [W, N, Hl, 576]
  kernel_unpack_q,        // [W, N, Hl, 576] -> [N, W*Hl, 576]
  nccl_all_gather_lse,    // ag_rs: the partial LSE [N, H] f32 from every rank
  kernel_rescale,         // ag_rs: scale O by exp(lse_r - lse), write this rank's final LSE
  nccl_reduce_scatter_o,  // ag_rs: sum of the rescaled O over ranks, this rank's heads, f32
  kernel_convert_o,       // ag_rs: the summed f32 O to the output's dtype
  kernel_pack,            // a2a: (O, LSE) rows per destination rank, in the payload's dtype
  nccl_all_to_all,        // a2a: the packed rows, one chunk per peer
  kernel_merge,           // a2a: the LSE merge of the W received partials into out and lse
};
const char* to_string(DcpLaunch l);
// The phase a launch belongs to: DcpStepPoint::query_gathered (it ends the phase of the query
// gather) or DcpStepPoint::combined.
DcpStepPoint phase_of(DcpLaunch l);
// True for the nccl_* launches.
bool is_collective(DcpLaunch l);

// Optional observer of a step's phases (benchmarks): mark() runs on the calling thread, in
// stream order between the step's operations, so a CUDA implementation can record an event on
// the stream there. Must not synchronise if the step is to stay capturable.
class DcpStepTimer {
 public:
  virtual ~DcpStepTimer() = default;
  virtual void mark(DcpStepPoint point, Stream s) = 0;
  // Finer marks, called right after each launch of the query gather and the combine is enqueued
  // (W >= 2 only): the launch's time runs from the step's previous mark (a point or a launch) to
  // this one. The default ignores them, so a timer of the four points alone need not know them.
  virtual void mark_launch(DcpLaunch launch, Stream s) {
    (void)launch;
    (void)s;
  }
};

struct DcpStepArgs {
  const Plan* plan = nullptr;  // this rank's plan (plan->config.sharding.rank == comm.rank())
  TensorRef q_local;           // [N, Hl, 576]: this rank's heads of the query
  KvCacheRef cache;            // this rank's cache
  TensorRef block_table;       // [B, max_blocks] i32
  TensorRef out;               // [N, Hl, 512] f32 or bf16: this rank's heads, combined
  TensorRef lse;               // [N, Hl] f32
  float softmax_scale = 0.0f;
  float q_scale = 1.0f;
  Combine combine = Combine::ag_rs;
  // a2a: the payload of the all-to-all, f32 or bf16 (half the bytes: O is rounded to bf16 before
  // the fp32 merge; the LSE stays fp32). ag_rs sums in its collective and takes f32 only.
  DType combine_payload = DType::f32;
  // a2a: the decode writes the all-to-all send rows itself (DecodeArgs::send), so its fp32 result
  // never goes through memory and no pack launch follows it; false: decode to fp32 rows, then
  // combine_pack (the same bits, one more launch).
  bool pack_in_decode = true;
  // The decode reads the gathered query [W, N, Hl, 576] where the all-gather leaves it
  // (DecodeArgs::q's gathered form), so no unpack launch follows the gather; false: unpack to
  // [N, H, 576] first (the same bits, one more launch).
  bool query_in_place = true;
  // Optional; nullptr costs one branch per phase and launch. A timer records events between the
  // step's launches, which is meant for stream-ordered benchmark steps, not for graph capture.
  DcpStepTimer* timer = nullptr;
};

// Runs on every rank of comm's group, in the same order. Everything is validated before any
// collective starts, so a bad argument throws on its rank instead of hanging the others only if
// every rank gets the same bad input (the usual case for a shared batch description).
void dcp_step(Backend& backend, Communicator& comm, DcpWorkspace& ws, const DcpStepArgs& args,
              Stream s);

}  // namespace dcpmla
