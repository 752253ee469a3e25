#include "bench_cuda.h"

#include <cudaTypedefs.h>

#include <stdexcept>
#include <string>

namespace dcpmla::bench {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

DeviceInfo device_info() {
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  return {prop.name, prop.multiProcessorCount};
}

CUtensorMap make_cache_tensor_map(void* cache, std::int64_t rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult q{};
  check_cuda(
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode),
                                       12000, cudaEnableDefault, &q),
      "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
  if (encode == nullptr || q != cudaDriverEntryPointSuccess) {
    throw std::runtime_error("cuTensorMapEncodeTiled is not available");
  }
  constexpr int kDims = 576;
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cuuint64_t(kDims), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(kDims * 2)};
  const cuuint32_t box[2] = {64, 64};
  const cuuint32_t elem[2] = {1, 1};
  if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, cache, dims, strides, box, elem,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    throw std::runtime_error("cuTensorMapEncodeTiled failed");
  }
  return map;
}

BenchCache::BenchCache(std::int64_t pages) {
  const std::size_t bytes = std::size_t(pages) * 64 * 576 * 2;
  check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
  try {
    check_cuda(cudaMemset(data_, 0x3c, bytes), "cudaMemset");
    map_ = make_cache_tensor_map(data_, pages * 64);
  } catch (...) {
    cudaFree(data_);
    throw;
  }
}

BenchCache::~BenchCache() {
  cudaFree(data_);
}

}  // namespace dcpmla::bench
