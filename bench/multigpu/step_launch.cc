#include "step_launch.h"

namespace dcpmla::bench {

const char* to_string(Launch l) {
  switch (l) {
    case Launch::nccl_all_gather_q:
      return "nccl_all_gather_q";
    case Launch::nccl_all_gather_lse:
      return "nccl_all_gather_lse";
    case Launch::kernel_rescale:
      return "kernel_rescale";
    case Launch::nccl_reduce_scatter_o:
      return "nccl_reduce_scatter_o";
    case Launch::kernel_convert_o:
      return "kernel_convert_o";
    case Launch::nccl_all_to_all:
      return "nccl_all_to_all";
    case Launch::kernel_merge:
      return "kernel_merge";
  }
  return "unknown";
}

bool is_collective(Launch l) {
  return l == Launch::nccl_all_gather_q || l == Launch::nccl_all_gather_lse ||
         l == Launch::nccl_reduce_scatter_o || l == Launch::nccl_all_to_all;
}

bool in_query_gather(Launch l) {
  return l == Launch::nccl_all_gather_q;
}

bool ends_step(Launch l) {
  return l == Launch::kernel_convert_o || l == Launch::kernel_merge;
}

std::optional<Launch> LaunchNamer::name(testing::Op op) {
  using testing::Op;
  const Op previous = previous_;
  previous_ = op;
  switch (op) {
    case Op::all_gather:
      return previous == Op::decode ? Launch::nccl_all_gather_lse : Launch::nccl_all_gather_q;
    case Op::combine_rescale:
      return Launch::kernel_rescale;
    case Op::reduce_scatter_sum:
      return Launch::nccl_reduce_scatter_o;
    case Op::convert:
      return Launch::kernel_convert_o;
    case Op::all_to_all:
    case Op::all_to_all_peers:
      return Launch::nccl_all_to_all;
    case Op::combine_merge:
      return Launch::kernel_merge;
    default:
      return std::nullopt;
  }
}

}  // namespace dcpmla::bench
