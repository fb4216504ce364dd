// Subcommands register themselves at static-initialisation time, so each lives in its own
// cmd_<name>.cpp and main.cpp never changes when one is added.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ds::cli {

// setup(app) adds the subcommand to app and sets its callback. The callback returns the exit
// code through `exit_code`.
struct Command {
  std::string name;
  std::function<void(CLI::App& app, int& exit_code)> setup;
};

std::vector<Command>& commands();

struct RegisterCommand {
  RegisterCommand(std::string name, std::function<void(CLI::App&, int&)> setup) {
    commands().push_back({std::move(name), std::move(setup)});
  }
};

}  // namespace ds::cli
