// Host-side checks of one collective's arguments, run before NCCL (or the peer communicator) sees
// them: null buffers with a nonzero count, sizes that overflow, and buffers that overlap other than
// in NCCL's in-place form.
#pragma once

#include <cstddef>

#include "dcpmla/types.h"

namespace dcpmla::collective {

// The one overlap of send and recv that NCCL accepts, if any.
enum class InPlace {
  never,
  send_is_own_recv_chunk,  // all_gather: send == recv + rank * count
  recv_is_own_send_chunk,  // reduce_scatter: recv == send + rank * count
};

// One collective on one rank: send holds send_chunks * count elements of element_bytes bytes,
// recv holds recv_chunks * count.
struct CollectiveArgs {
  const char* op;  // named in every error: "all_gather", "reduce_scatter_sum", "all_to_all"
  const void* send;
  const void* recv;
  std::size_t count;
  std::size_t element_bytes;
  int world;
  int rank;
  int send_chunks;
  int recv_chunks;
  InPlace in_place;
};

// Throws Error(invalid_argument) naming "<op>: send", "<op>: recv", "<op>: count" or
// "<op>: rank" on bad arguments. A count of 0 accepts null buffers.
void check(const CollectiveArgs& args);

CollectiveArgs all_gather_args(const void* send, const void* recv, std::size_t count, DType dtype,
                               int world, int rank);
CollectiveArgs reduce_scatter_args(const float* send, const float* recv, std::size_t count,
                                   int world, int rank);
CollectiveArgs all_to_all_args(const void* send, const void* recv, std::size_t count, DType dtype,
                               int world, int rank);

}  // namespace dcpmla::collective
