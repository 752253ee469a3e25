// A minimal .npy reader and writer for the tool's file interface (`dcpmla attend`).
//
// Reads format versions 1.0 and 2.0, writes 1.0 (2.0 when the header does not fit in 64 KiB).
// Only little-endian, C-ordered arrays of the five element types the case format uses are
// accepted; anything else is rejected with an Error naming the file, what was expected and what
// was found.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace dcpmla::tool::npy {

// The element types understood here, by their numpy descr.
enum class Dtype : std::uint8_t {
  f4,  // '<f4' float32
  i4,  // '<i4' int32
  i8,  // '<i8' int64
  u2,  // '<u2' uint16 (raw bf16 bits)
  u1,  // '|u1' uint8 (raw fp8 e4m3 bits)
};

std::size_t itemsize(Dtype t);
// The numpy descr: "<f4", "<i4", "<i8", "<u2", "|u1".
const char* descr(Dtype t);
// A readable name: "float32", "int32", "int64", "uint16", "uint8".
const char* name(Dtype t);

struct Array {
  Dtype dtype = Dtype::f4;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;  // numel * itemsize, C order, little-endian

  std::int64_t numel() const;
  // Copies the elements out as T (which must match the dtype's size; checked by the caller).
  template <class T>
  std::vector<T> values() const {
    std::vector<T> v(bytes.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
  }
};

// Parses the bytes of a .npy file; `what` names it in errors (usually the file name).
Array parse(std::span<const std::uint8_t> file, const std::string& what);
// Reads and parses a file. Throws Error (invalid_argument) naming the path if it cannot be read.
Array read(const std::filesystem::path& path);

// The bytes of a .npy file holding `data` (numel * itemsize bytes) of the given dtype and shape.
std::vector<std::uint8_t> serialize(Dtype dtype, std::span<const std::int64_t> shape,
                                    const void* data);
// Writes a .npy file. Throws Error (backend_failure) naming the path if it cannot be written.
void write(const std::filesystem::path& path, Dtype dtype, std::span<const std::int64_t> shape,
           const void* data);

// The shape as numpy prints it: "(3,)", "(2, 4)", "()".
std::string shape_string(std::span<const std::int64_t> shape);

}  // namespace dcpmla::tool::npy
