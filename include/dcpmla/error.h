// Typed errors for every rejected input. Library code throws these and never exits the process.
#pragma once

#include <stdexcept>
#include <string>

namespace dcpmla {

enum class ErrorCode {
  invalid_argument,  // a value outside its allowed range (W = 0, non-finite scale, ...)
  shape_mismatch,    // a buffer or array whose extent disagrees with the batch description
  dtype_mismatch,    // a buffer of the wrong element type
  out_of_range,      // an index (block id, rank, slot) outside what it indexes
  inconsistent,      // values that contradict each other (T < Q, non-monotonic starts, ...)
  unsupported,       // valid input that this backend or build cannot run
  backend_failure,   // a runtime failure reported by a device or communicator
};

const char* to_string(ErrorCode code);

// An error names the argument, what was expected and what was found:
//   "q: expected 9 rows (2 requests with 8+1 tokens), got 2"
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string argument, std::string expected, std::string actual);

  ErrorCode code() const { return code_; }
  const std::string& argument() const { return argument_; }
  const std::string& expected() const { return expected_; }
  const std::string& actual() const { return actual_; }

 private:
  ErrorCode code_;
  std::string argument_;
  std::string expected_;
  std::string actual_;
};

// Throws Error(code, argument, expected, actual) unless ok. The message arguments are evaluated
// only when the check fails, so a passing check formats nothing.
#define DCPMLA_REQUIRE(ok, code, argument, expected, actual)           \
  do {                                                                 \
    if (!(ok)) [[unlikely]] {                                          \
      throw ::dcpmla::Error((code), (argument), (expected), (actual)); \
    }                                                                  \
  } while (false)

}  // namespace dcpmla
