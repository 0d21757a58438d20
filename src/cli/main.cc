// The `hotline` command: dispatches to the subcommands registered in cmd_*.cc.
#include <algorithm>
#include <cstdlib>
#include <unistd.h>
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
  // OpenMP threads that spin while idle steal the cores from the server's other threads and,
  // on a shared machine, from each other (measured: p50 170 ms spinning vs 3.9 ms passive under
  // load). libgomp reads OMP_WAIT_POLICY when it is loaded, before main(), so when the caller has
  // not chosen a policy we set "passive" and re-execute ourselves once.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default policy
  }
  CLI::App app{"hotline: understanding and answering 12345 citizen-hotline calls"};
  app.set_version_flag("--version", std::string("hotline ") + HOTLINE_VERSION);
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
