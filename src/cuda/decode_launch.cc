// Host side of the decode: validation, the plan upload, and the three launches (decode tiles,
// split merge, padding fill), all on one stream.
#include <fmt/format.h>

#include <cstdint>

#include "check.h"
#include "kernels.h"

namespace dcpmla::cuda {
namespace {

void require_aligned(const void* p, const char* argument) {
  require(reinterpret_cast<std::uintptr_t>(p) % 16 == 0, ErrorCode::unsupported, argument,
          "a 16-byte aligned device pointer (CUDA backend)", fmt::format("{}", p));
}

}  // namespace

void decode(const DecodeArgs& a, DevicePlan& dp, cudaStream_t s) {
  validate(a);
  const Plan& plan = *a.plan;
  const int H = plan.config.num_heads;
  const int bs = plan.config.block_size;
  // What the host can check of the device block table: its extent.
  const std::int64_t cols = a.block_table.shape[1];
  for (int b = 0; b < plan.num_requests; ++b) {
    const std::int64_t needed = (std::int64_t(plan.request_local_len[b]) + bs - 1) / bs;
    require(needed <= cols, ErrorCode::shape_mismatch, fmt::format("block_table row {}", b),
            fmt::format(">= {} blocks", needed), fmt::format("{} columns", cols));
  }
  require_aligned(a.q.data, "q");
  require_aligned(a.out.data, "out");
  require_aligned(a.cache.data, "cache.data");
  if (plan.num_partial_rows > 0) require_aligned(a.workspace.data, "workspace");

  const DevicePlan::View v = dp.upload(plan, s);
  require(v.num_tiles <= 0x7fffffff, ErrorCode::unsupported, "plan",
          "at most 2^31 - 1 decode tiles", std::to_string(v.num_tiles));
  auto* ws = static_cast<float*>(a.workspace.data);
  float* ws_lse = plan.num_partial_rows > 0
                      ? ws + std::size_t(plan.num_partial_rows) * H * kLatentDim
                      : nullptr;
  const bool fp8 = a.cache.dtype == DType::fp8_e4m3;
  const bool out_bf16 = a.out.dtype == DType::bf16;

  DecodeParams p;
  p.tiles = v.tiles;
  p.row_bound = v.row_bound;
  p.q = a.q.data;
  p.cache = a.cache.data;
  p.block_table = a.block_table.as<const std::int32_t>();
  p.max_blocks = cols;
  p.num_blocks = a.cache.num_blocks;
  p.block_size = bs;
  p.num_heads = H;
  // fp8 keys stay unscaled e4m3 values in the kernel: k_scale joins the score and output scales.
  p.score_scale = a.softmax_scale * a.q_scale * (fp8 ? a.cache.k_scale : 1.0f);
  p.out_scale = fp8 ? a.cache.k_scale : 1.0f;
  p.out = a.out.data;
  p.out_bf16 = out_bf16;
  p.lse = a.lse.as<float>();
  p.partial_out = plan.num_partial_rows > 0 ? ws : nullptr;
  p.partial_lse = ws_lse;
  if (tensor_core_decode_supports(a.q.dtype, a.cache.dtype)) {
    launch_decode_tc(p, a.cache.dtype, v.num_tiles, s);
  } else {
    launch_decode_tiles(p, a.q.dtype, a.cache.dtype, v.num_tiles, s);
  }
  if (v.num_merge_rows > 0) {
    launch_split_merge(
        {v.merge_rows, v.num_merge_rows, H, ws, ws_lse, a.out.data, out_bf16, a.lse.as<float>()},
        s);
  }
  if (v.padding_end > v.padding_begin) {
    launch_fill_padding(a.out.data, out_bf16, a.lse.as<float>(), v.padding_begin, v.padding_end, H,
                        s);
  }
  dp.mark_used(s);
}

}  // namespace dcpmla::cuda
