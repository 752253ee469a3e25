// MMA stream benchmark: the decode tile's S and P.V tensor-core streams on every SM, alone and
// side by side, Q in shared memory or in registers, and with bulk copies writing tiles into the
// same shared memory (mma_paths.cu). Prints a table, writes JSON.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "mma_paths.h"
#include "run_stamp.h"

int main(int argc, char** argv) {
  CLI::App app{"Tensor-core streams of the decode tile: S and P.V, shared memory or registers"};
  std::string out = "mma_bench.json", commit = "unknown", date = dcpmla::bench::utc_now();
  int tiles = 2000;
  app.add_option("--out", out, "JSON output");
  app.add_option("--commit", commit, "recorded with the results");
  app.add_option("--date", date, "recorded with the results (default: now, UTC)");
  app.add_option("--tiles", tiles, "tiles per warpgroup")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto report = dcpmla::bench::measure_mma_paths(tiles);
    fmt::print("device {} ({} SMs): {} blocks, {} tiles per warpgroup; us = the slowest block's\n",
               report.device, report.blocks, report.blocks, report.tiles);
    fmt::print("{:<42} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7} {:>9} {:>8}\n",
               "scenario", "wg0_us", "wg1_us", "wg2_us", "wg0_TF", "wg1_TF", "wg2_TF", "total_TF",
               "copyTB/s", "MHz", "issue_cyc", "land_cyc");
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : report.results) {
      fmt::print(
          "{:<42} {:>9.1f} {:>9.1f} {:>9.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>8.2f} "
          "{:>7.0f} {:>9.0f} {:>8.0f}\n",
          r.scenario.name, r.us[0], r.us[1], r.us[2], r.tflops[0], r.tflops[1], r.tflops[2],
          r.total_tflops, r.copy_tb_per_s, r.sm_mhz, r.copy_issue_cycles, r.copy_landing_cycles);
      rows.push_back({{"scenario", r.scenario.name},
                      {"us", {r.us[0], r.us[1], r.us[2]}},
                      {"tflops", {r.tflops[0], r.tflops[1], r.tflops[2]}},
                      {"total_tflops", r.total_tflops},
                      {"copy_tb_per_s", r.copy_tb_per_s},
                      {"sm_mhz", r.sm_mhz},
                      {"copy_issue_cycles_per_tile", r.copy_issue_cycles},
                      {"copy_landing_cycles_per_tile", r.copy_landing_cycles}});
    }
    const nlohmann::json j = {{"command", "dcpmla_mma_bench"},
                              {"device", report.device},
                              {"sms", report.blocks},
                              {"commit", commit},
                              {"date", date},
                              {"tiles", report.tiles},
                              {"results", rows}};
    std::ofstream(out) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    fmt::print(stderr, "dcpmla_mma_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
