// The bounded fuzz driver for builds without libFuzzer: replays every file of the given corpus
// directories through LLVMFuzzerTestOneInput, then a fixed number of seeded random mutations of
// them, so the ordinary test run (and its sanitizer build) checks the corpus, the regression
// inputs and some of their neighbourhood, reproducibly.
//
//   fuzz_replay_X [--mutations N] [--seed S] [--max-seconds T] PATH...
//
// A failing mutated input (an escaped exception, a crash, a sanitizer report) is written to
// ./fuzz-failure-<driver>, and the message names the corpus file it came from.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_target.h"

#if defined(__SANITIZE_ADDRESS__)
#define DCPMLA_REPLAY_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define DCPMLA_REPLAY_SANITIZED 1
#endif
#endif
#ifdef DCPMLA_REPLAY_SANITIZED
extern "C" void __sanitizer_set_death_callback(void (*callback)(void));
#else
#include <csignal>
#endif

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// splitmix64: small, fast and the same on every platform.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : std::size_t(next() % n); }
};

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Byte values and little-endian integers that sit on boundaries parsers and planners check.
constexpr std::uint64_t kInteresting[] = {0,
                                          1,
                                          2,
                                          0x7f,
                                          0x80,
                                          0xff,
                                          0x100,
                                          0x7fff,
                                          0xffff,
                                          0x10000,
                                          0x7fffffff,
                                          0x80000000,
                                          0xffffffff,
                                          0x100000000ull,
                                          0x7fffffffffffffffull,
                                          0xffffffffffffffffull};

void mutate_once(Bytes& x, const std::vector<Bytes>& corpus, Rng& rng) {
  const std::size_t n = x.size();
  switch (rng.below(9)) {
    case 0:  // flip a bit
      if (n) x[rng.below(n)] ^= std::uint8_t(1u << rng.below(8));
      break;
    case 1:  // a random byte
      if (n) x[rng.below(n)] = std::uint8_t(rng.next());
      break;
    case 2: {  // an interesting integer, 1, 2, 4 or 8 bytes wide
      const std::size_t width = std::size_t(1) << rng.below(4);
      if (n < width) break;
      const std::size_t at = rng.below(n - width + 1);
      const std::uint64_t v = kInteresting[rng.below(std::size(kInteresting))];
      for (std::size_t i = 0; i < width; ++i) x[at + i] = std::uint8_t(v >> (8 * i));
      break;
    }
    case 3: {  // a small signed change of one byte (counts, lengths, digits)
      if (n) x[rng.below(n)] += std::uint8_t(int(rng.below(33)) - 16);
      break;
    }
    case 4: {  // insert random bytes
      const std::size_t k = 1 + rng.below(8);
      const std::size_t at = rng.below(n + 1);
      for (std::size_t i = 0; i < k; ++i) {
        x.insert(x.begin() + std::ptrdiff_t(at), std::uint8_t(rng.next()));
      }
      break;
    }
    case 5: {  // erase a range
      if (!n) break;
      const std::size_t at = rng.below(n);
      const std::size_t k = std::min(n - at, 1 + rng.below(16));
      x.erase(x.begin() + std::ptrdiff_t(at), x.begin() + std::ptrdiff_t(at + k));
      break;
    }
    case 6:  // truncate
      x.resize(rng.below(n + 1));
      break;
    case 7: {  // copy a range of the input over another place
      if (n < 2) break;
      const std::size_t from = rng.below(n), to = rng.below(n);
      const std::size_t k = std::min({n - from, n - to, 1 + rng.below(32)});
      Bytes piece(x.begin() + std::ptrdiff_t(from), x.begin() + std::ptrdiff_t(from + k));
      std::copy(piece.begin(), piece.end(), x.begin() + std::ptrdiff_t(to));
      break;
    }
    default: {  // splice: this input's head, another input's tail
      const Bytes& other = corpus[rng.below(corpus.size())];
      const std::size_t cut = rng.below(n + 1), from = rng.below(other.size() + 1);
      x.resize(cut);
      x.insert(x.end(), other.begin() + std::ptrdiff_t(from), other.end());
      break;
    }
  }
}

// The input being run, kept so that a dying process can still save it.
const std::vector<std::uint8_t>* g_input = nullptr;
std::string g_what, g_out;

void save_input() {
  if (!g_input) return;
  std::ofstream(g_out, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(g_input->data()), std::streamsize(g_input->size()));
  std::fprintf(stderr, "fuzz finding: %s; the input is in %s\n", g_what.c_str(), g_out.c_str());
}

#ifndef DCPMLA_REPLAY_SANITIZED
// Without sanitizers a crash is a signal: save the input, then die of the signal as before.
extern "C" void on_fatal_signal(int sig) {
  save_input();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
#endif

void install_crash_handlers() {
#ifdef DCPMLA_REPLAY_SANITIZED
  // The sanitizers own the fatal signals and call this just before they end the process.
  __sanitizer_set_death_callback(save_input);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
#endif
}

int run_one(const Bytes& input, const std::string& what) {
  try {
    LLVMFuzzerTestOneInput(input.data(), input.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding: %s escaped with an exception: %s\n", what.c_str(),
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "fuzz finding: %s escaped with a non-standard exception\n", what.c_str());
  }
  return 1;
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--mutations N] [--seed S] [--max-seconds T] PATH...\n", argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 0;
  std::uint64_t seed = 1;
  double max_seconds = 1e9;
  std::vector<fs::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--mutations" || a == "--seed" || a == "--max-seconds") && i + 1 < argc) {
      const char* v = argv[++i];
      if (a == "--mutations") mutations = std::strtol(v, nullptr, 10);
      if (a == "--seed") seed = std::strtoull(v, nullptr, 10);
      if (a == "--max-seconds") max_seconds = std::strtod(v, nullptr);
    } else if (!a.empty() && a[0] != '-') {
      paths.emplace_back(a);
    } else {
      usage(argv[0]);
    }
  }
  if (paths.empty()) usage(argv[0]);

  std::vector<fs::path> files;
  for (const auto& p : paths) {
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "no such corpus file or directory: %s\n", p.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());  // directory order differs between file systems
  if (files.empty()) {
    std::fprintf(stderr, "the corpus is empty\n");
    return 2;
  }
  g_out = "fuzz-failure-" + fs::path(argv[0]).filename().string();
  install_crash_handlers();
  std::vector<Bytes> corpus;
  corpus.reserve(files.size());  // g_input points into it
  for (const auto& f : files) {
    corpus.push_back(read_file(f));
    g_input = &corpus.back();
    g_what = "corpus file " + f.string();
    if (run_one(corpus.back(), g_what)) {
      save_input();
      return 1;
    }
    g_input = nullptr;
  }

  const auto start = std::chrono::steady_clock::now();
  Rng rng{seed};
  long done = 0;
  for (; done < mutations; ++done) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > max_seconds) break;
    const std::size_t base = rng.below(corpus.size());
    Bytes x = corpus[base];
    const std::size_t steps = 1 + rng.below(4);
    for (std::size_t s = 0; s < steps; ++s) mutate_once(x, corpus, rng);
    g_input = &x;
    g_what = "mutation " + std::to_string(done) + " of " + files[base].string() + " (seed " +
             std::to_string(seed) + ")";
    if (run_one(x, g_what)) {
      save_input();
      return 1;
    }
    g_input = nullptr;
  }
  std::printf("%zu corpus inputs and %ld mutations passed (seed %llu)\n", files.size(), done,
              static_cast<unsigned long long>(seed));
  return 0;
}
