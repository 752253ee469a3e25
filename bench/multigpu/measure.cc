#include "measure.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <iterator>
#include <memory>
#include <thread>

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

CombineTiming summarize(Variant v, std::size_t c, const std::vector<RankRecord>& ranks, int steps) {
  CombineTiming t;
  t.combine = v.combine;
  t.payload = v.payload;
  std::vector<double> gather, decode, comb, step;
  for (int i = 0; i < steps; ++i) {
    double g = 0, d = 0, k = 0, s = 0;
    for (const RankRecord& r : ranks) {
      const StepPhases& p = r.phases[c][std::size_t(i)];
      g = std::max(g, 1e3 * p.query_gather);
      d = std::max(d, 1e3 * p.decode);
      k = std::max(k, 1e3 * p.combine);
      s = std::max(s, 1e3 * p.step);
    }
    gather.push_back(g);
    decode.push_back(d);
    comb.push_back(k);
    step.push_back(s);
  }
  t.query_gather = stat_of(gather);
  t.decode = stat_of(decode);
  t.combine_phase = stat_of(comb);
  t.step = stat_of(step);
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
