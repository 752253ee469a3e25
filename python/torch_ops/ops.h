// The functions behind the torch ops of library.cc (schemas there). Outputs are written in place
// on torch's current stream; nothing is allocated and nothing synchronises except schedule_status.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "tensor_args.h"

namespace dcpmla::torch_ops {

// attention_ops.cc
void mla_decode(Tensor q, Tensor kv_cache, Tensor block_table, Tensor schedule, Tensor workspace,
                Tensor out, Tensor lse, double softmax_scale, double q_scale, double k_scale);
void merge_states(Tensor v, Tensor s, Tensor v_out, Tensor s_out, bool lse_base_e);
void write_kv(Tensor latent, Tensor slot_mapping, Tensor kv_cache, double k_scale);

// schedule_ops.cc. config: [num_heads, block_size, num_blocks, dcp_world_size, dcp_rank,
// dcp_interleave]; limits: [max_num_reqs, max_num_tokens, max_blocks_per_req].
// [schedule bytes, workspace bytes] of a schedule for these limits on device (-1: the CPU).
std::vector<std::int64_t> schedule_sizes(std::int64_t device, std::vector<std::int64_t> config,
                                         std::vector<std::int64_t> limits);
// The host planner on CPU query_start_loc [B + 1] / seq_lens [B] (int32 or int64), written into
// the schedule tensor (on its device, asynchronously). mask: [] (causal), one or B of
// "causal" / "full". num_tokens -1: no padding rows. limits [-1, -1, -1]: the capacity the batch's
// plan needs, written only when the schedule tensor holds it. Returns [schedule bytes, workspace
// bytes] of the capacity.
std::vector<std::int64_t> plan_host(Tensor schedule, Tensor query_start_loc, Tensor seq_lens,
                                    std::int64_t num_tokens, std::vector<std::string> mask,
                                    std::vector<std::int64_t> config,
                                    std::vector<std::int64_t> limits);
// The device planner on int32 query_start_loc / seq_lens on the schedule's device (causal).
// num_tokens -1: the capacity's rows.
void plan_device(Tensor schedule, Tensor query_start_loc, Tensor seq_lens, std::int64_t num_tokens,
                 std::vector<std::int64_t> config, std::vector<std::int64_t> limits);
// (fault code, request, message) of the plan written last (synchronises torch's stream).
std::tuple<std::int64_t, std::int64_t, std::string> schedule_status(Tensor schedule);
void schedule_release(Tensor schedule);
// Whether this build runs CUDA tensors.
bool has_cuda_backend();

}  // namespace dcpmla::torch_ops
