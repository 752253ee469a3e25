// dcpmla: MLA decode under decode context parallelism with speculative decoding.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <map>

#include "commands.h"
#include "dcpmla/error.h"

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
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const dcpmla::Error& e) {
    fmt::print(stderr, "dcpmla: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "dcpmla: error: {}\n", e.what());
    return 2;
  }
  return 2;
}
