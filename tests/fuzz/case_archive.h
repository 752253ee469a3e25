// The input format of the case-directory fuzz target: the files of a `dcpmla attend` case
// (docs/attend-format.md) packed into one byte string, so that a fuzzer mutates file contents
// and the set of files alike.
//
// An archive is a sequence of entries, each: tag (1 byte), length (4 bytes, little-endian),
// `length` bytes of content. A length past the end of the input takes what is left. The low 7 bits
// of the tag name the file (case_file_name); the high bit makes the entry a directory of that name
// instead of a file (the content is ignored), to test readers that meet a directory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace dcpmla::fuzz {

struct CaseEntry {
  std::uint8_t tag = 0;
  std::vector<std::uint8_t> content;
};

// 0 config.json, 1 query.npy, 2 query_start_loc.npy, 3 seq_lens.npy, 4 kv.npy,
// 5 block_table.npy, 6 + r cache_rank{r}.npy (the low 7 bits of `tag` are used).
std::string case_file_name(std::uint8_t tag);
// The tag of a file name (one of the above); throws std::invalid_argument for any other name.
std::uint8_t case_file_tag(const std::string& name);
inline constexpr std::uint8_t kDirectoryTag = 0x80;

std::vector<CaseEntry> unpack_case(std::span<const std::uint8_t> archive);
std::vector<std::uint8_t> pack_case(const std::vector<CaseEntry>& entries);

// Replaces `dir` by a directory holding the entries (later entries of one name win).
void write_case_dir(const std::vector<CaseEntry>& entries, const std::filesystem::path& dir);

}  // namespace dcpmla::fuzz
