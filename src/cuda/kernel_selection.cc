#include "cuda/kernel_selection.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "cuda/decode/launch_plan.h"
#include "cuda/decode/sm90/config.h"
#include "dcpmla/error.h"

namespace dcpmla::cuda {

const char* to_string(DecodeKernel k) {
  switch (k) {
    case DecodeKernel::none:
      return "none";
    case DecodeKernel::fma:
      return "fma";
    case DecodeKernel::sm90_bf16_rounds:
      return "sm90_bf16_rounds";
    case DecodeKernel::sm90_fp8_rounds:
      return "sm90_fp8_rounds";
    case DecodeKernel::sm90_bf16_bulk:
      return "sm90_bf16_bulk";
    case DecodeKernel::sm90_bf16:
      return "sm90_bf16";
    case DecodeKernel::sm90_fp8:
      return "sm90_fp8";
  }
  return "?";
}

Rounds rounds_by_default() {
  const char* v = std::getenv("DCPMLA_DECODE_ROUNDS");
  if (v == nullptr) return Rounds::measured;
  DCPMLA_REQUIRE(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0, ErrorCode::invalid_argument,
                 "DCPMLA_DECODE_ROUNDS", "0 or 1, or unset", fmt::format("\"{}\"", v));
  return v[0] == '1' ? Rounds::all : Rounds::none;
}

DecodeKernelChoice select_decode_kernel(const DecodeConfig& c) {
  DecodeKernelChoice choice;
  auto refuse = [&](std::string why) {
    choice.why_not = std::move(why);
    return choice;
  };
  if (c.q_dtype != DType::f32 && c.q_dtype != DType::bf16) {
    return refuse(fmt::format("the query is fp32 or bf16, not {}", to_string(c.q_dtype)));
  }
  if (c.cache_dtype != DType::f32 && c.cache_dtype != DType::bf16 &&
      c.cache_dtype != DType::fp8_e4m3) {
    return refuse(fmt::format("the cache is fp32, bf16 or fp8, not {}", to_string(c.cache_dtype)));
  }
  if (c.num_heads < 1) return refuse(fmt::format("num_heads is >= 1, not {}", c.num_heads));
  if (c.block_size < 1) return refuse(fmt::format("block_size is >= 1, not {}", c.block_size));
  if (c.tile_pairs < 1 || c.tile_pairs > kTilePairs) {
    return refuse(fmt::format("a tile holds 1 to {} pairs, not {}", kTilePairs, c.tile_pairs));
  }
  // The tensor cores take a bf16 query and a 16-bit or fp8 cache; everything else runs in fp32.
  if (c.q_dtype != DType::bf16 || c.cache_dtype == DType::f32) {
    choice.kernel = DecodeKernel::fma;
    return choice;
  }
  if (c.cache_dtype == DType::fp8_e4m3) {
    choice.kernel = DecodeKernel::sm90_fp8;
  } else {
    choice.kernel =
        bulk_copies_fit(c.block_size) ? DecodeKernel::sm90_bf16_bulk : DecodeKernel::sm90_bf16;
  }
  // The round decode: tiles by one 64-row box a chunk (pages of a multiple of 64 tokens), at
  // every head count. Its bf16 tiles of at most 16 pairs run the warp-specialised form's narrow
  // tiles inside it; its fp8 ones run wide, widened to f16 by its producer warpgroup. By default
  // it takes what it runs faster than the warp-specialised form: bf16 at heads in multiples of
  // 32, whose tiles hold 32 or 64 pairs, never narrow (H 128 5.6-6.6 % faster, cb1e582), and fp8
  // at every head count (0.84-0.97x the other form's time on the cache_formats shapes, H 16 to
  // 128, one H200, 2026-12-05, docs/design/decode-kernel.md section 3). Its narrow bf16 tiles are
  // the other form's, not measured inside it. At fewer than 32 heads it takes bf16 where the
  // schedule's mean request fills a tile (H 16 at Q >= 4, as spec-decode capture sizes give it):
  // H 16 at uniform Q 8 0.890x the other form's time, ragged Q 1..8 at L 32K 0.943x, padded to
  // Q 8 at L 4K 0.890x, ragged at L 4K 1.019x (one H100, 2026-12-06,
  // bench/results/h100/rounds_wide_requests_ab.json); launches whose tiles are all narrow (Q 1)
  // keep the other form, where rounds took 1.04-1.08x its time (a77c23f).
  const bool wide_requests = c.num_heads < 32 && c.request_pairs >= c.tile_pairs;
  const bool taken = c.rounds == Rounds::all ||
                     (c.rounds == Rounds::measured &&
                      (c.cache_dtype == DType::fp8_e4m3 || c.num_heads % 32 == 0 || wide_requests));
  if (taken && c.block_size % 64 == 0) {
    choice.kernel = c.cache_dtype == DType::fp8_e4m3 ? DecodeKernel::sm90_fp8_rounds
                                                     : DecodeKernel::sm90_bf16_rounds;
    if (c.cache_dtype == DType::bf16 && sm90::kNarrowPairs >= 16 && c.tile_pairs <= 16) {
      choice.narrow_pairs = 16;
    }
    return choice;
  }
  if (sm90::kNarrowPairs >= 16 && c.tile_pairs <= 16) {
    choice.narrow_pairs = 16;
  } else if (sm90::kNarrowPairs >= 32 && c.tile_pairs <= 32) {
    choice.narrow_pairs = 32;
  }
  return choice;
}

}  // namespace dcpmla::cuda
