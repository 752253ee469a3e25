// Decodes fuzz input bytes into typed values. Reads past the end give zeros, so every input,
// however short, decodes to some description.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace dcpmla::fuzz {

class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t(u8()) << (8 * i);
    return v;
  }
  std::uint64_t u64() { return u32() | (std::uint64_t(u32()) << 32); }
  std::size_t remaining() const { return size_ - pos_; }

  // Mostly a value in [lo, hi] (one byte), sometimes an edge value of the int range: selector
  // bytes 0..239 pick lo + s % (hi - lo + 1), 240..255 one of 16 adversarial values.
  int small_int(int lo, int hi) {
    static constexpr int kEdges[16] = {0,
                                       -1,
                                       1,
                                       2,
                                       3,
                                       -2,
                                       64,
                                       1000,
                                       1 << 16,
                                       1 << 20,
                                       1 << 30,
                                       std::numeric_limits<int>::max() - 1,
                                       std::numeric_limits<int>::max(),
                                       std::numeric_limits<int>::min(),
                                       std::numeric_limits<int>::min() + 1,
                                       (1 << 30) + 1};
    const std::uint8_t s = u8();
    if (s >= 240) return kEdges[s - 240];
    const std::int64_t span = std::int64_t(hi) - lo + 1;
    return span <= 0 ? lo : int(lo + std::int64_t(s) % span);
  }

  // A length: 0..159 from the selector itself, 160..239 a 32-bit value shifted right by
  // (s - 160) % 32 (lengths of every magnitude up to 2^32), 240..255 an adversarial 64-bit value.
  std::int64_t length() {
    static constexpr std::int64_t kEdges[16] = {
        0,
        -1,
        std::numeric_limits<std::int32_t>::max(),
        std::int64_t(std::numeric_limits<std::int32_t>::max()) + 1,
        std::numeric_limits<std::int32_t>::max() - 1,
        std::numeric_limits<std::uint32_t>::max(),
        std::int64_t(1) << 40,
        std::numeric_limits<std::int64_t>::max(),
        std::numeric_limits<std::int64_t>::min(),
        std::numeric_limits<std::int64_t>::max() - 1,
        -2,
        4096,
        65536,
        1 << 20,
        (std::int64_t(1) << 31) - 64,
        std::int64_t(1) << 62};
    const std::uint8_t s = u8();
    if (s < 160) return s;
    if (s >= 240) return kEdges[s - 240];
    return std::int64_t(u32() >> ((s - 160) % 32));
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace dcpmla::fuzz
