#include "measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <iterator>
#include <memory>
#include <utility>

#include "collective_alone.h"
#include "dcpmla/error.h"
#include "dcpmla/testing/run_ranks.h"
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
  std::vector<std::vector<StepPhases>> phases;     // [combine][step]
  std::vector<float> loop_ms;                      // [combine]
  std::vector<std::vector<CollectiveCall>> calls;  // [combine]: the step's collectives
  std::vector<CollectiveCall> alone_calls;         // distinct calls over the combines
  std::vector<std::vector<double>> alone_call_us;  // [alone call][call]
  std::vector<double> alone_loop_us;               // [alone call]
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

double pick_over_ranks(const std::vector<double>& rank_us, OverRanks pick) {
  return pick == OverRanks::slowest ? *std::max_element(rank_us.begin(), rank_us.end())
                                    : *std::min_element(rank_us.begin(), rank_us.end());
}

// The launches of combine c, position by position; every rank and step marks the same sequence.
std::vector<LaunchTiming> launch_timings(const std::vector<RankRecord>& ranks, std::size_t c,
                                         int steps) {
  const auto& first = ranks.front().phases[c].front().launches;
  std::vector<LaunchTiming> out;
  for (std::size_t k = 0; k < first.size(); ++k) {
    LaunchTiming t;
    t.launch = first[k].first;
    std::vector<double> slowest, own;
    std::vector<std::vector<double>> per_rank(ranks.size());
    for (int i = 0; i < steps; ++i) {
      std::vector<double> rank_us;
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        const auto& launches = ranks[r].phases[c][std::size_t(i)].launches;
        DCPMLA_REQUIRE(
            k < launches.size() && launches[k].first == t.launch, ErrorCode::inconsistent,
            "launch marks",
            fmt::format("{} as launch {} of every step and rank", to_string(t.launch), k),
            fmt::format("a different sequence on rank {}, step {}", r, i));
        rank_us.push_back(1e3 * launches[k].second);
        per_rank[r].push_back(rank_us.back());
      }
      slowest.push_back(pick_over_ranks(rank_us, OverRanks::slowest));
      own.push_back(pick_over_ranks(rank_us, OverRanks::fastest));
    }
    t.slowest = stat_of(std::move(slowest));
    t.own = stat_of(std::move(own));
    for (auto& us : per_rank) t.rank_median_us.push_back(stat_of(std::move(us)).median_us);
    // The call this launch made (rank 0's log), named as in the collective-alone figures.
    for (const CollectiveCall& call : ranks.front().calls[c]) {
      if (call.launch == t.launch) t.alone = call.name();
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<CollectiveAlone> alone_timings(const std::vector<RankRecord>& ranks, int world) {
  std::vector<CollectiveAlone> out;
  const RankRecord& r0 = ranks.front();
  for (std::size_t a = 0; a < r0.alone_calls.size(); ++a) {
    const CollectiveCall& call = r0.alone_calls[a];
    CollectiveAlone t;
    t.name = call.name();
    t.launch = call.launch;
    t.dtype = call.call.dtype;
    t.count = call.call.count;
    t.send_bytes = call.send_bytes(world);
    t.recv_bytes = call.recv_bytes(world);
    t.calls = int(r0.alone_call_us[a].size());
    std::vector<double> slowest, own;
    for (std::size_t i = 0; i < r0.alone_call_us[a].size(); ++i) {
      std::vector<double> rank_us;
      for (const RankRecord& r : ranks) rank_us.push_back(r.alone_call_us[a][i]);
      slowest.push_back(pick_over_ranks(rank_us, OverRanks::slowest));
      own.push_back(pick_over_ranks(rank_us, OverRanks::fastest));
    }
    t.per_call = stat_of(std::move(slowest));
    t.per_call_own = stat_of(std::move(own));
    for (const RankRecord& r : ranks) {
      t.loop_us_per_call = std::max(t.loop_us_per_call, r.alone_loop_us[a] / t.calls);
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Times each distinct call `calls` times back to back on this rank's stream, all ranks together
// (every rank's list holds the same calls in the same order).
void time_alone(RankStep& step, Communicator& comm, std::barrier<>& sync, int device, int warmup,
                int calls, RankRecord& rec) {
  for (const auto& per_combine : rec.calls) {
    for (const CollectiveCall& call : per_combine) {
      const bool seen =
          std::any_of(rec.alone_calls.begin(), rec.alone_calls.end(),
                      [&](const CollectiveCall& c) { return c.name() == call.name(); });
      if (!seen) rec.alone_calls.push_back(call);
    }
  }
  EventSeries series(device, calls);
  const Stream s = step.stream();
  for (const CollectiveCall& call : rec.alone_calls) {
    for (int i = 0; i < warmup; ++i) testing::replay(call.call, comm, s);
    step.synchronize();
    sync.arrive_and_wait();  // start the loops together
    for (int i = 0; i < calls; ++i) {
      series.record(i, s);
      testing::replay(call.call, comm, s);
    }
    series.record(calls, s);
    step.synchronize();
    std::vector<double> us;
    for (int i = 0; i < calls; ++i) us.push_back(1e3 * series.ms(i, i + 1));
    rec.alone_call_us.push_back(std::move(us));
    rec.alone_loop_us.push_back(1e3 * series.ms(0, calls));
  }
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
    auto rank_median = [&](float StepPhases::*phase) {
      std::vector<double> us;
      for (const StepPhases& p : r.phases[c]) us.push_back(1e3 * (p.*phase));
      return stat_of(us).median_us;
    };
    t.rank_step_median_us.push_back(rank_median(&StepPhases::step));
    t.rank_query_gather_median_us.push_back(rank_median(&StepPhases::query_gather));
    t.rank_decode_median_us.push_back(rank_median(&StepPhases::decode));
    t.rank_combine_median_us.push_back(rank_median(&StepPhases::combine));
  }
  t.launches = launch_timings(ranks, c, steps);
  return t;
}

}  // namespace

ShapeTiming measure(const std::vector<Communicator*>& comms, const Shape& shape,
                    const MeasureOptions& o) {
  const int W = int(comms.size());
  const ShapeBatch sb = make_batch(shape, W, o.block_size);

  ShapeTiming result;
  result.world = W;
  result.flops = sb.flops;
  std::vector<RankRecord> records(static_cast<std::size_t>(W));
  std::atomic<bool> setup_failed{false};
  std::atomic<bool> all_finite{true};
  std::barrier sync(W);
  testing::run_ranks(W, [&](int r) {
    std::unique_ptr<RankStep> step;
    std::vector<std::unique_ptr<EventTimer>> timers;  // [variant]
    try {
      step = std::make_unique<RankStep>(r, W, shape, sb, o.block_size, o.target_work_items);
      for (std::size_t v = 0; v < std::size(kVariants); ++v) {
        timers.push_back(std::make_unique<EventTimer>(r, o.steps, o.launch_events));
      }
    } catch (...) {
      // Nobody enters a collective unless every rank is ready to join it.
      setup_failed = true;
      sync.arrive_and_wait();
      throw;
    }
    sync.arrive_and_wait();
    if (setup_failed) return;
    try {
      Communicator& comm = *comms[std::size_t(r)];
      RankRecord& rec = records[std::size_t(r)];
      CollectiveRecorder recorder;
      auto prepare = [&](const Variant& v) {
        // One untimed step through the recorder: the collectives this combine makes.
        recorder.clear();
        step->run(comm, v.combine, v.payload, &recorder);
        rec.calls.push_back(recorder.calls());
        for (int i = 0; i < o.warmup; ++i) step->run(comm, v.combine, v.payload, nullptr);
        step->synchronize();
        sync.arrive_and_wait();  // start the timed steps together
      };
      auto timed_step = [&](std::size_t v, int i) {
        timers[v]->set_step(i);
        step->run(comm, kVariants[v].combine, kVariants[v].payload, timers[v].get());
      };
      const std::size_t V = std::size(kVariants);
      if (o.interleave_variants) {
        // Step i of every variant, then step i + 1: the variants share the GPU's clock and
        // power state (run one after another, the first ran faster at W = 1, where all
        // variants are the same work).
        for (const Variant& v : kVariants) prepare(v);
        for (int i = 0; i < o.steps; ++i) {
          for (std::size_t v = 0; v < V; ++v) timed_step(v, i);
        }
      } else {
        for (std::size_t v = 0; v < V; ++v) {
          prepare(kVariants[v]);
          for (int i = 0; i < o.steps; ++i) timed_step(v, i);
          step->synchronize();
        }
      }
      step->synchronize();
      for (std::size_t v = 0; v < V; ++v) {
        std::vector<StepPhases> phases;
        for (int i = 0; i < o.steps; ++i) phases.push_back(timers[v]->phases(i));
        rec.phases.push_back(std::move(phases));
        // Interleaved, a variant's first and last steps span every variant's steps.
        rec.loop_ms.push_back(timers[v]->span(0, o.steps - 1) /
                              float(o.interleave_variants ? V : 1));
      }
      if (!step->output_finite()) all_finite = false;
      // After the finiteness check: the loops overwrite the step's receive buffers.
      if (W > 1 && o.alone_calls > 0) {
        time_alone(*step, comm, sync, r, o.warmup, o.alone_calls, rec);
      }
      if (r == 0) {
        result.rows = step->rows();
        result.kv_bytes_per_rank = step->kv_bytes();
        result.work_items = step->work_items();
      }
    } catch (...) {
      // Peers waiting at a barrier go on without this rank; peers already inside a collective
      // wait for it on the GPU, and the caller's timeout has to end the run.
      sync.arrive_and_drop();
      throw;
    }
  });
  result.output_finite = all_finite;
  for (std::size_t c = 0; c < std::size(kVariants); ++c) {
    result.combines.push_back(summarize(kVariants[c], c, records, o.steps));
  }
  if (W > 1 && o.alone_calls > 0) result.alone = alone_timings(records, W);
  return result;
}

}  // namespace dcpmla::bench
