// The subcommands of the dcpmla tool. Each registers its options on the CLI11 app and returns
// the process exit status from its run function (0 = every check passed).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace dcpmla::tool {

using Runner = std::function<int()>;

Runner add_demo(CLI::App& app);
Runner add_check(CLI::App& app);
Runner add_attend(CLI::App& app);

}  // namespace dcpmla::tool
