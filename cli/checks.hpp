// Checks of command-line values, run while argv is parsed, so a bad value stops the command before
// any search, simulation or training starts (exit 2, "--option: expected ..., got ..."):
// numbers that must be positive, non-negative or finite (CLI11's PositiveNumber lets NaN and
// infinity through, and its range message prints a 300-digit bound), and output paths that must be
// writable. Limits come from core/spec/limits.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace stagecraft::cli {

// An integer in [1, max] (decimal digits only).
CLI::Validator positive_int(int64_t max);
// An integer in [0, max].
CLI::Validator non_negative_int(int64_t max);
// A finite number > 0 (NaN and infinity refused).
CLI::Validator positive_finite();
// A finite number >= 0.
CLI::Validator non_negative_finite();
// A file this process can create or write: not a directory, its folder exists and accepts a new
// file (tried, then undone). An existing file is left as it is.
CLI::Validator writable_file();
// A folder that exists and is writable, or that can be created under its nearest existing parent.
CLI::Validator writable_dir();

// Throws spec::SpecError when `output` is the same file as one of `inputs` (-o never overwrites an
// input).
void refuse_overwriting_input(const std::string& output, const std::vector<std::string>& inputs,
                              const std::string& option);

// Bytes this host can still give (MemAvailable in /proc/meminfo), or -1 when it does not say.
double host_available_bytes();
// Ranks of this job on this host as the launcher says (Open MPI, MPICH/Hydra, Slurm), else `world`.
int64_t ranks_on_this_host(int64_t world);

// Flushes standard output; false (after saying why on stderr) when a write to it failed, e.g. on a
// full disk.
bool flush_stdout();

}  // namespace stagecraft::cli
