#include "case_archive.h"

#include <fstream>
#include <stdexcept>

namespace dcpmla::fuzz {
namespace {

constexpr const char* kFixedNames[] = {"config.json",  "query.npy", "query_start_loc.npy",
                                       "seq_lens.npy", "kv.npy",    "block_table.npy"};
constexpr int kFixed = 6;

}  // namespace

std::string case_file_name(std::uint8_t tag) {
  const int index = tag & 0x7f;
  if (index < kFixed) return kFixedNames[index];
  return "cache_rank" + std::to_string(index - kFixed) + ".npy";
}

std::uint8_t case_file_tag(const std::string& name) {
  for (int i = 0; i < 128; ++i) {
    if (case_file_name(std::uint8_t(i)) == name) return std::uint8_t(i);
  }
  throw std::invalid_argument("not a case file name: " + name);
}

std::vector<CaseEntry> unpack_case(std::span<const std::uint8_t> archive) {
  std::vector<CaseEntry> entries;
  std::size_t pos = 0;
  while (pos < archive.size()) {
    CaseEntry e;
    e.tag = archive[pos++];
    std::uint32_t len = 0;
    for (int i = 0; i < 4 && pos < archive.size(); ++i, ++pos) {
      len |= std::uint32_t(archive[pos]) << (8 * i);
    }
    const std::size_t n = std::min<std::size_t>(len, archive.size() - pos);
    e.content.assign(archive.begin() + std::ptrdiff_t(pos),
                     archive.begin() + std::ptrdiff_t(pos + n));
    pos += n;
    entries.push_back(std::move(e));
  }
  return entries;
}

std::vector<std::uint8_t> pack_case(const std::vector<CaseEntry>& entries) {
  std::vector<std::uint8_t> out;
  for (const auto& e : entries) {
    out.push_back(e.tag);
    const auto len = std::uint32_t(e.content.size());
    for (int i = 0; i < 4; ++i) out.push_back(std::uint8_t(len >> (8 * i)));
    out.insert(out.end(), e.content.begin(), e.content.end());
  }
  return out;
}

void write_case_dir(const std::vector<CaseEntry>& entries, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : entries) {
    const fs::path path = dir / case_file_name(e.tag);
    fs::remove_all(path);
    if (e.tag & kDirectoryTag) {
      fs::create_directory(path);
      continue;
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(e.content.data()), std::streamsize(e.content.size()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
  }
}

}  // namespace dcpmla::fuzz
