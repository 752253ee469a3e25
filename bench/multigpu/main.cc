// dcpmla_multigpu_bench: one DCP decode step (one layer's attention) across GPUs over NCCL. Per
// step: the query all-gather, the attention (local decode over the rank's KV shard) and the
// combine (ag_rs, a2a, a2a with the bf16 payload), each timed with CUDA events recorded between
// the calls of the observed backend and communicator, for W = 1 and W = 2, 4, ... up to the GPUs
// present; the whole step time, and its ratio to W = 1.
// For W >= 2 the query gather and the combine are also split into their launches (each NCCL
// collective and each kernel around it), and each collective is timed alone, the same call in a
// loop of back-to-back calls on idle GPUs, to compare with its time inside the step.
// Writes JSON (command, commit, date, devices, versions, every timing, the performance targets) and
// prints a table.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"
#include "dcpmla/peer_comm.h"
#include "event_timer.h"
#include "grid.h"
#include "measure.h"
#include "report.h"
#include "run_stamp.h"

namespace dcpmla::bench {
namespace {

std::string command_line(int argc, char** argv) {
  std::string cmd;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i) cmd += ' ';
    cmd += a.find_first_of(" \t\"'") == std::string::npos ? a : "'" + a + "'";
  }
  return cmd;
}

nlohmann::json describe_devices(int count) {
  nlohmann::json devices = nlohmann::json::array();
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p;
    check_cuda(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties");
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, d);
    devices.push_back({{"index", d},
                       {"name", p.name},
                       {"sms", p.multiProcessorCount},
                       {"memory_gib", double(p.totalGlobalMem) / (1u << 30)},
                       {"pci_bus_id", bus}});
  }
  return devices;
}

// The largest chunk any step of the grid moves per rank at world w (a PeerGroup's capacity).
std::size_t peer_chunk_capacity(const std::vector<Shape>& grid, int w, int block_size) {
  std::size_t bytes = 1;
  for (const Shape& shape : grid) {
    if (shape.heads % w != 0) continue;
    const std::int64_t rows = make_batch(shape, w, block_size).batch.rows();
    bytes = std::max(bytes, dcp_exchange_chunk_bytes(w, rows, shape.heads / w, DType::bf16));
  }
  return bytes;
}

// W = 1, the powers of two up to the GPUs present, and the GPU count itself.
std::vector<int> default_worlds(int gpus) {
  std::vector<int> worlds = {1};
  for (int w = 2; w <= gpus; w *= 2) worlds.push_back(w);
  if (gpus > 1 && worlds.back() != gpus) worlds.push_back(gpus);
  return worlds;
}

int run(int argc, char** argv) {
  CLI::App app{"dcpmla multi-GPU DCP step benchmark (NCCL)"};
  std::string out_path = "multigpu_bench.json";
  const char* env_commit = std::getenv("DCPMLA_COMMIT");
  std::string commit = env_commit ? env_commit : "unknown", date = utc_now();
  MeasureOptions mo;
  GridOptions grid;
  std::vector<int> worlds;
  double budget_s = 210;
  app.add_option("--out", out_path, "JSON output file (rewritten after every shape)");
  app.add_option("--commit", commit, "commit recorded with the results (default: $DCPMLA_COMMIT)");
  app.add_option("--date", date, "date recorded with the results (default: now, UTC)");
  app.add_option("--steps", mo.steps, "timed steps per shape and combine (>= 50 to report)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", mo.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--contexts", grid.contexts, "global context lengths T");
  app.add_option("--heads", grid.heads, "head counts H");
  app.add_option("--batches", grid.batches, "batch sizes (default: per context)");
  app.add_option("--worlds", worlds, "DCP world sizes (default: 1, 2, 4, ... up to the GPUs)");
  std::string comm_kind = "nccl";
  app.add_option("--comm", comm_kind,
                 "the collectives: nccl (NcclLocalGroup), or peer (PeerGroup: direct NVLink "
                 "stores between the GPUs)")
      ->check(CLI::IsMember({"nccl", "peer"}));
  app.add_option("--budget-s", budget_s, "skip the remaining shapes after this many seconds");
  app.add_option("--target-work-items", mo.target_work_items,
                 "split-KV work items aimed at per rank (default 0: the CUDA backend's policy, "
                 "device_model())");
  bool no_launch_events = false;
  app.add_flag("--no-launch-events", no_launch_events,
               "time only the phases of a step, not each launch of the query gather and the "
               "combine");
  app.add_option("--alone-calls", mo.alone_calls,
                 "back-to-back calls of each collective timed alone, on idle GPUs (W >= 2; "
                 ">= 50, or 0 to skip)")
      ->check(CLI::NonNegativeNumber);
  bool sequential_variants = false;
  app.add_flag("--sequential-variants", sequential_variants,
               "time all steps of one combine variant, then the next, instead of step i of every "
               "variant in turn");
  CLI11_PARSE(app, argc, argv);
  mo.launch_events = !no_launch_events;
  mo.interleave_variants = !sequential_variants;
  DCPMLA_REQUIRE(mo.alone_calls == 0 || mo.alone_calls >= 50, ErrorCode::invalid_argument,
                 "--alone-calls", ">= 50, or 0", std::to_string(mo.alone_calls));

  // NVLink multicast stays off unless the environment sets it (shared machines: a program using
  // it can take the GPUs out of service); recorded in the JSON.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  const auto start = std::chrono::steady_clock::now();
  int gpus = 0;
  check_cuda(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  DCPMLA_REQUIRE(gpus >= 1, ErrorCode::unsupported, "CUDA devices", ">= 1", "0");
  if (worlds.empty()) worlds = default_worlds(gpus);
  for (int w : worlds) {
    DCPMLA_REQUIRE(w >= 1 && w <= gpus, ErrorCode::invalid_argument, "--worlds",
                   fmt::format("world sizes in [1, {}] (GPUs present)", gpus), std::to_string(w));
  }
  cudaDeviceProp p0;
  check_cuda(cudaGetDeviceProperties(&p0, 0), "cudaGetDeviceProperties");

  int nccl_version = 0, runtime = 0, driver = 0;
  ncclGetVersion(&nccl_version);
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  nlohmann::json doc{
      {"program", "dcpmla_multigpu_bench"},
      {"command", command_line(argc, argv)},
      {"commit", commit},
      {"date", date},
      {"devices", describe_devices(gpus)},
      {"nccl_version", nccl_version},
      {"cuda_runtime", runtime},
      {"cuda_driver", driver},
      {"NCCL_NVLS_ENABLE", nvls ? nvls : "unset"},
      {"communicator", comm_kind},
      {"settings",
       {{"warmup", mo.warmup},
        {"steps", mo.steps},
        {"block_size", mo.block_size},
        {"kv_dtype", "bf16"},
        {"q_out_dtype", "bf16"},
        {"split_policy", mo.target_work_items > 0
                             ? fmt::format("target_work_items = {} per rank", mo.target_work_items)
                             : std::string("device_model() per rank")},
        {"worlds", worlds},
        {"timing",
         "CUDA events on every rank's stream at each phase boundary of every step; "
         "per step the slowest rank's phase, then median and min over the steps; "
         "query_gather_own and combine_own: per step the fastest rank's phase instead (the last "
         "rank to join the collective, which waits for nobody: the phase's own cost)"},
        {"launch_events", mo.launch_events},
        {"variant_order",
         mo.interleave_variants
             ? "interleaved: step i of every combine variant, then step i + 1 (the variants share "
               "the GPUs' clock and power state)"
             : "sequential: all steps of one combine variant, then the next"},
        {"w1_base",
         "ratios to W = 1 (vs_W1, step_over_w1_*, the 128K target) divide by the fastest W = 1 "
         "variant's step: W = 1 runs no collective, so its variants are the same work"},
        {"sub_phases",
         "combines[].sub_phases: with launch_events, an event after every launch of the query "
         "gather (nccl_all_gather_q; no kernel precedes or follows the gather) and of the "
         "combine (ag_rs: nccl_all_gather_lse, kernel_rescale, nccl_reduce_scatter_o, "
         "kernel_convert_o; a2a: nccl_all_to_all, kernel_merge); a launch's time "
         "runs from the previous event of the step to its own (so it includes any gap before "
         "it). median_us / min_us: per step the slowest rank, then over the steps; own_*: per "
         "step the fastest rank; rank_median_us: per rank. alone: the name of the same call "
         "in collectives_alone"},
        {"alone_calls", mo.alone_calls},
        {"collectives_alone",
         "results[].collectives_alone: each distinct collective of the steps (the same call: "
         "buffers, count, dtype; recorded from an untimed step), alone_calls back-to-back calls "
         "on GPUs doing nothing else after warmup calls, an event before each call; per_call: "
         "per call the slowest rank, median and min over the calls; per_call_own: the fastest "
         "rank; loop_us_per_call: first to last event / calls"}}},
      {"results", nlohmann::json::array()},
      {"skipped", nlohmann::json::array()},
      {"errors", nlohmann::json::array()}};
  std::vector<Measured> all;
  auto write = [&] {
    doc["targets"] = targets(all);
    std::ofstream(out_path) << doc.dump(2) << "\n";
  };

  fmt::print(
      "dcpmla_multigpu_bench: {} GPU(s) ({}), NCCL {}, collectives {}, worlds {}, {} steps after "
      "{} warm-up\n",
      gpus, p0.name, nccl_version, comm_kind, fmt::join(worlds, ","), mo.steps, mo.warmup);
  // Each world's group, and its communicators by rank.
  std::map<int, std::unique_ptr<NcclLocalGroup>> nccl_groups;
  std::map<int, std::unique_ptr<PeerGroup>> peer_groups;
  std::map<int, std::vector<Communicator*>> comms;
  for (int w : worlds) {
    std::vector<Communicator*>& ranks = comms[w];
    if (comm_kind == "peer") {
      auto& g = peer_groups[w] = std::make_unique<PeerGroup>(
          first_devices(w), peer_chunk_capacity(make_grid(grid), w, mo.block_size));
      for (int r = 0; r < w; ++r) ranks.push_back(&g->communicator(r));
    } else {
      auto& g = nccl_groups[w] = std::make_unique<NcclLocalGroup>(first_devices(w));
      for (int r = 0; r < w; ++r) ranks.push_back(&g->communicator(r));
    }
  }

  print_header();
  bool ok = true;
  for (const Shape& shape : make_grid(grid)) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > budget_s) {
      doc["skipped"].push_back(shape.name());
      continue;
    }
    std::optional<std::size_t> baseline;
    for (int w : worlds) {
      if (shape.heads % w != 0) continue;
      try {
        all.push_back({shape, measure(comms[w], shape, mo)});
      } catch (const std::exception& e) {
        fmt::print(stderr, "{} W={}: {}\n", shape.name(), w, e.what());
        doc["errors"].push_back({{"shape", shape.name()}, {"world", w}, {"error", e.what()}});
        ok = false;
        continue;
      }
      const Measured& m = all.back();
      if (w == 1) baseline = all.size() - 1;
      const Measured* base = w > 1 && baseline ? &all[*baseline] : nullptr;
      print_rows(m, base);
      doc["results"].push_back(to_json(m, base));
      ok = ok && m.timing.output_finite;
    }
    write();
  }
  write();
  fmt::print("wrote {} ({} results, {} skipped for the time budget)\n", out_path,
             doc["results"].size(), doc["skipped"].size());
  for (const auto& t : doc["targets"]) print_target(t);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace dcpmla::bench

int main(int argc, char** argv) {
  try {
    return dcpmla::bench::run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "dcpmla_multigpu_bench: {}\n", e.what());
    return 2;
  }
}
