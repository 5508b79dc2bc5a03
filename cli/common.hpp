// Shared plumbing of the subcommands: registration, error-to-exit-status mapping (SCHEMAS.md:
// 0 success, 1 impossible request, 2 bad input) and number formatting for tables.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace stagecraft::cli {

enum ExitCode : int { kOk = 0, kImpossible = 1, kBadInput = 2 };

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Subcommand add_info(CLI::App& root);
Subcommand add_demo(CLI::App& root);
Subcommand add_program(CLI::App& root);
Subcommand add_run(CLI::App& root);
Subcommand add_simulate(CLI::App& root);
Subcommand add_search(CLI::App& root);    // search.cpp
Subcommand add_results(CLI::App& root);   // results.cpp
Subcommand add_export(CLI::App& root);    // export.cpp
Subcommand add_compare(CLI::App& root);   // compare.cpp
Subcommand add_calibrate(CLI::App& root); // calibrate.cpp
Subcommand add_probe(CLI::App& root);     // probe.cpp

// Ctrl-C during a search (search.cpp): the first SIGINT sets the flag (the search stops after the
// batch in flight and reports what it found), a second one ends the process.
void install_interrupt_handler();
const std::atomic<bool>& interrupted();

// 1234567 -> "1,234,567"
std::string with_commas(int64_t v);
// 1.746e11 -> "174.6 B" (K, M, B, T), for counts of parameters and FLOPs.
std::string short_count(double v);
// Bytes with a binary unit: 85899345920 -> "80.0 GiB".
std::string short_bytes(double bytes);

}  // namespace stagecraft::cli
