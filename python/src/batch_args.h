// A call's batch description from its Python arguments, checked with the Python names
// (query_start_loc, seq_lens, num_tokens, mask, block_table) before the library sees it.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>

#include "dcpmla/batch.h"

namespace dcpmla::python {

struct BatchInputs {
  nanobind::handle query_start_loc;        // [B + 1] int32 / int64, from 0, strictly increasing
  nanobind::handle seq_lens;               // [B] int32 / int64, global lengths incl. the step's Q
  std::optional<std::int64_t> num_tokens;  // query rows incl. padding; none: no padding
  nanobind::handle mask;                   // None, "causal" / "full", or one of them per request
  nanobind::handle block_table;            // [B, max_blocks] int32, or None (no paging)
};

// Throws Error naming the Python argument on any inconsistency.
Batch read_batch(const BatchInputs& in);

}  // namespace dcpmla::python
