// Measures the decode tile's two MMA streams on every SM (mma_paths.cu): S = Q K^T (36 wgmma
// m64n64k16 over a 64-key tile, Q in shared memory or in registers) and P.V (4 wgmma m64n256k16
// per output warpgroup), alone and running side by side, with and without bulk tensor copies
// writing 72 KiB tiles into the same shared memory.
#pragma once

#include <string>
#include <vector>

namespace dcpmla::bench {

// What one warpgroup of the measuring block runs, tile after tile, free-running.
enum class MmaRole { none, s_ss, s_rs, s_halves, pv_ss };
// The copy warp's source: none, a 16 MB region (L2-resident) or pages far beyond L2 (HBM); the
// *_landing forms keep one tile in flight and time each from its issue to its landing.
enum class CopySource { none, l2, hbm, l2_landing, hbm_landing };

struct MmaScenario {
  std::string name;
  MmaRole roles[3];
  CopySource copy;
};

struct MmaResult {
  MmaScenario scenario;
  double us[3];                // each warpgroup's own time (the slowest block's), 0 for none
  double tflops[3];            // each warpgroup's rate over all SMs
  double total_tflops;         // all MMA FLOPs over the longest warpgroup time
  double copy_tb_per_s;        // bytes the copy warp moved while the MMAs ran
  double sm_mhz;               // clock cycles over elapsed time, warpgroup 0's (or 1's)
  double copy_issue_cycles;    // SM cycles the issuing thread spends issuing a tile's 9 boxes
  double copy_landing_cycles;  // *_landing: SM cycles from a tile's issue to its landing
};

struct MmaReport {
  std::string device;
  int blocks;  // one per SM
  int tiles;   // per warpgroup
  std::vector<MmaResult> results;
};

// Throws std::runtime_error on a CUDA failure.
MmaReport measure_mma_paths(int tiles);

}  // namespace dcpmla::bench
