// One rank's paged latent KV cache: [num_blocks, block_size, 576] in fp32, bf16 or fp8 e4m3.
#pragma once

#include <cstdint>
#include <vector>

#include "dcpmla/tensor.h"
#include "dcpmla/types.h"

namespace dcpmla {

// Non-owning view. fp8 stores e4m3(x / k_scale); readers multiply by k_scale (1 otherwise).
struct KvCacheRef {
  void* data = nullptr;  // [num_blocks, block_size, 576] of dtype
  DType dtype = DType::bf16;
  std::int64_t num_blocks = 0;
  int block_size = 0;
  float k_scale = 1.0f;

  std::size_t bytes() const;
  TensorRef tensor() const { return {data, dtype, {num_blocks, block_size, kHeadDim}}; }
};

// Throws Error naming `argument` on a null pointer, an unsupported dtype, non-positive sizes or a
// non-finite / non-positive k_scale.
void validate_cache(const KvCacheRef& cache, const std::string& argument);

// A cache in host memory (the CPU backend's, and the test harness's).
class HostKvCache {
 public:
  HostKvCache(DType dtype, std::int64_t num_blocks, int block_size, float k_scale = 1.0f);
  KvCacheRef ref() { return {storage_.data(), dtype_, num_blocks_, block_size_, k_scale_}; }
  // Fills every entry with NaN (unused pages must never influence results).
  void poison();
  // Dequantised value of one element (k_scale applied).
  float at(std::int64_t block, int offset, int dim) const;

 private:
  DType dtype_;
  std::int64_t num_blocks_;
  int block_size_;
  float k_scale_;
  std::vector<std::uint8_t> storage_;
};

}  // namespace dcpmla
