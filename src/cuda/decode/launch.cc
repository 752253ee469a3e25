// Host side of the decode: the three launches (work items, split merge, padding fill) of a
// schedule, all on one stream. The split merge and the padding fill are launched with
// programmatic dependent launch (launch_dependent, launch_config.h): each starts as the kernel
// before it exits and waits for it on the device, so nothing may be enqueued between the
// launches below.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "core/schedule_layout.h"
#include "cuda/kernels.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

void require_aligned(const void* p, const char* argument, int bytes = 16) {
  DCPMLA_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % bytes == 0, ErrorCode::unsupported, argument,
                 fmt::format("a {}-byte aligned device pointer (CUDA backend)", bytes),
                 fmt::format("{}", p));
}

}  // namespace

bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DCPMLA_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

DecodeKernelChoice check_decode(const DecodeArgs& a, const PlanConfig& config, Rounds rounds) {
  DCPMLA_REQUIRE(config.model.tile_pairs == kTilePairs, ErrorCode::unsupported,
                 "plan.config.model.tile_pairs",
                 fmt::format("{} (the CUDA backend's device_model())", kTilePairs),
                 std::to_string(config.model.tile_pairs));
  require_aligned(a.q.data, "q");
  if (decodes_into_send(a)) {
    require_aligned(a.send.data, "send", 4);  // packed rows are 4-byte aligned at best
  } else {
    require_aligned(a.out.data, "out");
  }
  require_aligned(a.cache.data, "cache.data");
  if (a.workspace.bytes() > 0) require_aligned(a.workspace.data, "workspace");
  const DecodeKernelChoice kernel = select_decode_kernel(
      {a.q.dtype, a.cache.dtype, config.num_heads, config.block_size, kTilePairs, rounds});
  DCPMLA_REQUIRE(kernel.supported(), ErrorCode::unsupported, "decode",
                 "a configuration a CUDA kernel runs", kernel.why_not);
  return kernel;
}

void decode(const DecodeArgs& a, const Schedule& schedule, Rounds rounds, cudaStream_t s) {
  const PlanConfig& config = schedule.config();
  const Schedule::HostView& host = schedule.host_view();
  const ScheduleCapacity& cap = schedule.capacity();
  const int H = config.num_heads;
  const int bs = config.block_size;
  const bool into_send = decodes_into_send(a);
  // A plan known only on the device, or one a graph will replay others in place of, is launched
  // for the schedule's capacity (blocks past the header's counts exit); an eager host plan for
  // exactly its counts.
  const bool for_capacity = host.on_device || is_capturing(s);
  // check_decode accepted the arguments: the kernel is chosen, not checked, again, from the
  // requests the launch is made for.
  const std::int64_t requests = for_capacity ? cap.requests : host.requests;
  const std::int64_t request_pairs =
      requests > 0 ? (for_capacity ? cap.rows : host.rows) * H / requests : 0;
  const DecodeKernelChoice kernel =
      select_decode_kernel({a.q.dtype, a.cache.dtype, H, bs, kTilePairs, rounds, request_pairs});

  const std::int64_t rows = host.rows;
  const std::int64_t items = for_capacity ? cap.work_items : host.work_items;
  const std::int64_t merge_rows = for_capacity ? cap.merge_rows : host.merge_rows;
  DCPMLA_REQUIRE(items <= 0x7fffffff, ErrorCode::unsupported, "schedule",
                 "at most 2^31 - 1 decode thread blocks", std::to_string(items));
  const ScheduleView v = schedule_view(schedule.memory(), cap);
  // Workspace: partial O [cap, H, 512] then partial LSE [cap, H], where cap is the rows the
  // workspace holds (not this plan's count), so the pointers stay fixed for a captured graph.
  const std::size_t row_bytes = std::size_t(H) * (kLatentDim + 1) * sizeof(float);
  const std::size_t cap_rows = a.workspace.bytes() / row_bytes;
  float* ws = cap_rows > 0 ? static_cast<float*>(a.workspace.data) : nullptr;
  float* ws_lse = cap_rows > 0 ? ws + cap_rows * H * kLatentDim : nullptr;
  const bool fp8 = a.cache.dtype == DType::fp8_e4m3;
  OutputRows final_rows;
  if (into_send) {
    final_rows = {a.send.data, nullptr, a.send.dtype == DType::bf16, H / a.send_world, rows};
  } else {
    final_rows = {a.out.data, a.lse.as<float>(), a.out.dtype == DType::bf16, 0, 0};
  }

  DecodeParams p;
  p.header = v.header;
  p.tiles = v.items;
  p.row_bound = v.row_bound;
  p.q = a.q.data;
  p.q_group_heads = query_is_gathered(a) ? int(a.q.shape[2]) : 0;
  p.q_rows = rows;
  p.cache = a.cache.data;
  p.block_table = a.block_table.as<const std::int32_t>();
  p.max_blocks = a.block_table.shape[1];
  p.num_blocks = a.cache.num_blocks;
  p.block_size = bs;
  p.num_heads = H;
  // fp8 keys stay unscaled e4m3 values in the kernel: k_scale joins the score and output scales.
  p.score_scale = a.softmax_scale * a.q_scale * (fp8 ? a.cache.k_scale : 1.0f);
  p.out_scale = fp8 ? a.cache.k_scale : 1.0f;
  p.final_rows = final_rows;
  p.partial_out = ws;
  p.partial_lse = ws_lse;
  if (kernel.kernel == DecodeKernel::fma) {
    launch_fma_decode(p, a.q.dtype, a.cache.dtype, items, s);
  } else {
    launch_sm90_decode(p, kernel.kernel, items, host.kv_shared, s);
  }
  if (merge_rows > 0) {
    launch_split_merge({v.header, v.merge_rows, H, ws, ws_lse, final_rows}, merge_rows,
                       host.max_splits, s);
  }
  if (for_capacity || rows > host.real_rows) launch_fill_padding(final_rows, v.header, rows, H, s);
}

}  // namespace dcpmla::cuda
