// A CallObserver of a DCP step (pass it to RankStep::run, which observes the step's backend and
// communicator) that records a CUDA event before each timed step's first call and after its
// calls, so the phases of every step (query all-gather, decode, combine) and the launches inside
// them are measured on the GPU, without host syncs.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <utility>
#include <vector>

#include "dcpmla/testing/observed.h"
#include "step_launch.h"

namespace dcpmla::bench {

// Milliseconds of one step's phases on one rank.
struct StepPhases {
  float query_gather = 0;  // all-gather of the query over heads
  float decode = 0;        // the rank's local attention over its KV shard
  float combine = 0;       // ag_rs or a2a, to the final output of this rank's heads
  float step = 0;          // begin to combined
  // Each launch of the step in stream order, with the milliseconds from the step's previous
  // event to its own (empty when launches are not recorded, and for W = 1).
  std::vector<std::pair<Launch, float>> launches;
};

class EventTimer final : public testing::CallObserver {
 public:
  // Events on `device` for `steps` steps. record_launches false: events only where a phase
  // ends, not after every launch.
  EventTimer(int device, int steps, bool record_launches = true);
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() override;

  // The following calls belong to step `step` (< steps); forgets any earlier events of that step.
  void set_step(int step);
  void before(const testing::Call& call, Stream s) override;
  void after(const testing::Call& call, Stream s) override;
  // After the stream has passed the last call of `step`.
  StepPhases phases(int step) const;
  // Milliseconds from the begin of step `first` to the end of step `last`.
  float span(int first, int last) const;

 private:
  static constexpr int kEventsPerStep = 16;  // begin + decode + at most 5 launches, with room
  struct StepEvents {
    int count = 0;  // events recorded so far
    int begin = -1, query_gathered = -1, decoded = -1, combined = -1;
    std::vector<std::pair<Launch, int>> launch_events;
  };
  int record(Stream s);  // the next event of the current step, recorded on s
  cudaEvent_t event(int step, int index) const;
  int device_;
  bool record_launches_;
  int step_ = 0;
  LaunchNamer namer_;
  std::vector<cudaEvent_t> events_;  // [steps, kEventsPerStep], in each step's order
  std::vector<StepEvents> marks_;    // [steps]
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
