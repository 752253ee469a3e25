// The CPU backend behind dcpmla.cpu's single-rank calls: one per process, made on first use with
// a thread per hardware thread, running one call at a time (its thread pool is not re-entrant).
#pragma once

#include <mutex>

#include "dcpmla/backend.h"

namespace dcpmla::python {

// Hardware threads of this machine (at least 1).
int hardware_threads();

class SharedCpuBackend {
 public:
  // Blocks until no other call uses the backend. Call without holding the GIL.
  SharedCpuBackend();
  Backend& operator*() const { return backend_; }
  Backend* operator->() const { return &backend_; }

 private:
  std::unique_lock<std::mutex> lock_;
  Backend& backend_;
};

}  // namespace dcpmla::python
