// The collectives of a DCP step taken out of it: a Communicator that logs the calls dcp_step
// makes (operation, buffers, count, dtype) and names each after the launch dcp_step marks next,
// and a replay of one logged call, so the benchmark can time the very same NCCL call back to back
// on otherwise idle GPUs ("collective alone") and compare it with its time inside the step.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "dcpmla/comm.h"
#include "dcpmla/dcp.h"

namespace dcpmla::bench {

enum class CollectiveOp { all_gather, reduce_scatter_sum, all_to_all, all_to_all_peers };

// One collective call as dcp_step made it on one rank.
struct CollectiveCall {
  DcpLaunch launch = DcpLaunch::nccl_all_gather_q;  // an nccl_* launch
  CollectiveOp op = CollectiveOp::all_gather;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  // elements per chunk, as passed to the Communicator
  DType dtype = DType::f32;
  // "<launch>/<dtype>", e.g. "nccl_all_gather_q/bf16": the key of the collective-alone figures.
  std::string name() const;
  // The bytes this rank's call reads from send and writes to recv (all_to_all_peers: the peers'
  // chunks only).
  std::size_t send_bytes(int world) const;
  std::size_t recv_bytes(int world) const;
};

// Forwards every collective to `inner`. As the step's DcpStepTimer (pass it as DcpStepArgs::timer
// too) it labels the call just made with the nccl_* launch that dcp_step marks after it, and
// appends it to calls(). Meant for an untimed step: the log allocates.
class CollectiveRecorder final : public Communicator, public DcpStepTimer {
 public:
  explicit CollectiveRecorder(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count, Stream s) override;
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  void all_to_all_peers(const void* send, void* recv, std::size_t count, DType dtype,
                        Stream s) override;
  void mark(DcpStepPoint, Stream) override {}
  void mark_launch(DcpLaunch launch, Stream s) override;

  void clear() { calls_.clear(), pending_.reset(); }
  const std::vector<CollectiveCall>& calls() const { return calls_; }

 private:
  Communicator& inner_;
  std::optional<CollectiveCall> pending_;
  std::vector<CollectiveCall> calls_;
};

// Makes the call again on comm, with the same buffers, count and dtype.
void replay(const CollectiveCall& call, Communicator& comm, Stream s);

}  // namespace dcpmla::bench
