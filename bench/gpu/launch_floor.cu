#include "launch_floor.cuh"

namespace dcpmla::bench {
namespace {

__global__ void empty_kernel() {}

}  // namespace

cudaError_t launch_empty(int threads, std::size_t smem_bytes, cudaStream_t stream) {
  // Once: the timed launches should cost the host no more than the planner's do.
  static std::size_t allowed = 0;
  if (smem_bytes > allowed) {
    const cudaError_t e = cudaFuncSetAttribute(
        empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes));
    if (e != cudaSuccess) return e;
    allowed = smem_bytes;
  }
  empty_kernel<<<1, threads, smem_bytes, stream>>>();
  return cudaGetLastError();
}

}  // namespace dcpmla::bench
