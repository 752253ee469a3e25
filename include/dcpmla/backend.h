// The small interface every backend (cpu, cuda) implements: write KV, run a decode plan, and the
// pieces of the DCP combine. Argument structs are validated by the functions next to them, once,
// before any output is touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dcpmla/cache.h"
#include "dcpmla/plan.h"
#include "dcpmla/schedule.h"
#include "dcpmla/tensor.h"

namespace dcpmla {

// Writes a schedule's host image (its layout's bytes) and returns how many leading bytes hold
// the plan.
using ScheduleImageWriter = std::function<std::size_t(std::byte* image)>;

class Communicator;
class DcpWorkspace;
struct DcpStepArgs;

// An opaque stream handle (cudaStream_t for the CUDA backend, unused on the CPU).
using Stream = void*;

struct KvWriteArgs {
  TensorRef latents;  // [n, 576] f32 or bf16: kv_c (512) then k_pe (64) of each new token
  TensorRef slots;    // [n] i64: cache slot (block * block_size + offset) or -1 to skip
  KvCacheRef cache;
};
// Shapes and dtypes only (the slots may live in device memory).
void validate(const KvWriteArgs& args);
// Every slot is -1 or inside the cache; for slots in host memory.
void validate_slot_values(const KvWriteArgs& args);

// What a decode runs: a Schedule (what an engine uses: capturable in a CUDA graph, written from the
// host or planned on the device), or a host Plan (eager calls only: the backend writes it into a
// schedule of its own first). Exactly one of them.
struct DecodeArgs {
  const Plan* plan = nullptr;
  const Schedule* schedule = nullptr;
  // [rows, H, 576] f32 or bf16 (absorbed query), or a DCP step's gathered query as the all-gather
  // leaves it, [W, rows, H / W, 576] (head w * H / W + h of row n at [w, n, h]): no unpack needed.
  TensorRef q;
  KvCacheRef cache;  // this rank's cache
  // [>= B, >= max_blocks] i32, shared by all ranks; with a schedule, at least its capacity's
  // blocks_per_request columns.
  TensorRef block_table;
  TensorRef out;               // [rows, H, 512] f32 or q's dtype; empty when send is set
  TensorRef lse;               // [rows, H] f32, natural log; empty when send is set
  float softmax_scale = 0.0f;  // explicit; finite and > 0
  float q_scale = 1.0f;        // scores use softmax_scale * q_scale * k_scale
  // >= decode_workspace_bytes(plan), or of the schedule's capacity.partial_rows (any dtype, 1-D)
  TensorRef workspace;
  // The other output form, for the a2a combine of a DCP step: with send set, every (row, head)'s
  // O and LSE go into the all-to-all send rows [send_world, rows, H / send_world,
  // packed_row(send.dtype)] (f32 or bf16), exactly as combine_pack writes them from an f32 out
  // and lse, so the fp32 rows never make a round trip through memory. out and lse stay empty.
  int send_world = 0;
  TensorRef send;
};
// True when args.q is the gathered [W, rows, H / W, 576] form.
inline bool query_is_gathered(const DecodeArgs& args) {
  return args.q.shape.size() == 4;
}
// True when the decode writes the a2a send rows (args.send) instead of out and lse.
inline bool decodes_into_send(const DecodeArgs& args) {
  return args.send.data != nullptr || args.send_world != 0;
}
void validate(const DecodeArgs& args);
// The shape of the plan a decode runs (its plan's, or what its schedule's host knows).
struct DecodeShape {
  const PlanConfig* config;
  std::int64_t rows;
  std::int32_t requests;
  std::int32_t blocks_per_request;  // columns the block table needs
  std::size_t workspace_bytes;
};
DecodeShape decode_shape(const DecodeArgs& args);

// ag_rs local step. From gathered LSE [W, N, H] compute merged L, then write this rank's O scaled
// by exp(L_r - L) into send [W, N, H/W, 512] (grouped by destination rank; zero where the weight
// is zero) and the merged LSE of this rank's own heads into lse_out [N, H/W].
struct CombineRescaleArgs {
  int world = 1;
  int rank = 0;
  TensorRef gathered_lse;  // [W, N, H] f32
  TensorRef partial_out;   // [N, H, 512] f32
  TensorRef send;          // [W, N, H/W, 512] f32
  TensorRef lse_out;       // [N, H/W] f32
};
void validate(const CombineRescaleArgs& args);

// a2a pack: this rank's partial O and LSE, split by destination head group into the one
// all-to-all payload. Each (row, head) is, with an fp32 payload, 513 floats: O (512) then LSE;
// with a bf16 payload (half the bytes), 514 bf16 slots: O (512, rounded to bf16) then the fp32
// LSE's bits in the last two slots (low half first). The merge is fp32 either way.
inline constexpr int kPackedRow = kLatentDim + 1;
inline constexpr int kPackedRowBf16 = kLatentDim + 2;
// Slots of a packed row for a payload dtype (f32 or bf16).
inline constexpr int packed_row(DType payload) {
  return payload == DType::bf16 ? kPackedRowBf16 : kPackedRow;
}

struct CombinePackArgs {
  int world = 1;
  TensorRef partial_out;  // [N, H, 512] f32
  TensorRef partial_lse;  // [N, H] f32
  TensorRef send;         // [W, N, H/W, 513] f32 or [W, N, H/W, 514] bf16
};
void validate(const CombinePackArgs& args);

// a2a merge on the receiver: the W partials of this rank's heads -> final O and LSE.
struct CombineMergeArgs {
  TensorRef recv;  // [W, N, Hl, 513] f32 or [W, N, Hl, 514] bf16 (see kPackedRowBf16)
  TensorRef out;   // [N, Hl, 512] f32 or bf16
  TensorRef lse;   // [N, Hl] f32
  // Optional: partial `own_rank` is read from own [N, Hl, row] (recv's dtype) instead of from
  // recv, which then need not hold it: the rank's own rows stay in its send buffer and the
  // exchange copies only the peers' (Communicator::all_to_all_peers). -1: every partial in recv.
  int own_rank = -1;
  TensorRef own;
};
void validate(const CombineMergeArgs& args);

// The gathered query [W, N, Hl, 576] -> the kernel layout [N, W * Hl, 576] (head w * Hl + h).
struct UnpackQueryArgs {
  TensorRef gathered;  // [W, N, Hl, 576]
  TensorRef q;         // [N, W * Hl, 576], same dtype
};
void validate(const UnpackQueryArgs& args);

// Log-sum-exp merge of S partial attention states of the same (row, head) pairs, each of any
// width D (the merge algebra of merge.h: empty states (L = -inf) are skipped, a NaN or +inf L
// poisons the pair). Engines merge the partials of cascaded or chunked attention with it.
struct MergeStatesArgs {
  TensorRef v;      // [S, N, H, D] f32 or bf16: the partials' O, each normalised over its keys
  TensorRef s;      // [S, N, H] f32: the partials' LSE
  TensorRef v_out;  // [N, H, D] f32 or v's dtype
  TensorRef s_out;  // [N, H] f32: the merged LSE
  // false: s and s_out hold base-2 logarithms (log2 sum 2^x) instead of natural ones.
  bool lse_base_e = true;
};
void validate(const MergeStatesArgs& args);

// Element-wise f32 -> dst dtype (f32 or bf16), same shape.
struct ConvertArgs {
  TensorRef src;
  TensorRef dst;
};
void validate(const ConvertArgs& args);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory the backend's kernels can read and write (host memory on the CPU).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  virtual void upload(void* dst, const void* host_src, std::size_t bytes, Stream s) = 0;
  virtual void download(void* host_dst, const void* src, std::size_t bytes, Stream s) = 0;
  virtual void synchronize(Stream s) = 0;
  // dst <- src, both in this backend's memory.
  virtual void copy(void* dst, const void* src, std::size_t bytes, Stream s) = 0;
  // dst[i] += src[i] for i < count, both f32 in this backend's memory.
  virtual void accumulate(float* dst, const float* src, std::size_t count, Stream s) = 0;

  // The planner's model of this backend (PlanConfig::model).
  virtual DeviceModel device_model() const = 0;
  // Schedule::update and Schedule::plan, after their checks: calls write once with a host image
  // of the schedule's layout (the schedule's memory itself on the CPU; on a GPU pinned staging,
  // whose leading bytes that write returns are then copied on s). write may throw before it
  // writes anything, and the schedule stays as it was.
  virtual void write_schedule(Schedule& schedule, const ScheduleImageWriter& write, Stream s) = 0;
  // Schedule::plan_on_device, after its checks: plan the device batch into the schedule on s.
  virtual void plan_schedule(Schedule& schedule, const DeviceBatchRef& batch,
                             std::int64_t num_tokens, Stream s) = 0;

  virtual void write_kv(const KvWriteArgs& args, Stream s) = 0;
  // Validates args (validate(const DecodeArgs&), then accept_decode), then runs the decode.
  void decode(const DecodeArgs& args, Stream s);
  virtual void unpack_query(const UnpackQueryArgs& args, Stream s) = 0;
  virtual void combine_rescale(const CombineRescaleArgs& args, Stream s) = 0;
  virtual void combine_pack(const CombinePackArgs& args, Stream s) = 0;
  virtual void combine_merge(const CombineMergeArgs& args, Stream s) = 0;
  virtual void convert(const ConvertArgs& args, Stream s) = 0;
  virtual void merge_states(const MergeStatesArgs& args, Stream s) = 0;

 protected:
  // What this backend refuses beyond validate(const DecodeArgs&) (a GPU's alignment and kernel
  // choice, a host plan on a stream under capture), checked before anything is queued: dcp_step
  // calls it before its first collective, so a rank never throws while its peers wait for it there.
  virtual void check_decode(const DecodeArgs& args, Stream s) const {}
  // What a decode of validated args needs of this backend: a schedule (if any) made on it (its
  // memory is this device's), and check_decode.
  void accept_decode(const DecodeArgs& args, Stream s) const;
  // The decode of arguments validate() and accept_decode accepted. dcp_step validates a step's
  // arguments once and calls this directly.
  virtual void run_decode(const DecodeArgs& args, Stream s) = 0;
  friend void dcp_step(Backend&, Communicator&, DcpWorkspace&, const DcpStepArgs&, Stream);
};

// A buffer owned through a backend's allocator.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  TensorRef tensor(DType t, std::vector<std::int64_t> shape) const;

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace dcpmla
