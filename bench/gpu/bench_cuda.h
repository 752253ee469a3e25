// Host helpers the GPU micro-benchmarks share: CUDA error checks that throw, and a bf16 latent
// cache on the device with its tensor map (boxes of one 64-token x 64-dim chunk).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace dcpmla::bench {

// Pages of 64 tokens of a latent cache far beyond L2 (604 MB): the micro-benchmarks' HBM source.
constexpr std::int64_t kHbmPages = 8192;

// Device 0's name and SM count (the micro-benchmarks run one block per SM).
struct DeviceInfo {
  std::string name;
  int sms;
};
DeviceInfo device_info();

// Throws std::runtime_error naming `what` when e is not cudaSuccess.
void check_cuda(cudaError_t e, const char* what);

// The cache as a 2-D tensor [rows, 576] of bf16, boxes of 64 rows x 64 dims, 128-byte swizzle
// (the decode kernel's chunk). Throws std::runtime_error when the driver cannot encode it.
CUtensorMap make_cache_tensor_map(void* cache, std::int64_t rows);

// `pages` pages of 64 tokens x 576 bf16 dims on the device, every byte 0x3c (finite values),
// with their tensor map; freed on destruction.
class BenchCache {
 public:
  explicit BenchCache(std::int64_t pages);
  ~BenchCache();
  BenchCache(const BenchCache&) = delete;
  BenchCache& operator=(const BenchCache&) = delete;
  unsigned char* data() const { return data_; }
  const CUtensorMap& map() const { return map_; }

 private:
  unsigned char* data_ = nullptr;
  CUtensorMap map_{};
};

}  // namespace dcpmla::bench
