// Device-side random fills for benchmark inputs (never time zeros).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcpmla::bench {

// Fills n bf16 values with a hash of (index, seed) mapped to [-1, 1).
void fill_random_bf16(void* dst, std::size_t n, std::uint32_t seed, void* stream);
// Fills n bytes of e4m3 with finite values in [-2, 2).
void fill_random_fp8(void* dst, std::size_t n, std::uint32_t seed, void* stream);

}  // namespace dcpmla::bench
