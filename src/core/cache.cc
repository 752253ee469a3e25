#include "dcpmla/cache.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>

#include "dcpmla/error.h"
#include "dcpmla/numeric.h"

namespace dcpmla {

std::size_t KvCacheRef::bytes() const {
  return std::size_t(num_blocks) * std::size_t(block_size) * kHeadDim * dtype_size(dtype);
}

namespace {

// Everything validate_cache checks but the pointer (a HostKvCache checks them before it
// allocates).
void validate_cache_fields(const KvCacheRef& cache, const std::string& argument) {
  DCPMLA_REQUIRE(
      cache.dtype == DType::f32 || cache.dtype == DType::bf16 || cache.dtype == DType::fp8_e4m3,
      ErrorCode::dtype_mismatch, argument + ".dtype", "fp32, bf16 or fp8", to_string(cache.dtype));
  DCPMLA_REQUIRE(cache.num_blocks >= 1, ErrorCode::invalid_argument, argument + ".num_blocks",
                 ">= 1", std::to_string(cache.num_blocks));
  DCPMLA_REQUIRE(cache.block_size >= 1, ErrorCode::invalid_argument, argument + ".block_size",
                 ">= 1", std::to_string(cache.block_size));
  DCPMLA_REQUIRE(std::isfinite(cache.k_scale) && cache.k_scale > 0.0f, ErrorCode::invalid_argument,
                 argument + ".k_scale", "finite and > 0", std::to_string(cache.k_scale));
  DCPMLA_REQUIRE(cache.dtype == DType::fp8_e4m3 || cache.k_scale == 1.0f,
                 ErrorCode::invalid_argument, argument + ".k_scale", "1 for an unquantised cache",
                 std::to_string(cache.k_scale));
  // bytes() in range: at most 2^62.
  const auto bytes = (unsigned __int128)(cache.num_blocks) * std::uint64_t(cache.block_size) *
                     (kHeadDim * dtype_size(cache.dtype));
  DCPMLA_REQUIRE(bytes <= (std::uint64_t(1) << 62), ErrorCode::out_of_range,
                 argument + ".num_blocks",
                 fmt::format("a cache of at most 2^62 bytes ({} tokens a block)", cache.block_size),
                 std::to_string(cache.num_blocks));
}

}  // namespace

void validate_cache(const KvCacheRef& cache, const std::string& argument) {
  validate_cache_fields(cache, argument);
  DCPMLA_REQUIRE(cache.data != nullptr, ErrorCode::invalid_argument, argument + ".data",
                 "a non-null buffer", "null");
}

HostKvCache::HostKvCache(DType dtype, std::int64_t num_blocks, int block_size, float k_scale)
    : dtype_(dtype), num_blocks_(num_blocks), block_size_(block_size), k_scale_(k_scale) {
  const KvCacheRef shape{nullptr, dtype, num_blocks, block_size, k_scale};
  validate_cache_fields(shape, "cache");
  storage_.resize(shape.bytes());
  validate_cache(ref(), "cache");
}

void HostKvCache::poison() {
  switch (dtype_) {
    case DType::f32: {
      const float nan = NAN;
      for (std::size_t i = 0; i < storage_.size(); i += 4) std::memcpy(&storage_[i], &nan, 4);
      break;
    }
    case DType::bf16: {
      const std::uint16_t nan = float_to_bf16(NAN);
      for (std::size_t i = 0; i < storage_.size(); i += 2) std::memcpy(&storage_[i], &nan, 2);
      break;
    }
    default:
      std::memset(storage_.data(), 0x7f, storage_.size());
      break;  // e4m3 NaN
  }
}

float HostKvCache::at(std::int64_t block, int offset, int dim) const {
  const std::size_t i = (std::size_t(block) * block_size_ + offset) * kHeadDim + dim;
  switch (dtype_) {
    case DType::f32: {
      float v;
      std::memcpy(&v, &storage_[i * 4], 4);
      return v;
    }
    case DType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, &storage_[i * 2], 2);
      return bf16_to_float(v);
    }
    default:
      return fp8_e4m3_to_float(storage_[i]) * k_scale_;
  }
}

}  // namespace dcpmla
