// `dcpmla attend`: one DCP decode step read from a case directory of .npy files and a
// config.json, run on the CPU backend with the W ranks as threads, written back as .npy.
// The format is documented in docs/attend-format.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "dcpmla/batch.h"
#include "dcpmla/dcp.h"
#include "dcpmla/plan.h"
#include "dcpmla/types.h"

namespace dcpmla::tool {

struct CaseConfig {
  int world = 1;
  int interleave = 1;
  int heads = 0;  // all heads (after the DCP query all-gather); a multiple of world
  float softmax_scale = 0.0f;
  int block_size = 0;
  DType kv_dtype = DType::f32;
  float k_scale = 1.0f;  // fp8 only
  float q_scale = 1.0f;
  DType q_dtype = DType::f32;  // precision of the query and output inside the step (fp32/bf16)
};

// A loaded and validated case. The batch carries query_start_loc, total_len, mask, num_tokens
// and the block table (read from block_table.npy, or built by the tool for form (a)).
struct Case {
  CaseConfig config;
  Batch batch;
  std::vector<float> query;  // [rows, H, 576]
  // Form (a): global latents, request after request in position order, [sum_b T_b, 576].
  std::optional<std::vector<float>> kv;
  // Form (b): every rank's cache as raw bytes of kv_dtype, [num_blocks_r, block_size, 576].
  std::vector<std::vector<std::uint8_t>> rank_caches;
  std::vector<std::int64_t> rank_num_blocks;  // [W]; form (a): the blocks the tool allocates
};

// Reads DIR/config.json and the .npy files; every problem throws Error naming the file or field,
// what was expected and what was found.
Case load_case(const std::filesystem::path& dir);

struct AttendOptions {
  Combine combine = Combine::ag_rs;
  int threads = 0;  // CPU threads in total (0 = all), split over the ranks
  // > 0: every request's KV in chunks of this many blocks; 0: never split; -1: chosen for the
  // per-rank thread count.
  int kv_chunk_blocks = -1;
};

struct AttendResult {
  std::int64_t rows = 0;
  int heads = 0;
  std::vector<float> out;  // [rows, H, 512]
  std::vector<float> lse;  // [rows, H], natural log
};

// Plans every rank (all validation happens here, before any rank starts), then runs the step.
AttendResult run_case(const Case& c, const AttendOptions& options);

// Writes out.npy and lse.npy into dir (created if missing) through temporary files, so either
// both appear complete or neither is touched.
void write_result(const AttendResult& result, const std::filesystem::path& dir);

}  // namespace dcpmla::tool
