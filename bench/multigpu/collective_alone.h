// The collectives of a DCP step taken out of it: an observer that logs the collectives dcp_step
// makes (operation, buffers, count, dtype), each named after its launch, so the benchmark can
// replay the very same NCCL call back to back on otherwise idle GPUs ("collective alone") and
// compare it with its time inside the step.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dcpmla/testing/observed.h"
#include "step_launch.h"

namespace dcpmla::bench {

// One collective call as dcp_step made it on one rank.
struct CollectiveCall {
  Launch launch = Launch::nccl_all_gather_q;  // an nccl_* launch
  testing::Call call;                         // replay with testing::replay
  // "<launch>/<dtype>", e.g. "nccl_all_gather_q/bf16": the key of the collective-alone figures.
  std::string name() const;
  // The bytes this rank's call reads from send and writes to recv (all_to_all_peers: the peers'
  // chunks only).
  std::size_t send_bytes(int world) const;
  std::size_t recv_bytes(int world) const;
};

// Appends every collective of the observed steps to calls(). Meant for an untimed step: the log
// allocates.
class CollectiveRecorder final : public testing::CallObserver {
 public:
  void after(const testing::Call& call, Stream s) override;
  void clear() { calls_.clear(); }
  const std::vector<CollectiveCall>& calls() const { return calls_; }

 private:
  LaunchNamer namer_;
  std::vector<CollectiveCall> calls_;
};

}  // namespace dcpmla::bench
