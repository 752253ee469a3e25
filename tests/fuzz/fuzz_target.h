// The libFuzzer entry point every fuzz target defines. The same source is linked either into a
// libFuzzer executable (clang, DCPMLA_FUZZ=ON) or into the bounded replay driver (any compiler).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

#include <cstdio>
#include <cstdlib>

#include "dcpmla/error.h"

namespace dcpmla::fuzz {

// With DCPMLA_FUZZ_VERBOSE set, targets print every refusal and acceptance (to see what the
// corpus inputs reach); quiet otherwise, as fuzzing runs millions of inputs.
inline bool verbose() {
  static const bool on = std::getenv("DCPMLA_FUZZ_VERBOSE") != nullptr;
  return on;
}
inline void note_refusal(const Error& e) {
  if (verbose()) std::fprintf(stderr, "refused: %s\n", e.what());
}
inline void note_accepted(const char* what) {
  if (verbose()) std::fprintf(stderr, "accepted: %s\n", what);
}

}  // namespace dcpmla::fuzz
