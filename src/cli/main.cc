// The `hotline` command: dispatches to the subcommands registered in cmd_*.cc.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include "base/error.h"
#include "cli/command.h"

namespace hotline::cli {
std::vector<CommandInfo>& Commands() {
  static std::vector<CommandInfo> commands;
  return commands;
}
}  // namespace hotline::cli

int main(int argc, char** argv) {
  using namespace hotline::cli;
  CLI::App app{"hotline: understanding and answering 12345 citizen-hotline calls"};
  app.require_subcommand(1);
  auto& cmds = Commands();
  std::sort(cmds.begin(), cmds.end(),
            [](const CommandInfo& a, const CommandInfo& b) { return a.name < b.name; });
  std::map<CLI::App*, std::pair<std::string, Action>> actions;
  for (auto& c : cmds) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    actions[sub] = {c.name, c.setup(*sub)};
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, named] : actions) {
    if (sub->parsed()) {
      try {
        return named.second();
      } catch (const hotline::Error& e) {
        std::fprintf(stderr, "hotline %s: error: %s\n", named.first.c_str(), e.what());
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hotline %s: error: %s\n", named.first.c_str(), e.what());
        return 1;
      }
    }
  }
  return 2;
}
