// Fuzz target: the case-directory reader of `dcpmla attend` (config.json and the .npy files).
// The input is a packed case (case_archive.h), written to a directory of this process. Every case
// must load or be refused with a dcpmla::Error; a loaded case is then planned for every rank,
// as `attend` does before it allocates anything, which must succeed or raise a dcpmla::Error too.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "attend.h"
#include "case_archive.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "fuzz_target.h"

namespace {

namespace fs = std::filesystem;

// Every input rewrites a whole directory: in memory (/dev/shm) unless TMPDIR names a place, as a
// disk that discards freed blocks makes it tens of times slower.
fs::path temp_root() {
  std::error_code ec;
  if (!std::getenv("TMPDIR") && fs::is_directory("/dev/shm", ec)) return "/dev/shm";
  return fs::temp_directory_path();
}

// One directory per process (libFuzzer's -jobs run several), removed at exit.
struct CaseDir {
  fs::path path = temp_root() / ("dcpmla-fuzz-case-" + std::to_string(::getpid()));
  ~CaseDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "case fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static CaseDir dir;
  dcpmla::fuzz::write_case_dir(dcpmla::fuzz::unpack_case({data, size}), dir.path);
  dcpmla::tool::Case c;
  try {
    c = dcpmla::tool::load_case(dir.path);
  } catch (const dcpmla::Error& e) {
    dcpmla::fuzz::note_refusal(e);
    return 0;
  }
  const auto& cfg = c.config;
  if (c.rank_num_blocks.size() != std::size_t(cfg.world)) finding("rank_num_blocks size");
  if (c.query.size() != std::size_t(c.batch.rows()) * cfg.heads * dcpmla::kHeadDim) {
    finding("query size disagrees with the batch");
  }
  for (int r = 0; r < cfg.world; ++r) {
    const dcpmla::PlanConfig pc{dcpmla::Sharding{cfg.world, r, cfg.interleave}, cfg.heads,
                                cfg.block_size, c.rank_num_blocks[std::size_t(r)],
                                dcpmla::DeviceModel{.workers = 8}};
    try {
      dcpmla::make_plan(c.batch, pc);
    } catch (const dcpmla::Error& e) {
      dcpmla::fuzz::note_refusal(e);
      return 0;
    }
  }
  // load_case checked the ids every rank reads against that rank's cache; rank 0 reads the most.
  try {
    dcpmla::validate_block_ids(c.batch, {dcpmla::Sharding{cfg.world, 0, cfg.interleave},
                                         cfg.heads,
                                         cfg.block_size,
                                         c.rank_num_blocks[0],
                                         {},
                                         0});
  } catch (const dcpmla::Error& e) {
    finding(std::string("validate_block_ids refused a loaded case: ") + e.what());
  }
  dcpmla::fuzz::note_accepted("case loaded and planned on every rank");
  return 0;
}
