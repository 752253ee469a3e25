#include "event_timer.h"

#include "dcpmla/error.h"

namespace dcpmla::bench {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::backend_failure, what, "cudaSuccess", cudaGetErrorString(e));
  }
}

EventTimer::EventTimer(int device, int steps) : device_(device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  events_.assign(std::size_t(steps) * 4, nullptr);
  for (auto& e : events_) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
}

EventTimer::~EventTimer() {
  cudaSetDevice(device_);
  for (auto e : events_) {
    if (e) cudaEventDestroy(e);
  }
}

void EventTimer::mark(DcpStepPoint point, Stream s) {
  check_cuda(cudaEventRecord(events_[std::size_t(step_) * 4 + std::size_t(point)],
                             static_cast<cudaStream_t>(s)),
             "cudaEventRecord");
}

StepPhases EventTimer::phases(int step) const {
  const cudaEvent_t* e = &events_[std::size_t(step) * 4];
  StepPhases p;
  check_cuda(cudaEventElapsedTime(&p.query_gather, e[0], e[1]), "cudaEventElapsedTime");
  check_cuda(cudaEventElapsedTime(&p.decode, e[1], e[2]), "cudaEventElapsedTime");
  check_cuda(cudaEventElapsedTime(&p.combine, e[2], e[3]), "cudaEventElapsedTime");
  check_cuda(cudaEventElapsedTime(&p.step, e[0], e[3]), "cudaEventElapsedTime");
  return p;
}

float EventTimer::span(int first, int last) const {
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, events_[std::size_t(first) * 4],
                                  events_[std::size_t(last) * 4 + 3]),
             "cudaEventElapsedTime");
  return ms;
}

}  // namespace dcpmla::bench
