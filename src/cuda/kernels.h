// Host entry points of the CUDA kernels (one .cu file each). Every function validates its
// argument struct (host metadata only) before enqueueing anything on the stream.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/decode/launch_plan.h"
#include "cuda/kernel_selection.h"
#include "dcpmla/backend.h"

namespace dcpmla::cuda {

// cache/kv_write.cu: latents -> cache through slots; slots < 0 or >= capacity are skipped.
void write_kv(const KvWriteArgs& args, cudaStream_t s);

// decode/launch.cc: runs the decode of args validate() and check_decode accepted, from `schedule`
// (args.schedule, or the backend's copy of args.plan): the work items, then the split merge and the
// padding fill. rounds: which launches the round decode takes (the backend's rounds_by_default(),
// read once when it was made).
void decode(const DecodeArgs& args, const Schedule& schedule, Rounds rounds, cudaStream_t s);
// What decode refuses before it queues anything (the tile size, the pointers' alignment, a
// kernel for the configuration), for the plan's or schedule's config; returns the kernel.
DecodeKernelChoice check_decode(const DecodeArgs& args, const PlanConfig& config, Rounds rounds);
// Whether s is being captured into a CUDA graph.
bool is_capturing(cudaStream_t s);

// plan/device_planner.cu: plans `batch` into the schedule's memory on s (Schedule checked it).
void plan_on_device(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens,
                    cudaStream_t s);
// Whether that planner keeps its scratch in shared memory for this schedule (else in the
// schedule's own scratch, in global memory).
bool plans_in_shared_memory(const Schedule& schedule);
#ifdef DCPMLA_PLAN_STAMPS
// The planner's last launch, built with DCPMLA_PLAN_STAMPS: after each block-wide step, its kind
// (b begin, p parallel, s serial, f fold, r reduce, g segmented sum, x scan, o sort, e end) and
// the SM clock.
inline constexpr int kMaxPlanStamps = 256;
struct PlanStamp {
  char kind;
  std::uint64_t clock;
};
std::vector<PlanStamp> read_plan_stamps(cudaStream_t s);
#endif

#ifdef DCPMLA_BLOCK_TIMES
// The sm90 decode's last launch, built with DCPMLA_BLOCK_TIMES: for each of its first
// kMaxTimedBlocks thread blocks (wide tiles; a narrow tile records its start only, and in the
// warp-specialised form its query's landing), the SM it ran on, its KV tiles, and the global timer
// (ns) at its start, once its query is in shared memory, once its first S is done, after its last
// tile (thread 0's warpgroup), once every warpgroup has finished its tiles, and after its thread
// 0's stores, with the SM clock at first S and last tile.
inline constexpr int kMaxTimedBlocks = 4096;
struct BlockTimes {
  std::uint64_t sm, tiles, start_ns, first_s_ns, walked_ns, end_ns, first_s_clock, walked_clock;
  std::uint64_t q_loaded_ns, rows_ready_ns;
};
std::vector<BlockTimes> read_block_times(cudaStream_t s);
#endif

// Where a decode writes its final rows (output_rows.cuh has the device side). Plain: O of item
// (row * H + h) at out[item * 512 ...] (f32 or bf16) and its LSE at lse[item]. Packed (DecodeArgs
// send): the a2a send rows [W, rows, H/W, packed_row] (f32 or bf16), O then the fp32 LSE in each
// row, laid out as combine_pack writes them.
struct OutputRows {
  void* out = nullptr;
  float* lse = nullptr;  // plain only
  bool bf16 = false;
  int group_heads = 0;    // packed: H / W; 0: plain
  std::int64_t rows = 0;  // packed: the rows of each destination group
};

// The parameters of both decode kernels (decode/fma, decode/sm90), one thread block per DecodeTile.
struct DecodeParams {
  const PlanHeader* header;       // num_tiles; blocks past it exit (null: every block runs)
  const DecodeTile* tiles;        // [num_tiles]
  const std::int32_t* row_bound;  // [rows] plan.row_local_bound
  const void* q;  // [rows, H, 576], or [W, rows, H/W, 576] (q_group_heads), f32 or bf16, aligned
  int q_group_heads;    // 0: q is [rows, H, 576]; else H/W of the gathered query (grouped_slot)
  std::int64_t q_rows;  // rows (for the gathered query)
  const void* cache;    // [num_blocks, block_size, 576] f32, bf16 or fp8, aligned
  const std::int32_t* block_table;  // [B, max_blocks]
  std::int64_t max_blocks;
  std::int64_t num_blocks;
  int block_size;
  int num_heads;
  float score_scale;      // softmax_scale * q_scale (* k_scale for fp8)
  float out_scale;        // k_scale for fp8, else 1
  OutputRows final_rows;  // plain out 16-byte aligned; packed send 4-byte aligned
  float* partial_out;     // [partial_rows, H, 512], 16-byte aligned
  float* partial_lse;     // [partial_rows, H]
  // Set by launch_sm90_decode for bf16 caches: the cache as a [num_blocks * block_size, 576] bf16
  // tensor in boxes of 64 dims x min(block_size, 64) rows, 128-byte swizzle, NaN past its end.
  CUtensorMap kv_map{};
  // Set by launch_sm90_decode for the round decode (sm90_decode.cu, encode_q_map): a plain query
  // as a [q_rows * H, 576] bf16 tensor in boxes of 64 dims x 64 pairs, a gathered one as a
  // (576, H / W, q_rows, W) tensor in boxes of 64 dims x H / W heads x 1 row x 64 W / H groups;
  // 128-byte swizzle, zeros past the end. q_boxes says the map is set (else the threads copy the
  // query).
  CUtensorMap q_map{};
  bool q_boxes = false;
};
// decode/fma/fma_decode.cu: the FMA kernel (DecodeKernel::fma, kernel_selection.h).
void launch_fma_decode(const DecodeParams& p, DType q_dtype, DType cache_dtype,
                       std::int64_t num_tiles, cudaStream_t s);

// decode/sm90/sm90_decode.cu: the tensor-core kernel `kernel` (one of the sm90 kernels of
// kernel_selection.h). kv_shared: most KV tokens are read by several thread blocks
// (Plan::kv_shared_tokens > kv_alone_tokens).
void launch_sm90_decode(const DecodeParams& p, DecodeKernel kernel, std::int64_t num_tiles,
                        bool kv_shared, cudaStream_t s);

// decode/split_merge.cu: rows of split requests <- merge of their fp32 partials.
struct SplitMergeParams {
  const PlanHeader* header;  // num_merge_rows
  const MergeRow* rows;      // [header->num_merge_rows]
  int num_heads;
  const float* partial_out;  // [partial_rows, H, 512]
  const float* partial_lse;  // [partial_rows, H]
  OutputRows final_rows;
};

// decode/split_merge.cu: grid for merging up to `capacity` merge rows; max_splits (the most splits
// of a request in the plan) picks the kernel (any plan is merged right by each).
void launch_split_merge(const SplitMergeParams& p, std::int64_t capacity, int max_splits,
                        cudaStream_t s);

// decode/fill_padding.cu: rows [header->padding_begin, header->padding_end) of the final rows <- O
// 0 and LSE -inf; the grid covers up to `row_capacity` rows.
// Every row gets NaN instead when the header carries a fault (a device plan refused its batch).
void launch_fill_padding(const OutputRows& final_rows, const PlanHeader* header,
                         std::int64_t row_capacity, int num_heads, cudaStream_t s);

// combine/unpack_query.cu
void unpack_query(const UnpackQueryArgs& args, cudaStream_t s);
// combine/rescale.cu (ag_rs local step)
void combine_rescale(const CombineRescaleArgs& args, cudaStream_t s);
// combine/pack.cu / combine/merge.cu (a2a)
void combine_pack(const CombinePackArgs& args, cudaStream_t s);
void combine_merge(const CombineMergeArgs& args, cudaStream_t s);
// combine/convert.cu
void convert(const ConvertArgs& args, cudaStream_t s);
// combine/merge_states.cu: S partial states -> one (Backend::merge_states).
void merge_states(const MergeStatesArgs& args, cudaStream_t s);
// combine/accumulate.cu: dst[i] += src[i].
void accumulate(float* dst, const float* src, std::size_t count, cudaStream_t s);

// combine/accumulate.cu: cudaSuccess iff this build's kernels can run on the current device.
cudaError_t probe_kernels();

}  // namespace dcpmla::cuda
