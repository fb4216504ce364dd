#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"

namespace ds::cli {
std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}
}  // namespace ds::cli

int main(int argc, char** argv) {
  // stdout carries only what a command prints; every log line, of every subcommand, goes to stderr.
  ds::log_to_stderr();
  CLI::App app{"DeltaServe: an inference server for hybrid linear-attention models"};
  app.require_subcommand(1);
  int exit_code = 0;
  auto& cmds = ds::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& c : cmds) c.setup(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return exit_code;
}
