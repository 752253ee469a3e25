// The launches inside the query-gather and combine phases of a DCP step with W >= 2, named from
// the calls the observed backend and communicator report (nccl_*: one collective of the
// communicator; kernel_*: one backend call, one kernel on the CUDA backend):
//   query gather: nccl_all_gather_q (the decode then reads the query where the gather leaves it)
//   ag_rs:        nccl_all_gather_lse, kernel_rescale, nccl_reduce_scatter_o, kernel_convert_o
//   a2a:          nccl_all_to_all, kernel_merge (the decode writes the all-to-all send rows)
#pragma once

#include <optional>

#include "dcpmla/testing/observed.h"

namespace dcpmla::bench {

enum class Launch {
  nccl_all_gather_q,      // the query [N, Hl, 576] from every rank -> [W, N, Hl, 576]
  nccl_all_gather_lse,    // ag_rs: the partial LSE [N, H] f32 from every rank
  kernel_rescale,         // ag_rs: scale O by exp(lse_r - lse), write this rank's final LSE
  nccl_reduce_scatter_o,  // ag_rs: sum of the rescaled O over ranks, this rank's heads, f32
  kernel_convert_o,       // ag_rs: the summed f32 O to the output's dtype
  nccl_all_to_all,        // a2a: the (O, LSE) rows, one chunk per peer
  kernel_merge,           // a2a: the LSE merge of the W received partials into out and lse
};
const char* to_string(Launch l);
bool is_collective(Launch l);
// True for the launches of the query gather, false for those of the combine.
bool in_query_gather(Launch l);
// True for the last launch of a step (the end of its combine).
bool ends_step(Launch l);

// Names the reported calls of one rank's consecutive steps, in order: the all-gather right after
// a decode is the LSE's, any other the query's. The decode is a phase of its own (no launch).
class LaunchNamer {
 public:
  std::optional<Launch> name(testing::Op op);

 private:
  testing::Op previous_ = testing::Op::convert;
};

}  // namespace dcpmla::bench
