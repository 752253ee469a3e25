// A DcpStepTimer that records a CUDA event at each point of each timed step, so the phases of
// every step (query all-gather, decode, combine) are measured on the GPU, without host syncs.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "dcpmla/dcp.h"

namespace dcpmla::bench {

// Milliseconds of one step's phases on one rank.
struct StepPhases {
  float query_gather = 0;  // all-gather of the query over heads + the layout change after it
  float decode = 0;        // the rank's local attention over its KV shard
  float combine = 0;       // ag_rs or a2a, to the final output of this rank's heads
  float step = 0;          // begin to combined
};

class EventTimer final : public DcpStepTimer {
 public:
  // Events on `device` for `steps` steps of four points each.
  EventTimer(int device, int steps);
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() override;

  // The following marks belong to step `step` (< steps).
  void set_step(int step) { step_ = step; }
  void mark(DcpStepPoint point, Stream s) override;
  // After the stream has passed the last mark of `step`.
  StepPhases phases(int step) const;
  // Milliseconds from the begin of step `first` to the end (combined) of step `last`.
  float span(int first, int last) const;

 private:
  int device_;
  int step_ = 0;
  std::vector<cudaEvent_t> events_;  // [steps, 4]
};

// Throws Error(backend_failure, what, "cudaSuccess", message) unless e is cudaSuccess.
void check_cuda(cudaError_t e, const char* what);

}  // namespace dcpmla::bench
