// dcpmla: MLA decode under decode context parallelism with speculative decoding.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <map>

#include "cli.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dcpmla: MLA decode under decode context parallelism and speculative decoding"};
  app.require_subcommand(1);
  std::map<CLI::App*, dcpmla::tool::Runner> runners;
  auto add = [&](const char* name, const char* help, auto add_fn) {
    CLI::App* sub = app.add_subcommand(name, help);
    runners[sub] = add_fn(*sub);
  };
  add("demo", "run a ragged speculative batch across simulated DCP ranks and verify it",
      dcpmla::tool::add_demo);
  add("check", "run every SPEC test vector", dcpmla::tool::add_check);
  add("attend", "run a case directory of .npy files and write out.npy and lse.npy",
      dcpmla::tool::add_attend);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "{}\n", dcpmla::tool::describe_parse_error(e));
    return dcpmla::tool::kUsageExitStatus;
  }
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "dcpmla: error: {}\n", dcpmla::tool::one_line(e.what()));
    return dcpmla::tool::kUsageExitStatus;
  }
  return dcpmla::tool::kUsageExitStatus;
}
