// The .npy reader and writer of the tool: round trips, numpy's exact byte layout, and a clear
// error for every header or payload it must reject.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "case_writer.h"
#include "dcpmla/error.h"
#include "npy.h"

namespace dcpmla::tool::npy {
namespace {

std::vector<std::uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

// A .npy file with a hand-written header (padded like numpy) and `data_bytes` zero bytes.
std::vector<std::uint8_t> file_with_header(std::string header, std::size_t data_bytes,
                                           int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  std::string f = "\x93NUMPY";
  f.push_back(char(major));
  f.push_back(0);
  for (std::size_t i = 0; i < prefix - 8; ++i) f.push_back(char((header.size() >> (8 * i)) & 0xff));
  f += header;
  f.append(data_bytes, '\0');
  return bytes_of(f);
}

// Expects parse to throw an Error whose message contains every one of `parts`.
void expect_rejected(const std::vector<std::uint8_t>& file,
                     std::initializer_list<const char*> parts) {
  try {
    parse(file, "x.npy");
    FAIL() << "accepted a file it must reject";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("x.npy"), std::string::npos) << msg;
    for (const char* p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

template <class T>
void round_trip(Dtype dtype, std::vector<std::int64_t> shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<T> data(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = T(i * 7 + 3);
  const auto dir = testing::temp_dir("npy_round_trip");
  write(dir / "a.npy", dtype, shape, data.data());
  const Array a = read(dir / "a.npy");
  EXPECT_EQ(a.dtype, dtype);
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.numel(), n);
  EXPECT_EQ(a.values<T>(), data);
  // The data starts at a multiple of 64 bytes, as numpy writes it.
  const auto file = serialize(dtype, shape, data.data());
  EXPECT_EQ((file.size() - data.size() * sizeof(T)) % 64, 0u);
  std::filesystem::remove_all(dir);
}

TEST(ToolsNpy, RoundTripsEveryDtype) {
  round_trip<float>(Dtype::f4, {3, 2, 5});
  round_trip<std::int32_t>(Dtype::i4, {7});
  round_trip<std::int64_t>(Dtype::i8, {2, 3});
  round_trip<std::uint16_t>(Dtype::u2, {4, 1, 576});
  round_trip<std::uint8_t>(Dtype::u1, {2, 64, 576});
  round_trip<float>(Dtype::f4, {0, 576});  // empty
  round_trip<float>(Dtype::f4, {});        // 0-d scalar
}

TEST(ToolsNpy, WritesNumpysExactLayout) {
  // np.save of np.arange(3, dtype='<i4'): version 1.0, header length 118, data at byte 128.
  const std::int32_t data[3] = {0, 1, 2};
  const std::vector<std::int64_t> shape{3};
  const auto f = serialize(Dtype::i4, shape, data);
  ASSERT_EQ(f.size(), 128u + 12u);
  EXPECT_EQ(std::string(f.begin(), f.begin() + 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10));
  const std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
  EXPECT_EQ(std::string(f.begin() + 10, f.begin() + 10 + long(dict.size())), dict);
  EXPECT_EQ(f[127], '\n');
  EXPECT_EQ(shape_string(std::vector<std::int64_t>{2, 4}), "(2, 4)");
  EXPECT_EQ(shape_string(std::vector<std::int64_t>{}), "()");
}

TEST(ToolsNpy, ReadsVersion2AndOtherSpellings) {
  // Version 2.0 (4-byte header length), double quotes, other key order, no trailing comma.
  auto f =
      file_with_header("{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<f4\"}", 24, 2);
  Array a = parse(f, "x.npy");
  EXPECT_EQ(a.dtype, Dtype::f4);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  // '<u1' is accepted like '|u1'; a Python-2 long suffix in the shape too.
  a = parse(file_with_header("{'descr': '<u1', 'fortran_order': False, 'shape': (5L,), }", 5),
            "x.npy");
  EXPECT_EQ(a.dtype, Dtype::u1);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{5}));
}

TEST(ToolsNpy, RejectsBadFilesWithClearErrors) {
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  EXPECT_NO_THROW(parse(file_with_header(good, 8), "x.npy"));

  expect_rejected(bytes_of("PK\x03\x04 this is a zip"), {"magic"});
  expect_rejected(bytes_of("\x93NUM"), {"magic", "4 bytes"});
  auto v3 = file_with_header(good, 8, 2);
  v3[6] = 3;
  expect_rejected(v3, {"version 3.0", "1.0 or 2.0"});
  expect_rejected(file_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8),
                  {"fortran_order True", "C-ordered"});
  expect_rejected(file_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8),
                  {"'>f4'", "big-endian", "'<f4'"});
  expect_rejected(file_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16),
                  {"'<f8'"});
  expect_rejected(file_with_header("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", 4),
                  {"'<f2'"});
  expect_rejected(
      file_with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8),
      {"header"});
  expect_rejected(file_with_header("{'descr': '<f4', 'fortran_order': False, }", 8), {"'shape'"});
  expect_rejected(
      file_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 'y'}", 8),
      {"'x'"});
  expect_rejected(
      file_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8),
      {"header", "non-negative integer", "'x), }'"});
  expect_rejected(file_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8),
                  {"header", "non-negative integer"});
  expect_rejected(file_with_header(good, 7), {"8 data bytes", "7 bytes (truncated)"});
  expect_rejected(file_with_header(good, 12), {"8 data bytes", "12 bytes"});
  auto long_header = file_with_header(good, 8);
  long_header[8] = 0xff;
  long_header[9] = 0x7f;
  expect_rejected(long_header, {"header of 32767 bytes"});
}

// An extent of 0 makes the array empty but does not excuse the other extents: their product
// must still be plausible, so numel() and writing the array back cannot overflow.
TEST(ToolsNpy, ZeroExtentDoesNotHideAnOversizedShape) {
  const Array a = parse(
      file_with_header("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 1000000), }", 0),
      "x.npy");
  EXPECT_EQ(a.numel(), 0);
  expect_rejected(
      file_with_header(
          "{'descr': '<i8', 'fortran_order': False, 'shape': (93302, 72428567, 7272, 68547, 0), }",
          0),
      {"plausible size", "(93302, 72428567, 7272, 68547, 0)"});
  expect_rejected(
      file_with_header(
          "{'descr': '<u1', 'fortran_order': False, 'shape': (0, 9223372036854775807), }", 0),
      {"plausible size"});
}

// Random corruption of a valid file's header or length: parsed, or rejected with Error, never a
// crash or an out-of-bounds read (run under DCPMLA_SANITIZE to check the latter).
TEST(ToolsNpy, SurvivesCorruptedFiles) {
  const std::vector<float> data(24, 1.5f);
  const std::vector<std::int64_t> shape{2, 3, 4};
  const auto good = serialize(Dtype::f4, shape, data.data());
  std::mt19937 rng(5);
  int rejected = 0;
  for (int it = 0; it < 5000; ++it) {
    auto f = good;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const std::size_t at = rng() % 128;
      f[at] = std::uint8_t(rng() % 3 == 0 ? "(),':{} 0123456789TF"[rng() % 21] : rng());
    }
    if (rng() % 4 == 0) f.resize(rng() % f.size());
    try {
      const Array a = parse(f, "x.npy");
      EXPECT_EQ(std::size_t(a.numel()) * itemsize(a.dtype), a.bytes.size());
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(ToolsNpy, ReadNamesAMissingFile) {
  const auto dir = testing::temp_dir("npy_missing");
  try {
    read(dir / "nothere.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothere.npy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dcpmla::tool::npy
