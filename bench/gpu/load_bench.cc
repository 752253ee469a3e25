// KV tile load benchmark: how fast every SM moves 64-token x 576-dim bf16 tiles (72 KiB, the
// decode kernel's KV tile) into 128-byte-swizzled shared memory with the decode kernel's cp.async
// pattern and with TMA bulk tensor copies, 1 or 2 tiles in flight per SM, from HBM, from L2, and
// with 16 blocks reading each page together. Prints a table, writes JSON.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "load_paths.h"
#include "run_stamp.h"

int main(int argc, char** argv) {
  CLI::App app{"KV tile load paths: cp.async against TMA, into swizzled shared memory"};
  std::string out = "load_bench.json", commit = "unknown", date = dcpmla::bench::utc_now();
  int tiles = 400;
  app.add_option("--out", out, "JSON output");
  app.add_option("--commit", commit, "recorded with the results");
  app.add_option("--date", date, "recorded with the results (default: now, UTC)");
  app.add_option("--tiles", tiles, "tiles per block")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto report = dcpmla::bench::measure_load_paths(tiles);
    fmt::print("device {} ({} SMs): {} blocks x {} tiles of {} bytes\n", report.device,
               report.blocks, report.blocks, report.tiles, report.tile_bytes);
    fmt::print("{:<20} {:<16} {:>5} {:>10} {:>12} {:>8} {:>14}\n", "source", "path", "depth",
               "min_ms", "us/tile/SM", "TB/s", "issue cyc/tile");
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : report.results) {
      fmt::print("{:<20} {:<16} {:>5} {:>10.3f} {:>12.3f} {:>8.2f} {:>14.0f}\n", r.source, r.path,
                 r.depth, r.ms_min, r.us_per_tile, r.tb_per_s, r.issue_cycles_per_tile);
      rows.push_back({{"source", r.source},
                      {"path", r.path},
                      {"depth", r.depth},
                      {"min_ms", r.ms_min},
                      {"us_per_tile_per_block", r.us_per_tile},
                      {"tb_per_s", r.tb_per_s},
                      {"issue_cycles_per_tile_thread0", r.issue_cycles_per_tile}});
    }
    const nlohmann::json j = {{"command", "dcpmla_load_bench"},
                              {"device", report.device},
                              {"sms", report.blocks},
                              {"commit", commit},
                              {"date", date},
                              {"tiles", report.tiles},
                              {"tile_bytes", report.tile_bytes},
                              {"results", rows}};
    std::ofstream(out) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    fmt::print(stderr, "dcpmla_load_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
