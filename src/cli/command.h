// Subcommand registry for the `hotline` tool. Each cmd_<name>.cc registers itself:
//
//   static hotline::cli::Registrar reg("tokenize", "Tokenize text lines", [](CLI::App& app) {
//     auto opts = std::make_shared<Options>();
//     app.add_option("--vocab", opts->vocab)->required();
//     return [opts]() -> int { ... return 0; };   // runs when this subcommand was chosen
//   });
//
// The returned action's int is the process exit code. Errors thrown from an action are caught in
// main() and printed as "hotline <cmd>: error: <message>" with exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace hotline::cli {

using Action = std::function<int()>;
using Setup = std::function<Action(CLI::App&)>;

struct CommandInfo {
  std::string name;
  std::string description;
  Setup setup;
};

std::vector<CommandInfo>& Commands();

struct Registrar {
  Registrar(std::string name, std::string description, Setup setup) {
    Commands().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace hotline::cli
