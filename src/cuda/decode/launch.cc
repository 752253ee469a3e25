// Host side of the decode: validation, the plan upload, and the three launches (decode tiles,
// split merge, padding fill), all on one stream. The split merge and the padding fill are
// launched with programmatic dependent launch (launch_dependent, launch_config.h): each starts
// as the kernel before it exits and waits for it on the device, so nothing may be enqueued
// between the launches below.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "cuda/kernels.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

void require_aligned(const void* p, const char* argument, int bytes = 16) {
  require(reinterpret_cast<std::uintptr_t>(p) % bytes == 0, ErrorCode::unsupported, argument,
          fmt::format("a {}-byte aligned device pointer (CUDA backend)", bytes),
          fmt::format("{}", p));
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
  const bool into_send = decodes_into_send(a);
  if (into_send) {
    require_aligned(a.send.data, "send", 4);  // packed rows are 4-byte aligned at best
  } else {
    require_aligned(a.out.data, "out");
  }
  require_aligned(a.cache.data, "cache.data");
  if (plan.num_partial_rows > 0) require_aligned(a.workspace.data, "workspace");

  const DevicePlan::View v = dp.upload(a, s);
  // Under capture the kernels cover the capacity, so replays of later plans that fit still run
  // every block; outside, exactly this plan's.
  const LaunchCapacity& grid = v.capturing ? v.capacity : v.counts;
  require(grid.tiles <= 0x7fffffff, ErrorCode::unsupported, "plan",
          "at most 2^31 - 1 decode thread blocks", std::to_string(grid.tiles));
  // Workspace: partial O [cap, H, 512] then partial LSE [cap, H], where cap is the rows the
  // workspace holds (not this plan's count), so the pointers stay fixed for a captured graph.
  const std::size_t row_bytes = std::size_t(H) * (kLatentDim + 1) * sizeof(float);
  const std::size_t cap_rows = a.workspace.bytes() / row_bytes;
  float* ws = cap_rows > 0 ? static_cast<float*>(a.workspace.data) : nullptr;
  float* ws_lse = cap_rows > 0 ? ws + cap_rows * H * kLatentDim : nullptr;
  const bool fp8 = a.cache.dtype == DType::fp8_e4m3;
  OutputRows final_rows;
  if (into_send) {
    final_rows = {a.send.data, nullptr, a.send.dtype == DType::bf16, H / a.send_world,
                  plan.num_rows};
  } else {
    final_rows = {a.out.data, a.lse.as<float>(), a.out.dtype == DType::bf16, 0, 0};
  }

  DecodeParams p;
  p.header = v.header;
  p.tiles = v.tiles;
  p.row_bound = v.row_bound;
  p.q = a.q.data;
  p.q_group_heads = query_is_gathered(a) ? int(a.q.shape[2]) : 0;
  p.q_rows = plan.num_rows;
  p.cache = a.cache.data;
  p.block_table = a.block_table.as<const std::int32_t>();
  p.max_blocks = cols;
  p.num_blocks = a.cache.num_blocks;
  p.block_size = bs;
  p.num_heads = H;
  // fp8 keys stay unscaled e4m3 values in the kernel: k_scale joins the score and output scales.
  p.score_scale = a.softmax_scale * a.q_scale * (fp8 ? a.cache.k_scale : 1.0f);
  p.out_scale = fp8 ? a.cache.k_scale : 1.0f;
  p.final_rows = final_rows;
  p.partial_out = ws;
  p.partial_lse = ws_lse;
  const DecodeKernelChoice kernel = select_decode_kernel({a.q.dtype, a.cache.dtype, H, bs});
  require(kernel.supported(), ErrorCode::unsupported, "decode",
          "a configuration a CUDA kernel runs", kernel.why_not);
  if (kernel.kernel == DecodeKernel::fma) {
    launch_fma_decode(p, a.q.dtype, a.cache.dtype, grid.tiles, s);
  } else {
    launch_sm90_decode(p, kernel.kernel, grid.tiles, kv_mostly_shared(plan), s);
  }
  if (grid.merge_rows > 0) {
    int max_splits = 0;
    for (const SplitMerge& m : plan.merges) max_splits = std::max(max_splits, int(m.num_splits));
    launch_split_merge({v.header, v.merge_rows, H, ws, ws_lse, final_rows}, grid.merge_rows,
                       max_splits, s);
  }
  if (v.capturing || v.counts.rows > plan.num_real_rows) {
    launch_fill_padding(final_rows, v.header, grid.rows, H, s);
  }
  dp.mark_used(s);
}

}  // namespace dcpmla::cuda
