#include "npy.h"

#include <fmt/format.h>

#include <bit>
#include <cctype>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>

#include "dcpmla/error.h"

namespace dcpmla::tool::npy {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the .npy reader and writer assume a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kAlign = 64;
constexpr const char* kAccepted =
    "one of '<f4', '<i4', '<i8', '<u2', '|u1' (little-endian float32, int32, int64, uint16, "
    "uint8)";

std::optional<Dtype> dtype_from_descr(std::string_view d) {
  if (d == "<f4") return Dtype::f4;
  if (d == "<i4") return Dtype::i4;
  if (d == "<i8") return Dtype::i8;
  if (d == "<u2") return Dtype::u2;
  if (d == "|u1" || d == "<u1") return Dtype::u1;
  return std::nullopt;
}

[[noreturn]] void fail(ErrorCode code, const std::string& what, const std::string& expected,
                       const std::string& actual) {
  throw Error(code, what, expected, actual);
}

// The value types that occur in a .npy header dictionary.
struct Value {
  enum class Kind { string, boolean, tuple } kind;
  std::string text;                 // string
  bool flag = false;                // boolean
  std::vector<std::int64_t> items;  // tuple of non-negative integers
};

// A recursive-descent parser for the Python literal dict of a .npy header: string keys, and
// string, True / False and integer-tuple values (what numpy writes for simple dtypes).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : s_(text), what_(what) {}

  std::vector<std::pair<std::string, Value>> parse_dict() {
    std::vector<std::pair<std::string, Value>> entries;
    skip_space();
    expect('{');
    skip_space();
    while (peek() != '}') {
      std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      Value v = parse_value();
      entries.emplace_back(std::move(key), std::move(v));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
        continue;
      }
      if (peek() != '}') error("',' or '}'");
    }
    ++pos_;
    // numpy pads the header with spaces and ends it with a newline.
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' ||
                                s_[pos_] == '\r' || s_[pos_] == '\0')) {
      ++pos_;
    }
    if (pos_ != s_.size()) error("the end of the header after the dictionary");
    return entries;
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  [[noreturn]] void error(const std::string& expected) const {
    std::string_view rest = s_.substr(pos_, 24);
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back()))) {
      rest.remove_suffix(1);
    }
    fail(ErrorCode::invalid_argument, what_ + " header",
         fmt::format("{} at offset {} of the header dictionary", expected, pos_),
         pos_ >= s_.size() ? std::string("the end of the header")
                           : fmt::format("'{}'", std::string(rest)));
  }
  void expect(char c) {
    if (peek() != c) error(fmt::format("'{}'", c));
    ++pos_;
  }
  std::string parse_string() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') error("a quoted string");
    ++pos_;
    const std::size_t begin = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') error("a string without escapes");
      ++pos_;
    }
    if (pos_ >= s_.size()) error("a closing quote");
    std::string out(s_.substr(begin, pos_ - begin));
    ++pos_;
    return out;
  }
  std::int64_t parse_int() {
    if (!std::isdigit(static_cast<unsigned char>(peek()))) error("a non-negative integer");
    std::int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      const int digit = s_[pos_] - '0';
      if (v > (std::numeric_limits<std::int64_t>::max() - digit) / 10) error("a smaller integer");
      v = v * 10 + digit;
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 long suffix, written by very old numpy
    return v;
  }
  Value parse_value() {
    Value v{};
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = Value::Kind::string;
      v.text = parse_string();
    } else if (s_.substr(pos_, 4) == "True") {
      v.kind = Value::Kind::boolean;
      v.flag = true;
      pos_ += 4;
    } else if (s_.substr(pos_, 5) == "False") {
      v.kind = Value::Kind::boolean;
      v.flag = false;
      pos_ += 5;
    } else if (c == '(') {
      v.kind = Value::Kind::tuple;
      ++pos_;
      skip_space();
      while (peek() != ')') {
        v.items.push_back(parse_int());
        skip_space();
        if (peek() == ',') {
          ++pos_;
          skip_space();
        } else if (peek() != ')') {
          error("',' or ')' in the shape tuple");
        }
      }
      ++pos_;
    } else {
      error("a string, True, False or a tuple of integers");
    }
    return v;
  }

  std::string_view s_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

std::uint64_t read_le(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::size_t itemsize(Dtype t) {
  switch (t) {
    case Dtype::f4:
      return 4;
    case Dtype::i4:
      return 4;
    case Dtype::i8:
      return 8;
    case Dtype::u2:
      return 2;
    case Dtype::u1:
      return 1;
  }
  return 0;
}

const char* descr(Dtype t) {
  switch (t) {
    case Dtype::f4:
      return "<f4";
    case Dtype::i4:
      return "<i4";
    case Dtype::i8:
      return "<i8";
    case Dtype::u2:
      return "<u2";
    case Dtype::u1:
      return "|u1";
  }
  return "?";
}

const char* name(Dtype t) {
  switch (t) {
    case Dtype::f4:
      return "float32";
    case Dtype::i4:
      return "int32";
    case Dtype::i8:
      return "int64";
    case Dtype::u2:
      return "uint16";
    case Dtype::u1:
      return "uint8";
  }
  return "?";
}

std::int64_t Array::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_string(std::span<const std::int64_t> shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + ")";
}

Array parse(std::span<const std::uint8_t> file, const std::string& what) {
  const std::string_view head(reinterpret_cast<const char*>(file.data()),
                              std::min<std::size_t>(file.size(), kMagic.size()));
  if (head != kMagic) {
    fail(ErrorCode::invalid_argument, what, "a .npy file (magic \\x93NUMPY)",
         file.size() < kMagic.size() ? fmt::format("{} bytes", file.size())
                                     : std::string("other leading bytes"));
  }
  if (file.size() < kMagic.size() + 2) {
    fail(ErrorCode::invalid_argument, what, "a format version after the magic",
         "the end of the file");
  }
  const int major = file[6], minor = file[7];
  if (!((major == 1 || major == 2) && minor == 0)) {
    fail(ErrorCode::unsupported, what, ".npy format version 1.0 or 2.0",
         fmt::format("version {}.{}", major, minor));
  }
  const int len_bytes = major == 1 ? 2 : 4;
  const std::size_t prefix = kMagic.size() + 2 + len_bytes;
  if (file.size() < prefix) {
    fail(ErrorCode::invalid_argument, what, "a header length field", "the end of the file");
  }
  const std::uint64_t header_len = read_le(file.data() + 8, len_bytes);
  if (header_len > file.size() - prefix) {
    fail(ErrorCode::invalid_argument, what,
         fmt::format("a header of {} bytes (as its length field says)", header_len),
         fmt::format("{} bytes left in the file", file.size() - prefix));
  }
  const std::string_view header(reinterpret_cast<const char*>(file.data() + prefix),
                                std::size_t(header_len));
  const auto entries = HeaderParser(header, what).parse_dict();

  const Value* descr_v = nullptr;
  const Value* fortran_v = nullptr;
  const Value* shape_v = nullptr;
  for (const auto& [key, v] : entries) {
    const Value** slot = key == "descr"           ? &descr_v
                         : key == "fortran_order" ? &fortran_v
                         : key == "shape"         ? &shape_v
                                                  : nullptr;
    if (!slot) {
      fail(ErrorCode::invalid_argument, what + " header",
           "only the keys 'descr', 'fortran_order', 'shape'", fmt::format("key '{}'", key));
    }
    if (*slot) {
      fail(ErrorCode::invalid_argument, what + " header", fmt::format("one '{}' key", key),
           "it twice");
    }
    *slot = &v;
  }
  for (auto [v, key] : {std::pair{descr_v, "descr"}, std::pair{fortran_v, "fortran_order"},
                        std::pair{shape_v, "shape"}}) {
    if (!v) {
      fail(ErrorCode::invalid_argument, what + " header", fmt::format("a '{}' key", key), "none");
    }
  }
  if (descr_v->kind != Value::Kind::string) {
    fail(ErrorCode::dtype_mismatch, what, kAccepted, "a structured dtype");
  }
  const auto dtype = dtype_from_descr(descr_v->text);
  if (!dtype) {
    const std::string& d = descr_v->text;
    const std::string note = !d.empty() && d[0] == '>' ? " (big-endian)" : "";
    fail(ErrorCode::dtype_mismatch, what, kAccepted, fmt::format("'{}'{}", d, note));
  }
  if (fortran_v->kind != Value::Kind::boolean) {
    fail(ErrorCode::invalid_argument, what + " fortran_order", "True or False", "another value");
  }
  if (fortran_v->flag) {
    fail(ErrorCode::unsupported, what, "a C-ordered array (fortran_order False)",
         "fortran_order True (save with np.ascontiguousarray)");
  }
  if (shape_v->kind != Value::Kind::tuple) {
    fail(ErrorCode::invalid_argument, what + " shape", "a tuple of integers", "another value");
  }

  Array a;
  a.dtype = *dtype;
  a.shape = shape_v->items;
  // numel * itemsize without overflow: bounded by what is left of the file. The non-zero extents
  // are bounded even when another extent is 0 (as numpy does), so that numel() of any array read
  // here, and writing it back, cannot overflow.
  const std::size_t data_bytes = file.size() - prefix - std::size_t(header_len);
  std::uint64_t need = itemsize(a.dtype);
  bool zero = false;
  for (auto d : a.shape) {
    if (d == 0) {
      zero = true;
      continue;
    }
    if (std::uint64_t(d) > std::numeric_limits<std::uint64_t>::max() / need ||
        need * std::uint64_t(d) > (std::uint64_t(1) << 62)) {
      fail(ErrorCode::invalid_argument, what, "a shape of a plausible size", shape_string(a.shape));
    }
    need *= std::uint64_t(d);
  }
  if (zero) need = 0;
  if (data_bytes != need) {
    fail(ErrorCode::shape_mismatch, what,
         fmt::format("{} data bytes ({} {} of shape {})", need, a.numel(), name(a.dtype),
                     shape_string(a.shape)),
         fmt::format("{} bytes{}", data_bytes, data_bytes < need ? " (truncated)" : ""));
  }
  const auto* data = file.data() + prefix + header_len;
  a.bytes.assign(data, data + need);
  return a;
}

Array read(const std::filesystem::path& path) {
  const std::string what = path.filename().string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail(ErrorCode::invalid_argument, what, fmt::format("a file at {}", path.string()),
         std::filesystem::exists(path, ec) ? "something that is not a regular file"
                                           : "no such file");
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes;
  if (in) {
    in.seekg(0, std::ios::end);
    const auto size = in.tellg();
    in.seekg(0, std::ios::beg);
    if (size >= 0) {
      bytes.resize(std::size_t(size));
      in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
    }
  }
  if (!in) {
    fail(ErrorCode::invalid_argument, what, fmt::format("a readable file at {}", path.string()),
         "a read error");
  }
  return parse(bytes, what);
}

std::vector<std::uint8_t> serialize(Dtype dtype, std::span<const std::int64_t> shape,
                                    const void* data) {
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   descr(dtype), shape_string(shape));
  // Pad with spaces and a final newline so the data starts at a multiple of 64 bytes.
  const auto pad_to = [&](std::size_t prefix) {
    const std::size_t total = prefix + header.size() + 1;
    header.append((kAlign - total % kAlign) % kAlign, ' ');
    header.push_back('\n');
  };
  int major = 1;
  if (header.size() + 1 + kAlign > 0xffff) major = 2;
  pad_to(major == 1 ? 10 : 12);

  std::int64_t numel = 1;
  for (auto d : shape) numel *= d;
  const std::size_t data_bytes = std::size_t(numel) * itemsize(dtype);
  const int len_bytes = major == 1 ? 2 : 4;
  const std::size_t prefix = kMagic.size() + 2 + std::size_t(len_bytes);
  std::vector<std::uint8_t> out(prefix + header.size() + data_bytes);
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  out[6] = std::uint8_t(major);
  out[7] = 0;
  for (int i = 0; i < len_bytes; ++i) out[8 + i] = std::uint8_t(header.size() >> (8 * i));
  std::memcpy(out.data() + prefix, header.data(), header.size());
  if (data_bytes) std::memcpy(out.data() + prefix + header.size(), data, data_bytes);
  return out;
}

void write(const std::filesystem::path& path, Dtype dtype, std::span<const std::int64_t> shape,
           const void* data) {
  const auto bytes = serialize(dtype, shape, data);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (out) out.close();
  if (!out) {
    fail(ErrorCode::backend_failure, path.string(), "a writable file", "a write error");
  }
}

}  // namespace dcpmla::tool::npy
