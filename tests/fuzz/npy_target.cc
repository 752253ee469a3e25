// Fuzz target: the .npy parser. Every input must parse or be refused with a dcpmla::Error; an
// accepted array must be self-consistent, and serialising it again must give an equal array.
#include <cstdio>
#include <cstdlib>
#include <span>

#include "dcpmla/error.h"
#include "fuzz_target.h"
#include "npy.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "npy fuzz finding: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace npy = dcpmla::tool::npy;
  npy::Array a;
  try {
    a = npy::parse(std::span<const std::uint8_t>(data, size), "fuzz.npy");
  } catch (const dcpmla::Error& e) {
    dcpmla::fuzz::note_refusal(e);
    return 0;
  }
  // The payload is part of the input, so an accepted shape describes at most `size` bytes.
  std::size_t numel = 1;
  for (auto d : a.shape) {
    if (d < 0) finding("negative extent accepted");
    if (d == 0) numel = 0;
  }
  if (numel != 0) {
    for (auto d : a.shape) numel *= std::size_t(d);
  }
  if (a.bytes.size() != numel * npy::itemsize(a.dtype) || a.bytes.size() > size) {
    finding("payload size disagrees with the shape");
  }
  const auto again = npy::serialize(a.dtype, a.shape, a.bytes.data());
  const npy::Array b = npy::parse(again, "round trip");
  if (b.dtype != a.dtype || b.shape != a.shape || b.bytes != a.bytes) {
    finding("serialize(parse(x)) does not parse back to the same array");
  }
  dcpmla::fuzz::note_accepted(npy::shape_string(a.shape).c_str());
  return 0;
}
