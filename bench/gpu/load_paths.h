// Measures the KV tile load paths into shared memory (load_paths.cu): the decode kernel's
// cp.async pattern and TMA bulk tensor copies, from HBM, from L2, and with 16 blocks per page.
#pragma once

#include <string>
#include <vector>

namespace dcpmla::bench {

struct LoadResult {
  std::string path, source;
  int depth;  // stages in flight per block
  double ms_min, us_per_tile, tb_per_s;
  double issue_cycles_per_tile;  // SM cycles thread 0 spends issuing a tile's copies
};

struct LoadReport {
  std::string device;
  int blocks;  // one per SM
  int tiles;   // per block
  unsigned tile_bytes;
  std::vector<LoadResult> results;
};

// Throws std::runtime_error on a CUDA failure.
LoadReport measure_load_paths(int tiles);

}  // namespace dcpmla::bench
