// The CPU backend: a real, threaded implementation of the backend interface over host memory.
#pragma once

#include <memory>

#include "dcpmla/backend.h"

namespace dcpmla {

// threads <= 0: one per hardware thread.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace dcpmla
