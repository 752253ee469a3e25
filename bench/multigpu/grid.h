// The shapes the multi-GPU benchmark measures, and the decode batch of each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dcpmla/batch.h"

namespace dcpmla::bench {

struct Shape {
  std::int64_t context;  // global length T of every request (includes its query tokens)
  int heads;             // H, all heads of the layer (each rank computes all of them after the
                         // query all-gather; its output is H / W heads)
  bool ragged;           // Q drawn from 1..8 per request (else Q = 1)
  int batch;             // requests

  std::string q_label() const { return ragged ? "ragged 1..8" : "1"; }
  std::string name() const;  // e.g. "T=32768 H=128 Q=1 B=32"
};

struct GridOptions {
  std::vector<std::int64_t> contexts = {32768, 131072, 8192};  // most wanted first (time budget)
  std::vector<int> heads = {128, 96};
  std::vector<int> batches = {};  // empty: per-context defaults, see default_batches
};

// Batches per context: enough to cover 1..64 requests without multi-second steps at 128K.
std::vector<int> default_batches(std::int64_t context);

std::vector<Shape> make_grid(const GridOptions& options);

// The batch of a shape, shared by every rank of a W-rank group: query lengths (the same draw
// for every W, so W = 1 and W = 2 run the same work), global lengths, and block tables with the
// ids of rank 0's blocks (the rank that holds the most tokens) randomly permuted over the cache.
struct ShapeBatch {
  Batch batch;
  std::int64_t num_blocks = 0;  // blocks in each rank's cache
  double flops = 0;             // 2176 * H * sum_b(Q_b) * T: the whole step, all ranks together
};
ShapeBatch make_batch(const Shape& shape, int world, int block_size);

}  // namespace dcpmla::bench
