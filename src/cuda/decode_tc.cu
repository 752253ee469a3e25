// Launch of the tensor-core decode kernel (decode_ws_kernel.cuh), with the tensor map of the
// cache for its bulk tensor copies (bf16 caches whose block size is 16, 32 or a multiple of 64).
#include <cudaTypedefs.h>

#include <cstdlib>
#include <cstring>

#include "check.h"
#include "decode_seesaw_kernel.cuh"
#include "decode_ws_kernel.cuh"
#include "launch_config.h"

namespace dcpmla::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DCPMLA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                       cudaEnableDefault, &q));
    require(fn != nullptr && q == cudaDriverEntryPointSuccess, ErrorCode::backend_failure,
            "cuTensorMapEncodeTiled", "the driver entry point", "not found");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// Pages of 16 tokens or more that hold whole 64-row boxes or fit in one (4 boxes a chunk at most,
// none straddling a page). Block size 16 ran (128, 8192, 16, 1) in 450 us with the bulk copies
// and 572 us with the threads' copies (2026-11-30).
bool bulk_copies_fit(int block_size) {
  return block_size >= 16 && (block_size % tc::kBoxRows == 0 || tc::kBoxRows % block_size == 0);
}

void encode_kv_map(DecodeParams& p) {
  const cuuint64_t dims[2] = {cuuint64_t(kHeadDim), cuuint64_t(p.num_blocks * p.block_size)};
  const cuuint64_t strides[1] = {cuuint64_t(kHeadDim) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(std::min(p.block_size, tc::kBoxRows))};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(
      &p.kv_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p.cache), dims, strides,
      box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
  require(r == CUDA_SUCCESS, ErrorCode::backend_failure, "cuTensorMapEncodeTiled", "CUDA_SUCCESS",
          std::to_string(int(r)));
}

// Which kernel decodes bf16 caches, for A/B runs in one build: v3 (three warpgroups,
// decode_ws_kernel.cuh) unless DCPMLA_DECODE_KERNEL names a v6 order (decode_seesaw_kernel.cuh):
// seesaw (order 0), seesaw-stagger (1), seesaw-late (2). -1: v3.
int seesaw_order() {
  static const int order = [] {
    const char* v = std::getenv("DCPMLA_DECODE_KERNEL");
    if (v == nullptr) return -1;
    if (std::strcmp(v, "seesaw") == 0) return 0;
    if (std::strcmp(v, "seesaw-stagger") == 0) return 1;
    if (std::strcmp(v, "seesaw-late") == 0) return 2;
    return -1;
  }();
  return order;
}

template <int Order, int Diag = 0>
void launch_seesaw_bulk(DecodeParams& p, unsigned blocks, cudaStream_t s) {
  launch_with_shared_memory<seesaw::decode_seesaw_kernel<true, Order, Diag>>(
      blocks, seesaw::kThreads, seesaw::kSmemBytes, p, s, "decode_seesaw_kernel<<<>>>");
}

// Timing diagnostics of the seesaw kernel (DCPMLA_SEESAW_DIAG=<bits>, see the kernel), built
// only with -DDCPMLA_SEESAW_DIAG.
template <int Order>
void launch_seesaw_diag(DecodeParams& p, unsigned blocks, cudaStream_t s) {
#ifdef DCPMLA_SEESAW_DIAG
  static const int diag = [] {
    const char* v = std::getenv("DCPMLA_SEESAW_DIAG");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  switch (diag) {
    case 1:
      return launch_seesaw_bulk<Order, 1>(p, blocks, s);
    case 2:
      return launch_seesaw_bulk<Order, 2>(p, blocks, s);
    case 3:
      return launch_seesaw_bulk<Order, 3>(p, blocks, s);
    case 4:
      return launch_seesaw_bulk<Order, 4>(p, blocks, s);
    case 5:
      return launch_seesaw_bulk<Order, 5>(p, blocks, s);
    case 8:
      return launch_seesaw_bulk<Order, 8>(p, blocks, s);
    case 9:
      return launch_seesaw_bulk<Order, 9>(p, blocks, s);
    default:
      break;
  }
#endif
  launch_seesaw_bulk<Order>(p, blocks, s);
}

template <int Order>
void launch_seesaw(DecodeParams& p, unsigned blocks, cudaStream_t s) {
  if (bulk_copies_fit(p.block_size)) {
    encode_kv_map(p);
    launch_seesaw_diag<Order>(p, blocks, s);
  } else {
    launch_with_shared_memory<seesaw::decode_seesaw_kernel<false, Order>>(
        blocks, seesaw::kThreads, seesaw::kSmemBytes, p, s, "decode_seesaw_kernel<<<>>>");
  }
}

}  // namespace

bool tensor_core_decode_supports(DType q_dtype, DType cache_dtype) {
  return q_dtype == DType::bf16 && (cache_dtype == DType::bf16 || cache_dtype == DType::fp8_e4m3);
}

void launch_decode_tc(const DecodeParams& params, DType cache_dtype, std::int64_t num_tiles,
                      cudaStream_t s) {
  if (num_tiles <= 0) return;
  DecodeParams p = params;
  const unsigned blocks = unsigned(num_tiles);
  if (cache_dtype == DType::bf16 && seesaw_order() >= 0) {
    switch (seesaw_order()) {
      case 0:
        launch_seesaw<0>(p, blocks, s);
        break;
      case 1:
        launch_seesaw<1>(p, blocks, s);
        break;
      default:
        launch_seesaw<2>(p, blocks, s);
        break;
    }
  } else if (cache_dtype == DType::bf16 && bulk_copies_fit(p.block_size)) {
    encode_kv_map(p);
    launch_with_shared_memory<ws::decode_ws_kernel<tc::Cache::bf16, true>>(
        blocks, ws::kThreads, ws::kSmemBytes, p, s, "decode_ws_kernel<<<>>>");
  } else if (cache_dtype == DType::bf16) {
    launch_with_shared_memory<ws::decode_ws_kernel<tc::Cache::bf16, false>>(
        blocks, ws::kThreads, ws::kSmemBytes, p, s, "decode_ws_kernel<<<>>>");
  } else {
    launch_with_shared_memory<ws::decode_ws_kernel<tc::Cache::fp8, false>>(
        blocks, ws::kThreads, ws::kSmemBytes, p, s, "decode_ws_kernel<<<>>>");
  }
}

}  // namespace dcpmla::cuda
