#include "shared_backend.h"

#include <algorithm>
#include <memory>
#include <thread>

#include "dcpmla/cpu_backend.h"

namespace dcpmla::python {
namespace {

std::mutex& backend_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Made under backend_mutex().
Backend& backend_instance() {
  static const std::unique_ptr<Backend> backend = make_cpu_backend(hardware_threads());
  return *backend;
}

}  // namespace

int hardware_threads() {
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

SharedCpuBackend::SharedCpuBackend() : lock_(backend_mutex()), backend_(backend_instance()) {}

}  // namespace dcpmla::python
