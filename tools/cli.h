// The tool's command-line conventions: every error, whatever its source (CLI11's parser, an
// option's validator, the library), is one line `dcpmla: error: <argument> (<kind>): expected
// ..., got ...` with exit status 2; sizes are checked against the machine before allocating.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace dcpmla::tool {

inline constexpr int kUsageExitStatus = 2;

// An option's value must be an integer in [lo, hi] (checked on the text, before conversion, so
// "abc", "-5" and "1e9" get the same one-line error as an out-of-range number).
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi);
CLI::Validator positive_int();      // [1, 2^31 - 1]
CLI::Validator non_negative_int();  // [0, 2^31 - 1]

// The one-line error for a parse error of CLI11 (not for --help, which CLI11 prints itself).
std::string describe_parse_error(const CLI::ParseError& e);

// Control characters escaped (\n, \t, \xNN): an error message is always one line.
std::string one_line(const std::string& text);

// Physical memory of this machine in bytes.
std::uint64_t physical_memory_bytes();

// A size parameter of a run, for naming the one that makes a run too large.
struct SizeFactor {
  const char* option;
  double value;
  double typical;  // its default or usual value
};

// Throws Error(invalid_argument) naming the factor furthest above its typical value when `bytes`
// exceed half of this machine's physical memory, or `work` multiply-adds exceed `max_work`.
void check_run_size(const char* what, std::initializer_list<SizeFactor> factors, double bytes,
                    double work = 0.0, double max_work = 0.0);

}  // namespace dcpmla::tool
