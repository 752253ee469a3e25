// Element types, MLA dimensions and the attention mask kinds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dcpmla {

// The latent cache entry is kv_c (512) followed by k_pe (64); K is all 576, V the first 512.
inline constexpr int kLatentDim = 512;
inline constexpr int kRopeDim = 64;
inline constexpr int kHeadDim = kLatentDim + kRopeDim;

enum class DType : std::uint8_t { f32, bf16, fp8_e4m3, i32, i64 };

std::size_t dtype_size(DType t);
const char* to_string(DType t);
// Parses "fp32"/"f32", "bf16", "fp8"/"fp8_e4m3"; throws Error naming `argument` otherwise.
DType parse_dtype(std::string_view text, const std::string& argument);

// causal: row j of a Q-token request sees global positions < T - (Q - 1 - j).
// full: every row of the request sees all T positions (non-causal draft blocks).
enum class Mask : std::uint8_t { causal, full };

const char* to_string(Mask m);
Mask parse_mask(std::string_view text, const std::string& argument);

}  // namespace dcpmla
