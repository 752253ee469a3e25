// Library Errors leaving a torch op: torch turns std::invalid_argument into ValueError and other
// exceptions into RuntimeError, keeping the message; the Python layer (dcpmla/_torch_library.py)
// reads the error's parts back with last_error() to raise TypeError for dtypes and set the
// argument, expected, actual and kind attributes, as dcpmla._core does.
#pragma once

#include <string>
#include <tuple>

#include "../src/error_mapping.h"
#include "dcpmla/error.h"

namespace dcpmla::torch_ops {

// Records e (with the Python argument names) as this thread's last error and throws it as
// std::invalid_argument (ValueError, TypeError) or std::runtime_error (RuntimeError).
[[noreturn]] void throw_for_torch(const Error& e, python::ArgumentNames names);

// Runs f, translating any library Error it throws.
template <class F>
auto translated(python::ArgumentNames names, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw_for_torch(e, names);
  }
}

// This thread's last translated error: (python type: "ValueError", "TypeError" or
// "RuntimeError", kind, argument, expected, actual, message); all empty when none.
std::tuple<std::string, std::string, std::string, std::string, std::string, std::string>
last_error();

}  // namespace dcpmla::torch_ops
