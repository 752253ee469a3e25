// A DcpStepTimer that records a CUDA event at each point of each timed step, and after each launch
// of the query gather and the combine, so the phases of every step (query all-gather, decode,
// combine) and the launches inside them are measured on the GPU, without host syncs.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <utility>
#include <vector>

#include "dcpmla/dcp.h"

namespace dcpmla::bench {

// Milliseconds of one step's phases on one rank.
struct StepPhases {
  float query_gather = 0;  // all-gather of the query over heads + the layout change after it
  float decode = 0;        // the rank's local attention over its KV shard
  float combine = 0;       // ag_rs or a2a, to the final output of this rank's heads
  float step = 0;          // begin to combined
  // Each marked launch of the step in stream order, with the milliseconds from the step's
  // previous mark to its own (empty when launches are not recorded, and for W = 1).
  std::vector<std::pair<DcpLaunch, float>> launches;
};

class EventTimer final : public DcpStepTimer {
 public:
  // Events on `device` for `steps` steps. record_launches false: only the four points of a
  // step get events (mark_launch does nothing), as before the launches were timed.
  EventTimer(int device, int steps, bool record_launches = true);
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() override;

  // The following marks belong to step `step` (< steps); forgets any earlier marks of that step.
  void set_step(int step);
  void mark(DcpStepPoint point, Stream s) override;
  void mark_launch(DcpLaunch launch, Stream s) override;
  // After the stream has passed the last mark of `step`.
  StepPhases phases(int step) const;
  // Milliseconds from the begin of step `first` to the end (combined) of step `last`.
  float span(int first, int last) const;

 private:
  static constexpr int kMarksPerStep = 16;  // 4 points + at most 6 launches, with room
  struct StepMarks {
    int count = 0;                     // events recorded so far
    std::array<int, 4> point_event{};  // the event of each DcpStepPoint
    std::vector<std::pair<DcpLaunch, int>> launch_events;
  };
  int record(Stream s);  // the next event of the current step, recorded on s
  cudaEvent_t event(int step, int index) const;
  int device_;
  bool record_launches_;
  int step_ = 0;
  std::vector<cudaEvent_t> events_;  // [steps, kMarksPerStep], in each step's mark order
  std::vector<StepMarks> marks_;     // [steps]
};

// Events at the start of each of n back-to-back calls and after the last one.
class EventSeries {
 public:
  EventSeries(int device, int calls);
  EventSeries(const EventSeries&) = delete;
  EventSeries& operator=(const EventSeries&) = delete;
  ~EventSeries();
  int calls() const { return int(events_.size()) - 1; }
  // Event i (0 <= i <= calls) on stream s: before call i, or after the last call for i == calls.
  void record(int i, Stream s);
  // After the stream has passed event j: milliseconds from event i to event j.
  float ms(int i, int j) const;

 private:
  int device_;
  std::vector<cudaEvent_t> events_;
};

// Throws Error(backend_failure, what, "cudaSuccess", message) unless e is cudaSuccess.
void check_cuda(cudaError_t e, const char* what);

}  // namespace dcpmla::bench
