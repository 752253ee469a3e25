#include "cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <limits>

#include "dcpmla/error.h"

namespace dcpmla::tool {

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  const std::string expected = hi == std::numeric_limits<std::int32_t>::max()
                                   ? fmt::format("an integer >= {}", lo)
                                   : fmt::format("an integer in [{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, expected](std::string& text) -> std::string {
        std::int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || ptr != end || v < lo || v > hi) {
          return fmt::format("expected {}, got '{}'", expected, one_line(text));
        }
        return {};
      },
      expected);
}

CLI::Validator positive_int() {
  return integer_in(1, std::numeric_limits<std::int32_t>::max());
}

CLI::Validator non_negative_int() {
  return integer_in(0, std::numeric_limits<std::int32_t>::max());
}

namespace {

std::string kind() {
  return to_string(ErrorCode::invalid_argument);
}

// "<name>: <rest>" -> {name, rest}; no name when the text does not start with an option.
std::pair<std::string, std::string> split_name(const std::string& text) {
  const auto colon = text.find(": ");
  if (colon == std::string::npos || text.empty() || text[0] != '-') return {"", text};
  return {text.substr(0, colon), text.substr(colon + 2)};
}

}  // namespace

std::string describe_parse_error(const CLI::ParseError& e) {
  const std::string what = one_line(e.what());
  auto line = [](const std::string& argument, const std::string& body) {
    return fmt::format("dcpmla: error: {} ({}): {}", argument, kind(), body);
  };
  if (dynamic_cast<const CLI::ValidationError*>(&e)) {
    const auto [name, rest] = split_name(what);
    if (!name.empty() && rest.rfind("expected ", 0) == 0) return line(name, rest);
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    const auto at = what.find(" is required");
    if (at != std::string::npos && what.rfind("A subcommand", 0) != 0) {
      return line(what.substr(0, at), "expected a value, got none");
    }
    return line("command", "expected one of demo, check, attend, got none");
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    const auto [name, rest] = split_name(what);
    if (!name.empty()) return line(name, "expected a value, got none");
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    const auto colon = what.find(": ");
    const std::string args = colon == std::string::npos ? what : what.substr(colon + 2);
    return line(args, "expected an option or subcommand listed by --help, got an unknown one");
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    const std::string prefix = "Could not convert: ";
    if (what.rfind(prefix, 0) == 0) {
      const auto eq = what.find(" = ", prefix.size());
      if (eq != std::string::npos) {
        return line(
            what.substr(prefix.size(), eq - prefix.size()),
            fmt::format("expected a value of the option's type, got '{}'", what.substr(eq + 3)));
      }
    }
  }
  return line("command line", fmt::format("expected what --help describes, got: {}", what));
}

std::string one_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t(1) << 34;  // 16 GiB when unknown
  return std::uint64_t(pages) * std::uint64_t(page);
}

void check_run_size(const char* what, std::initializer_list<SizeFactor> factors, double bytes,
                    double work, double max_work) {
  const double limit = 0.5 * double(physical_memory_bytes());
  const bool too_big = bytes > limit, too_slow = work > 0.0 && work > max_work;
  if (!too_big && !too_slow) return;
  const SizeFactor* culprit = factors.begin();
  for (const SizeFactor& f : factors) {
    if (f.value / f.typical > culprit->value / culprit->typical) culprit = &f;
  }
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const std::string expected =
      too_big ? fmt::format("{} that fits in half of this machine's memory ({:.1f} GiB)", what,
                            limit / kGiB)
              : fmt::format("{} of at most {:.2g} multiply-adds", what, max_work);
  const std::string got =
      too_big ? fmt::format("{:.0f}, needing {:.3g} GiB", culprit->value, bytes / kGiB)
              : fmt::format("{:.0f}, needing {:.3g} multiply-adds", culprit->value, work);
  throw Error(ErrorCode::invalid_argument, culprit->option, expected, got);
}

}  // namespace dcpmla::tool
