// The bulk tensor copy (TMA) of a 2-D or 4-D box from global memory into shared memory, described
// by a CUtensorMap that lives in kernel parameter space (a __grid_constant__ parameter), completing
// on a shared-memory mbarrier (hopper/mbarrier.cuh) by its byte count.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace dcpmla::cuda::hopper {

#if !defined(DCPMLA_EMULATE)  // the host emulation (tests/cuda/tc_emulation.h) defines these
// Box at (column x, row y) of the tensor `map` into shared memory at `dst` (1024-byte aligned for
// the 128-byte swizzle); completes `bytes of the box` on mbarrier `bar`. Coordinates past the
// tensor's extent are filled as the map says, without reading memory.
__device__ __forceinline__ void bulk_tensor_load_2d(std::uint32_t dst, const CUtensorMap* map,
                                                    int x, int y, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
// The same for a 4-D box at (x, y, z, w): its rows land in the order of y, then z, then w.
__device__ __forceinline__ void bulk_tensor_load_4d(std::uint32_t dst, const CUtensorMap* map,
                                                    int x, int y, int z, int w, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
      : "memory");
}
#endif  // !DCPMLA_EMULATE

}  // namespace dcpmla::cuda::hopper
