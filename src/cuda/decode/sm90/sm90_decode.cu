// Launch of the tensor-core decode kernels (kernel.cuh, round_kernel.cuh), with the tensor map of
// the cache for their bulk tensor copies (bf16 caches whose block size is 16, 32 or a multiple of
// 64; fp8 caches of the round decode).
#include <cudaTypedefs.h>

#include "cuda/decode/launch_plan.h"
#include "cuda/decode/sm90/kernel.cuh"
#include "cuda/decode/sm90/round_kernel.cuh"
#include "gpu/check.h"
#include "gpu/launch_config.h"

namespace dcpmla::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DCPMLA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                       cudaEnableDefault, &q));
    DCPMLA_REQUIRE(fn != nullptr && q == cudaDriverEntryPointSuccess, ErrorCode::backend_failure,
                   "cuTensorMapEncodeTiled", "the driver entry point", "not found");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// L2 promotion of the bulk copies: a box row is one 128-byte line of a token's 1152 bytes, which
// a 256-byte promotion pairs with its neighbour (another chunk's, loaded by another box of the
// same tile). Where each KV token is read by one thread block, no promotion runs the memory-bound
// shapes faster; where two or more row tiles read it, 256 bytes does
// (docs/design/decode-kernel.md). A captured CUDA graph keeps
// the choice made at capture for every replay (it changes speed, never results).
//
// A bf16 box lands 128-byte swizzled, as the MMAs read it, with NaN past the tensor (a block id
// outside the cache). An fp8 box (uint8, 64 bytes a row) lands unswizzled in the upper half of a
// chunk, for the round decode's widening, with zeros past the tensor (the widening writes NaN).
void encode_kv_map(DecodeParams& p, bool kv_shared, bool fp8) {
  const cuuint64_t dims[2] = {cuuint64_t(kHeadDim), cuuint64_t(p.num_blocks * p.block_size)};
  const cuuint64_t strides[1] = {cuuint64_t(kHeadDim) * (fp8 ? 1 : 2)};
  const cuuint32_t box[2] = {64, cuuint32_t(std::min(p.block_size, sm90::kBoxRows))};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(
      &p.kv_map, fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(p.cache), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
      fp8 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
      kv_shared ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_NONE,
      fp8 ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE : CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
  DCPMLA_REQUIRE(r == CUDA_SUCCESS, ErrorCode::backend_failure, "cuTensorMapEncodeTiled",
                 "CUDA_SUCCESS", std::to_string(int(r)));
}

// The round decode's query map. Plain ([rows, H, 576] bf16): a [rows * H, 576] tensor whose
// boxes are 64 consecutive pairs. Gathered ([W, rows, H / W, 576], gh = H / W heads a group): a
// tensor of dims (576, gh, rows, W) whose boxes are 64 / gh groups of one row, where H is a
// multiple of 64 (an item then lies in one row, from a multiple of 64 heads) and gh divides 64;
// other gathered queries are copied by the threads.
void encode_q_map(DecodeParams& p) {
  const int gh = p.q_group_heads;
  p.q_boxes = gh == 0 || (p.num_heads % 64 == 0 && 64 % gh == 0);
  if (!p.q_boxes) return;
  constexpr cuuint64_t kRowBytes = cuuint64_t(kHeadDim) * 2;
  cuuint32_t rank = 2;
  cuuint64_t dims[4] = {cuuint64_t(kHeadDim), cuuint64_t(p.q_rows * p.num_heads), 1, 1};
  cuuint64_t strides[3] = {kRowBytes, 0, 0};
  cuuint32_t box[4] = {64, cuuint32_t(sm90::kPairs), 1, 1};
  if (gh != 0) {
    rank = 4;
    dims[1] = cuuint64_t(gh);
    dims[2] = cuuint64_t(p.q_rows);
    dims[3] = cuuint64_t(p.num_heads / gh);
    strides[1] = kRowBytes * gh;
    strides[2] = kRowBytes * gh * p.q_rows;
    box[1] = cuuint32_t(gh);
    box[3] = cuuint32_t(sm90::kPairs / gh);
  }
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &p.q_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(p.q), dims, strides, box,
      elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  // A gathered query the driver's map refuses is copied by the threads (same results).
  if (gh != 0 && r != CUDA_SUCCESS) {
    p.q_boxes = false;
    return;
  }
  DCPMLA_REQUIRE(r == CUDA_SUCCESS, ErrorCode::backend_failure, "cuTensorMapEncodeTiled (query)",
                 "CUDA_SUCCESS", std::to_string(int(r)));
}

}  // namespace

#ifdef DCPMLA_BLOCK_TIMES
// The blocks of the last launch (at most kMaxTimedBlocks are recorded).
static std::int64_t last_launch_blocks = 0;

std::vector<BlockTimes> read_block_times(cudaStream_t s) {
  gpu::check(cudaStreamSynchronize(s), "read_block_times: stream");
  std::vector<BlockTimes> out(
      std::size_t(std::min<std::int64_t>(last_launch_blocks, kMaxTimedBlocks)));
  if (!out.empty()) {
    gpu::check(
        cudaMemcpyFromSymbol(out.data(), sm90::sm90_block_times, out.size() * sizeof(BlockTimes)),
        "sm90_block_times");
  }
  return out;
}
#endif

void launch_sm90_decode(const DecodeParams& params, DecodeKernel kernel, std::int64_t num_tiles,
                        bool kv_shared, cudaStream_t s) {
  if (num_tiles <= 0) return;
#ifdef DCPMLA_BLOCK_TIMES
  // Blocks past a captured plan's items exit unmarked: no entry of an earlier launch may remain.
  last_launch_blocks = num_tiles;
  void* times = nullptr;
  gpu::check(cudaGetSymbolAddress(&times, sm90::sm90_block_times), "sm90_block_times");
  gpu::check(cudaMemsetAsync(times, 0, sizeof(BlockTimes) * kMaxTimedBlocks, s),
             "sm90_block_times");
#endif
  DecodeParams p = params;
  const unsigned blocks = unsigned(num_tiles);
  if (kernel == DecodeKernel::sm90_bf16_rounds) {
    encode_kv_map(p, kv_shared, false);
    encode_q_map(p);
    gpu::launch_with_shared_memory<sm90::rounds::round_decode_kernel<sm90::Cache::bf16>>(
        blocks, sm90::rounds::kThreads, sm90::rounds::kSmemBytes, p, s,
        "round_decode_kernel<<<>>>");
  } else if (kernel == DecodeKernel::sm90_fp8_rounds) {
    encode_kv_map(p, kv_shared, true);
    encode_q_map(p);
    gpu::launch_with_shared_memory<sm90::rounds::round_decode_kernel<sm90::Cache::fp8>>(
        blocks, sm90::rounds::kThreads, sm90::rounds::kSmemBytes, p, s,
        "round_decode_kernel<<<>>>");
  } else if (kernel == DecodeKernel::sm90_bf16_bulk) {
    encode_kv_map(p, kv_shared, false);
    gpu::launch_with_shared_memory<sm90::decode_kernel<sm90::Cache::bf16, true>>(
        blocks, sm90::kThreads, sm90::kSmemBytes, p, s, "decode_kernel<<<>>>");
  } else if (kernel == DecodeKernel::sm90_bf16) {
    gpu::launch_with_shared_memory<sm90::decode_kernel<sm90::Cache::bf16, false>>(
        blocks, sm90::kThreads, sm90::kSmemBytes, p, s, "decode_kernel<<<>>>");
  } else {
    gpu::launch_with_shared_memory<sm90::decode_kernel<sm90::Cache::fp8, false>>(
        blocks, sm90::kThreads, sm90::kSmemBytes, p, s, "decode_kernel<<<>>>");
  }
}

}  // namespace dcpmla::cuda
