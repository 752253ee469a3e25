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
  events_.assign(std::size_t(steps) * kEventsPerStep, nullptr);
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
  marks_[std::size_t(step)] = StepEvents{};
}

cudaEvent_t EventTimer::event(int step, int index) const {
  return events_[std::size_t(step) * kEventsPerStep + std::size_t(index)];
}

int EventTimer::record(Stream s) {
  StepEvents& m = marks_[std::size_t(step_)];
  DCPMLA_REQUIRE(m.count < kEventsPerStep, ErrorCode::out_of_range, "EventTimer events of one step",
                 fmt::format("< {}", kEventsPerStep), std::to_string(m.count + 1));
  check_cuda(cudaEventRecord(event(step_, m.count), static_cast<cudaStream_t>(s)),
             "cudaEventRecord");
  return m.count++;
}

void EventTimer::before(const testing::Call&, Stream s) {
  StepEvents& m = marks_[std::size_t(step_)];
  if (m.count == 0) m.begin = record(s);
}

void EventTimer::after(const testing::Call& call, Stream s) {
  StepEvents& m = marks_[std::size_t(step_)];
  const std::optional<Launch> launch = namer_.name(call.op);
  if (call.op == testing::Op::decode) {
    m.decoded = m.combined = record(s);
    // W = 1: no gather before the decode and no combine after it.
    if (m.query_gathered < 0) m.query_gathered = m.begin;
    return;
  }
  if (!launch) return;
  if (!record_launches_ && !in_query_gather(*launch) && !ends_step(*launch)) return;
  const int index = record(s);
  if (in_query_gather(*launch)) m.query_gathered = index;
  m.combined = index;
  if (record_launches_) m.launch_events.emplace_back(*launch, index);
}

StepPhases EventTimer::phases(int step) const {
  const StepEvents& m = marks_[std::size_t(step)];
  auto at = [&](int index) { return event(step, index); };
  StepPhases p;
  p.query_gather = elapsed_ms(at(m.begin), at(m.query_gathered));
  p.decode = elapsed_ms(at(m.query_gathered), at(m.decoded));
  p.combine = elapsed_ms(at(m.decoded), at(m.combined));
  p.step = elapsed_ms(at(m.begin), at(m.combined));
  // Every launch event follows the step's begin event, so index - 1 is the previous event.
  for (const auto& [launch, index] : m.launch_events) {
    p.launches.emplace_back(launch, elapsed_ms(at(index - 1), at(index)));
  }
  return p;
}

float EventTimer::span(int first, int last) const {
  return elapsed_ms(event(first, marks_[std::size_t(first)].begin),
                    event(last, marks_[std::size_t(last)].combined));
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
