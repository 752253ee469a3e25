// Runs a scenario as a W-rank DCP step on any backend (ranks as threads; in-process collectives,
// or any Communicator such as NCCL's with one rank per GPU) and compares with the
// double-precision reference.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dcpmla/backend.h"
#include "dcpmla/dcp.h"
#include "dcpmla/testing/reference.h"
#include "dcpmla/testing/scenario.h"

namespace dcpmla::testing {

using BackendFactory = std::function<std::unique_ptr<Backend>(int rank)>;
// Rank r's communicator, made on rank r's thread once its backend exists (the communicator's
// collectives then run on that thread; `backend` is rank r's).
using CommunicatorFactory =
    std::function<std::unique_ptr<Communicator>(int rank, Backend& backend)>;

struct RunOptions {
  Combine combine = Combine::ag_rs;
  DType combine_payload = DType::f32;  // a2a only: f32 or bf16 (DcpStepArgs::combine_payload)
  // The model every rank's plan is made for; empty: each rank's backend's (device_model()).
  std::optional<DeviceModel> model;
  int kv_chunk_blocks = 0;  // > 0: every rank's KV cut in chunks of this many blocks
  // Plan on each rank's backend from the batch in its memory (Schedule::plan_on_device) instead
  // of make_plan on the host (causal masks only).
  bool device_plan = false;
  bool poison = true;       // fill every cache page with NaN before writing the KV
  bool flatten = false;     // run the single-token-row view of the batch instead
  bool see_future = false;  // negative control: every row bounded at T (mask = full)
  // How each rank runs its dcp_step: given the rank and the step on a stream, it must have run
  // the step and synchronised that stream when it returns (the results are read on the default
  // stream next). Empty: the step once on the default stream. A CUDA test uses it to capture the
  // step in a graph and replay it.
  std::function<void(int rank, const std::function<void(Stream)>& step)> run_step;
};

struct RunResult {
  std::vector<float> out;  // [rows, H, 512] as f32, heads assembled from all ranks
  std::vector<float> lse;  // [rows, H]
};

// Writes every request's KV through the slot mapping into W rank caches (history first, then the
// step's query tokens via step_slot_mapping), plans each rank and runs dcp_step on all ranks,
// each rank on its own thread with its own backend and communicator. Every rank holds only its
// shard of each request's KV.
RunResult run_dcp(const Scenario& scenario, const BackendFactory& make_backend,
                  const CommunicatorFactory& make_communicator, const RunOptions& options);
// The same with in-process collectives (InProcessCommunicator moving data through each rank's
// backend): the W ranks simulated in one address space.
RunResult run_dcp(const Scenario& scenario, const BackendFactory& make_backend,
                  const RunOptions& options);

// The reference on the values the caches and query actually hold (after quantisation).
ReferenceResult run_reference(const Scenario& scenario);

struct RequestError {
  int q_len;
  std::int64_t total_len;
  double max_out_error;   // max |O - O_ref|
  double max_lse_error;   // max |LSE - LSE_ref| over finite entries
  bool empty_rows_exact;  // rows the reference sees as empty are exactly O = 0, LSE = -inf
  bool pass;
};

struct Tolerance {
  double out;
  double lse;
};
// O: the output is rounded to q_dtype (bf16: 2^-8 relative) on top of fp32 accumulation;
// LSE is fp32 throughout.
Tolerance tolerance_for(const ScenarioSpec& spec);
// The same for a run with `options`: a bf16 combine payload adds one bf16 rounding of each
// rank's O (2^-8 relative).
Tolerance tolerance_for(const ScenarioSpec& spec, const RunOptions& options);

struct Comparison {
  std::vector<RequestError> requests;
  bool padding_exact = true;  // padding rows are exactly O = 0, LSE = -inf
  double max_out_error = 0;
  double max_lse_error = 0;
  bool pass = true;
};
Comparison compare(const Scenario& scenario, const RunResult& got, const ReferenceResult& want,
                   Tolerance tol);

// Largest |a - b| over O and LSE (with equal infinities counted as 0), and bit equality.
struct Agreement {
  double max_out_diff;
  double max_lse_diff;
  bool bit_identical;
};
Agreement agreement(const RunResult& a, const RunResult& b);

}  // namespace dcpmla::testing
