#include "event_timer.h"

#include <fmt/format.h>

#include "dcpmla/error.h"

namespace dcpmla::bench {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::backend_failure, what, "cudaSuccess", cudaGetErrorString(e));
  }
}

namespace {

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime");
  return ms;
}

}  // namespace

EventTimer::EventTimer(int device, int steps, bool record_launches)
    : device_(device), record_launches_(record_launches) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  events_.assign(std::size_t(steps) * kMarksPerStep, nullptr);
  for (auto& e : events_) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  marks_.resize(std::size_t(steps));
}

EventTimer::~EventTimer() {
  cudaSetDevice(device_);
  for (auto e : events_) {
    if (e) cudaEventDestroy(e);
  }
}

void EventTimer::set_step(int step) {
  step_ = step;
  marks_[std::size_t(step)] = StepMarks{};
}

cudaEvent_t EventTimer::event(int step, int index) const {
  return events_[std::size_t(step) * kMarksPerStep + std::size_t(index)];
}

int EventTimer::record(Stream s) {
  StepMarks& m = marks_[std::size_t(step_)];
  require(m.count < kMarksPerStep, ErrorCode::out_of_range, "EventTimer marks of one step",
          fmt::format("< {}", kMarksPerStep), std::to_string(m.count + 1));
  check_cuda(cudaEventRecord(event(step_, m.count), static_cast<cudaStream_t>(s)),
             "cudaEventRecord");
  return m.count++;
}

void EventTimer::mark(DcpStepPoint point, Stream s) {
  const int index = record(s);
  marks_[std::size_t(step_)].point_event[std::size_t(point)] = index;
}

void EventTimer::mark_launch(DcpLaunch launch, Stream s) {
  if (!record_launches_) return;
  const int index = record(s);
  marks_[std::size_t(step_)].launch_events.emplace_back(launch, index);
}

StepPhases EventTimer::phases(int step) const {
  const StepMarks& m = marks_[std::size_t(step)];
  auto at = [&](DcpStepPoint p) { return event(step, m.point_event[std::size_t(p)]); };
  StepPhases p;
  p.query_gather = elapsed_ms(at(DcpStepPoint::begin), at(DcpStepPoint::query_gathered));
  p.decode = elapsed_ms(at(DcpStepPoint::query_gathered), at(DcpStepPoint::decoded));
  p.combine = elapsed_ms(at(DcpStepPoint::decoded), at(DcpStepPoint::combined));
  p.step = elapsed_ms(at(DcpStepPoint::begin), at(DcpStepPoint::combined));
  // Every launch mark follows the step's begin mark, so index - 1 is the previous mark.
  for (const auto& [launch, index] : m.launch_events) {
    p.launches.emplace_back(launch, elapsed_ms(event(step, index - 1), event(step, index)));
  }
  return p;
}

float EventTimer::span(int first, int last) const {
  const auto begin = std::size_t(DcpStepPoint::begin), end = std::size_t(DcpStepPoint::combined);
  return elapsed_ms(event(first, marks_[std::size_t(first)].point_event[begin]),
                    event(last, marks_[std::size_t(last)].point_event[end]));
}

EventSeries::EventSeries(int device, int calls) : device_(device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  events_.assign(std::size_t(calls) + 1, nullptr);
  for (auto& e : events_) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
}

EventSeries::~EventSeries() {
  cudaSetDevice(device_);
  for (auto e : events_) {
    if (e) cudaEventDestroy(e);
  }
}

void EventSeries::record(int i, Stream s) {
  check_cuda(cudaEventRecord(events_[std::size_t(i)], static_cast<cudaStream_t>(s)),
             "cudaEventRecord");
}

float EventSeries::ms(int i, int j) const {
  return elapsed_ms(events_[std::size_t(i)], events_[std::size_t(j)]);
}

}  // namespace dcpmla::bench
