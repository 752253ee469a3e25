// Device-side random fills for benchmark inputs (never time zeros).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcpmla::bench {

// Fills n bf16 values with a hash of (index, seed) mapped to [-1, 1).
void fill_random_bf16(void* dst, std::size_t n, std::uint32_t seed, void* stream);
// Fills n bytes of e4m3 with finite values in [-2, 2).
void fill_random_fp8(void* dst, std::size_t n, std::uint32_t seed, void* stream);

// An attention-sink score profile on top of random bf16 data: every query (n_q values, rows of
// 576) gets beta * u added, and the cache rows listed in `rows` (device, n_rows, the first token
// of each request) become u, where u is a fixed +-1 vector over the 576 dims. A query then
// scores its request's first token ~576 beta above the rest on average, so that token holds the
// row's maximum from the first tile on, as the sink tokens of trained models do.
void plant_sink_bf16(void* q, std::size_t n_q, void* cache, const std::int64_t* rows,
                     std::size_t n_rows, float beta, void* stream);

}  // namespace dcpmla::bench
