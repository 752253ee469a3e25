#include "dcpmla/error.h"

#include <fmt/format.h>

namespace dcpmla {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid argument";
    case ErrorCode::shape_mismatch:
      return "shape mismatch";
    case ErrorCode::dtype_mismatch:
      return "dtype mismatch";
    case ErrorCode::out_of_range:
      return "out of range";
    case ErrorCode::inconsistent:
      return "inconsistent";
    case ErrorCode::unsupported:
      return "unsupported";
    case ErrorCode::backend_failure:
      return "backend failure";
  }
  return "unknown";
}

Error::Error(ErrorCode code, std::string argument, std::string expected, std::string actual)
    : std::runtime_error(
          fmt::format("{} ({}): expected {}, got {}", argument, to_string(code), expected, actual)),
      code_(code),
      argument_(std::move(argument)),
      expected_(std::move(expected)),
      actual_(std::move(actual)) {}

}  // namespace dcpmla
