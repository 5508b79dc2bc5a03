// The whole command line of both executables (cli/main.cpp, cli/main_full.cpp): registers the
// subcommands, parses argv, maps errors to exit statuses (cli/common.hpp) and runs the chosen
// subcommand, unless `hand_off` takes it elsewhere first.
#pragma once

#include <functional>
#include <optional>

#include <CLI/CLI.hpp>

namespace stagecraft::cli {

// Called once argv parsed, with the chosen subcommand: nullopt runs it in this process; a value
// is the exit status to return instead (a hand-off that replaced the process never returns).
using HandOff = std::function<std::optional<int>(const CLI::App& command)>;

int run_cli(int argc, char** argv, const HandOff& hand_off = nullptr);

}  // namespace stagecraft::cli
