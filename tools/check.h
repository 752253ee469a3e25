// `dcpmla check`: every SPEC section 6 test vector, computed through the library, and end-to-end
// DCP runs of the SPEC batches on the CPU backend against the double-precision reference.
#pragma once

#include <string>
#include <vector>

namespace dcpmla::tool {

struct CheckRow {
  std::string name;
  std::string expected;
  std::string got;
  bool pass;
};

struct CheckOptions {
  int threads = 0;  // CPU threads in total for the end-to-end runs (0 = up to 8)
  bool print = true;
};

// Runs every check, prints the table (when options.print) and returns the rows.
std::vector<CheckRow> run_checks(const CheckOptions& options);

}  // namespace dcpmla::tool
