// Times one shape as a W-rank DCP step on GPUs 0..W-1 over NCCL, every combine variant (ag_rs, a2a,
// a2a with a bf16 payload), with CUDA events around every phase of every step.
#pragma once

#include <string>
#include <vector>

#include "dcpmla/comm.h"
#include "dcpmla/dcp.h"
#include "grid.h"
#include "step_launch.h"

namespace dcpmla::bench {

struct Stat {
  double median_us = 0;
  double min_us = 0;
};

// One launch of the query gather or the combine inside the timed steps (a sub-phase), from the
// step's previous event to the event after it (see Launch).
struct LaunchTiming {
  Launch launch = Launch::nccl_all_gather_q;
  Stat slowest;  // per step the maximum over ranks, then median and min over the steps
  Stat own;      // per step the minimum over ranks (as the *_own phases)
  std::vector<double> rank_median_us;  // per rank, the median over the steps
  std::string alone;  // nccl_* launches: the name of the same call in ShapeTiming::alone
};

// One collective of the step (the same call: buffers, count, dtype) timed alone: `calls`
// back-to-back calls on GPUs doing nothing else, an event before each call and after the last.
struct CollectiveAlone {
  std::string name;  // CollectiveCall::name(), e.g. "nccl_all_gather_q/bf16"
  Launch launch = Launch::nccl_all_gather_q;
  DType dtype = DType::f32;
  std::size_t count = 0;       // elements per chunk, as passed to the Communicator
  std::size_t send_bytes = 0;  // per rank
  std::size_t recv_bytes = 0;  // per rank
  int calls = 0;
  Stat per_call;                // per call the maximum over ranks; median and min over the calls
  Stat per_call_own;            // per call the minimum over ranks
  double loop_us_per_call = 0;  // first event to last / calls, maximum over ranks
};

// One combine's timings. Per step, each phase is the maximum over ranks (the slowest rank sets
// the pace), then the median and minimum over the timed steps. The *_own figures take the minimum
// over ranks instead: a rank that reaches a collective early waits inside it for the others, so
// the max mixes the phase's own cost with the imbalance before it (see measure.cc).
struct CombineTiming {
  Combine combine = Combine::ag_rs;
  DType payload = DType::f32;  // the a2a all-to-all's payload (DcpStepArgs::combine_payload)
  // "ag_rs", "a2a" or "a2a/bf16".
  std::string label() const {
    return std::string(to_string(combine)) + (payload == DType::bf16 ? "/bf16" : "");
  }
  Stat query_gather, decode, combine_phase, step;
  Stat query_gather_own, combine_own;  // min over ranks: without the wait for the last rank
  double loop_us_per_step = 0;  // first begin to last end over the timed steps, / steps (max over
                                // ranks): includes any gap between steps (host launch time);
                                // with interleaved variants, / (steps x variants) (the mean
                                // over all variants' steps, the same for every variant)
  std::vector<double> rank_step_median_us;
  // Per rank, the median over the steps of its own query gather, decode and combine phases (an
  // imbalance between ranks shows here: the early rank's combine holds its wait).
  std::vector<double> rank_query_gather_median_us, rank_decode_median_us, rank_combine_median_us;
  // The query gather's launches, then the combine's, in step order (empty for W = 1, or when
  // launches are not timed).
  std::vector<LaunchTiming> launches;
};

struct ShapeTiming {
  int world = 1;
  std::int64_t rows = 0;
  double kv_bytes_per_rank = 0;  // rank 0's (the rank holding the most tokens)
  double flops = 0;              // the step's attention FLOPs, all ranks together
  std::size_t work_items = 0;    // rank 0's plan
  bool output_finite = true;
  std::vector<CombineTiming> combines;  // ag_rs, a2a, a2a/bf16
  std::vector<CollectiveAlone> alone;   // W >= 2: every distinct collective of the three combines
};

struct MeasureOptions {
  int warmup = 5;
  int steps = 50;
  int block_size = 64;
  // Split-KV work items aimed at per rank; 0: the CUDA backend's own model (device_model()
  // for each rank's shard and GPU).
  int target_work_items = 0;
  // Events after every launch of the query gather and the combine (LaunchTiming); false: only
  // where a phase ends.
  bool launch_events = true;
  // Back-to-back calls of each collective timed alone (W >= 2); 0 skips that measurement.
  int alone_calls = 100;
  // Timed steps in the order step 0 of every variant, step 1 of every variant, ...; false: all
  // of one variant's steps, then the next variant's.
  bool interleave_variants = true;
};

// Rank r runs on its own thread with *comms[r] (one communicator per rank of a group of
// comms.size() ranks, rank r on GPU r). Throws the first rank's Error when any rank fails to set
// up (before any collective starts).
ShapeTiming measure(const std::vector<Communicator*>& comms, const Shape& shape,
                    const MeasureOptions& options);

}  // namespace dcpmla::bench
