#include "measure.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <iterator>
#include <memory>
#include <thread>
#include <utility>

#include "event_timer.h"
#include "rank_step.h"

namespace dcpmla::bench {
namespace {

Stat stat_of(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front()};
}

// Per-rank, per-combine raw phases of every timed step.
struct RankRecord {
  std::vector<std::vector<StepPhases>> phases;  // [combine][step]
  std::vector<float> loop_ms;                   // [combine]
};

struct Variant {
  Combine combine;
  DType payload;
};
constexpr Variant kVariants[] = {
    {Combine::ag_rs, DType::f32}, {Combine::a2a, DType::f32}, {Combine::a2a, DType::bf16}};

enum class OverRanks { slowest, fastest };

// One phase over the timed steps, in us, taken per step from the slowest or the fastest rank.
Stat phase_stat(const std::vector<RankRecord>& ranks, std::size_t c, int steps,
                float StepPhases::*phase, OverRanks pick) {
  std::vector<double> us;
  for (int i = 0; i < steps; ++i) {
    double v = 1e3 * (ranks.front().phases[c][std::size_t(i)].*phase);
    for (const RankRecord& r : ranks) {
      const double rank_us = 1e3 * (r.phases[c][std::size_t(i)].*phase);
      v = pick == OverRanks::slowest ? std::max(v, rank_us) : std::min(v, rank_us);
    }
    us.push_back(v);
  }
  return stat_of(std::move(us));
}

CombineTiming summarize(Variant v, std::size_t c, const std::vector<RankRecord>& ranks, int steps) {
  CombineTiming t;
  t.combine = v.combine;
  t.payload = v.payload;
  t.query_gather = phase_stat(ranks, c, steps, &StepPhases::query_gather, OverRanks::slowest);
  t.decode = phase_stat(ranks, c, steps, &StepPhases::decode, OverRanks::slowest);
  t.combine_phase = phase_stat(ranks, c, steps, &StepPhases::combine, OverRanks::slowest);
  t.step = phase_stat(ranks, c, steps, &StepPhases::step, OverRanks::slowest);
  // A collective completes on no rank before the last rank has joined it, so a rank that joins
  // early (its decode finished first; for the query gather, its launch came first) waits inside
  // the collective, and its phase counts that wait: the slowest rank's combine is the combine's
  // cost plus the decode imbalance between ranks. The last rank to join waits for nobody, and the
  // ranks leave the collective together, so its phase is the step's shortest: the minimum over
  // ranks is the phase's own cost (approximately: the early ranks may have sent part of their
  // data already, and ag_rs's second collective may still wait a little).
  t.query_gather_own = phase_stat(ranks, c, steps, &StepPhases::query_gather, OverRanks::fastest);
  t.combine_own = phase_stat(ranks, c, steps, &StepPhases::combine, OverRanks::fastest);
  for (const RankRecord& r : ranks) {
    t.loop_us_per_step = std::max(t.loop_us_per_step, 1e3 * r.loop_ms[c] / steps);
    std::vector<double> own;
    for (const StepPhases& p : r.phases[c]) own.push_back(1e3 * p.step);
    t.rank_step_median_us.push_back(stat_of(own).median_us);
  }
  return t;
}

}  // namespace

ShapeTiming measure(const NcclLocalGroup& group, const Shape& shape, const MeasureOptions& o) {
  const int W = group.world();
  const ShapeBatch sb = make_batch(shape, W, o.block_size);

  ShapeTiming result;
  result.world = W;
  result.flops = sb.flops;
  std::vector<RankRecord> records(static_cast<std::size_t>(W));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(W));
  std::atomic<bool> setup_failed{false};
  std::atomic<bool> all_finite{true};
  std::barrier sync(W);
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<RankStep> step;
      std::unique_ptr<EventTimer> timer;
      try {
        step = std::make_unique<RankStep>(r, W, shape, sb, o.block_size, o.target_work_items);
        timer = std::make_unique<EventTimer>(r, o.steps);
      } catch (...) {
        errors[std::size_t(r)] = std::current_exception();
        setup_failed = true;
      }
      // Nobody enters a collective unless every rank is ready to join it.
      sync.arrive_and_wait();
      if (setup_failed) return;
      try {
        Communicator& comm = group.communicator(r);
        RankRecord& rec = records[std::size_t(r)];
        for (const Variant& v : kVariants) {
          for (int i = 0; i < o.warmup; ++i) step->run(comm, v.combine, v.payload, nullptr);
          step->synchronize();
          sync.arrive_and_wait();  // start the timed steps together
          for (int i = 0; i < o.steps; ++i) {
            timer->set_step(i);
            step->run(comm, v.combine, v.payload, timer.get());
          }
          step->synchronize();
          std::vector<StepPhases> phases;
          for (int i = 0; i < o.steps; ++i) phases.push_back(timer->phases(i));
          rec.phases.push_back(std::move(phases));
          rec.loop_ms.push_back(timer->span(0, o.steps - 1));
        }
        if (!step->output_finite()) all_finite = false;
        if (r == 0) {
          result.rows = step->rows();
          result.kv_bytes_per_rank = step->kv_bytes();
          result.work_items = step->work_items();
        }
      } catch (...) {
        // Peers waiting at a barrier go on without this rank; peers already inside a collective
        // wait for it on the GPU, and the caller's timeout has to end the run.
        errors[std::size_t(r)] = std::current_exception();
        sync.arrive_and_drop();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  result.output_finite = all_finite;
  for (std::size_t c = 0; c < std::size(kVariants); ++c) {
    result.combines.push_back(summarize(kVariants[c], c, records, o.steps));
  }
  return result;
}

}  // namespace dcpmla::bench
