// The benchmark's output: one table row per (shape, W, combine) on stdout, and the JSON document
// (provenance, devices, every timing, the ratios to W = 1 and the performance targets).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grid.h"
#include "measure.h"

namespace dcpmla::bench {

struct Measured {
  Shape shape;
  ShapeTiming timing;
};

void print_header();
// `baseline`: the same shape at W = 1 (nullptr when this is it or it was not measured). Below
// each combine's row with launch timings: a "gather:" and a "combine:" line, each launch's median
// over the steps of the slowest rank, (own: of the fastest rank, alone: the same collective timed
// alone); after the rows, one "alone:" line per collective timed alone.
void print_rows(const Measured& m, const Measured* baseline);

nlohmann::json to_json(const Measured& m, const Measured* baseline);

// The performance targets, evaluated on what was measured:
//  - at 128K context, Q = 1 (the least compute-bound shapes of the grid): step(W) / step(W = 1)
//    <= 0.55 for W = 2;
//  - at 32K context, batch 32: combine <= 10 % of the attention (decode) time, for W >= 2.
// The combine target also carries own_value (combine_own / decode: without the wait for the
// slower rank's decode) next to its verdict, which stays on the max over ranks.
nlohmann::json targets(const std::vector<Measured>& all);

// One line of targets(): the verdict, and the own cost where the target has one.
void print_target(const nlohmann::json& t);

}  // namespace dcpmla::bench
