// Which decode kernel runs for a configuration, or why none does: the one place that decides it
// (decode/launch.cc launches what it says). Plain C++, unit-tested without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "dcpmla/types.h"

namespace dcpmla::cuda {

enum class DecodeKernel {
  none,            // the configuration is not supported
  fma,             // decode/fma: fp32 FMA, for an f32 query or an f32 cache
  sm90_bf16_bulk,  // decode/sm90, bf16 cache: tiles inside the visible range by bulk tensor copies
  sm90_bf16,       // decode/sm90, bf16 cache: tiles by the threads' copies
  sm90_fp8,        // decode/sm90, fp8 cache: tiles by the threads' copies, widened to bf16
  sm90_bf16_rounds,  // decode/sm90/round_kernel.cuh: wide bf16 tiles by 64-row boxes, in rounds
  sm90_fp8_rounds,   // the same for fp8 caches, the tiles widened to f16 by the producer warpgroup
};
const char* to_string(DecodeKernel k);

// Which launches the round decode takes, of those it can run (pages of a multiple of 64 tokens).
enum class Rounds {
  none,      // none: the warp-specialised form everywhere (DCPMLA_DECODE_ROUNDS=0)
  measured,  // where it was measured faster: bf16 caches at head counts in multiples of 32 or
             // with requests of a full tile's pairs, and fp8 caches (the default)
  all,       // every one, narrow bf16 tiles too (DCPMLA_DECODE_ROUNDS=1)
};

struct DecodeConfig {
  DType q_dtype = DType::bf16;
  DType cache_dtype = DType::bf16;
  int num_heads = 1;
  int block_size = 1;
  int tile_pairs = 64;  // (row, head) pairs of one thread block's tile, 1 .. 64
  // Which launches the round decode takes (the backend's rounds_by_default()).
  Rounds rounds = Rounds::none;
  // (row, head) pairs of the schedule's mean request (rows x H / requests; 0: not known).
  std::int64_t request_pairs = 0;
};
// The CUDA backend's Rounds: measured, or all / none where DCPMLA_DECODE_ROUNDS is 1 / 0 (any
// other value is an error). The backend reads it once, when it is made (not on every decode:
// getenv scans the environment).
Rounds rounds_by_default();

struct DecodeKernelChoice {
  DecodeKernel kernel = DecodeKernel::none;
  // sm90 kernels: the tile runs the narrow form of this many pairs (0: the wide form).
  int narrow_pairs = 0;
  std::string why_not;  // kernel none: why the configuration is not supported
  bool supported() const { return kernel != DecodeKernel::none; }
};

DecodeKernelChoice select_decode_kernel(const DecodeConfig& config);

}  // namespace dcpmla::cuda
