// stagecraft: one command line (SCHEMAS.md "Command line"), two executables built from the same
// cli/ sources (cli/app.cpp), so that the everyday commands start fast.
//
// `stagecraft` (this file) links neither MPI nor Qt (nor CUDA): info, program, simulate, search,
// results, export, demo, compare and calibrate start in about the time the dynamic loader needs
// for libstdc++ and SQLite (bench/startup.sh measures it). Open MPI with its runtime (PMIx,
// hwloc, libevent) and Qt Gui with its fonts and X libraries cost more than that just to load.
// `stagecraft-full` (cli/main_full.cpp), built next to it when the build has MPI or Qt, links
// everything the build found. Once argv is parsed, this executable hands a command that needs
// the full one over to it with execv: the same process (pid, environment, open files, the MPI
// launcher's connection) and the same argv, so the command runs exactly as if `stagecraft-full`
// had been started in the first place. The commands handed over:
//   run, probe, eval always: the executor and the probe are MPI programs even on one rank
//   search           when started by an MPI launcher (planner::launched_under_mpi())
//   compare --png, simulate --png    the drawing needs Qt (render/timeline_png.hpp)
// The full executable is found next to this one through /proc/self/exe. In a build with neither
// MPI nor Qt there is none: this executable is then the whole command line, with a world of one
// rank, a probe of one rank and no PNG (the *_local / *_none libraries it links).
//
// Why execv rather than dlopen of a module holding the MPI and Qt parts: such a module would
// call back into this executable's copies of our static libraries (every symbol exported), and
// Open MPI loaded under dlopen needs RTLD_GLOBAL for its own plugins. Two ordinary, fully linked
// executables and one switch in this file are simpler to build, test and debug.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "cli/app.hpp"
#include "planner/shard.hpp"

namespace {

// Name of the full executable in this build's output folder, or "" when the build made none.
constexpr std::string_view kFullExecutable = STAGECRAFT_FULL_EXECUTABLE;

bool needs_full(const CLI::App& command) {
  const std::string& name = command.get_name();
  if (name == "run" || name == "probe" || name == "eval") return true;
  if (name == "search") return stagecraft::planner::launched_under_mpi();
  if (name == "compare" || name == "simulate") return command.count("--png") > 0;
  return false;
}

// `name` in the folder of this executable, or "" when /proc/self/exe cannot be read.
std::string next_to_self(std::string_view name) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string path(self, static_cast<std::size_t>(n));
  path.erase(path.rfind('/') + 1);
  return path + std::string(name);
}

std::optional<int> hand_off(const CLI::App& command, char** argv) {
  if (kFullExecutable.empty() || !needs_full(command)) return std::nullopt;
  const std::string full = next_to_self(kFullExecutable);
  if (full.empty()) {
    std::cerr << "stagecraft: " << command.get_name() << " needs " << kFullExecutable
              << " from this executable's folder, which /proc/self/exe does not give: " << std::strerror(errno) << "\n";
    return 3;
  }
  ::execv(full.c_str(), argv);
  std::cerr << "stagecraft: " << command.get_name() << " needs " << full << ", which cannot be started: "
            << std::strerror(errno) << "\n";
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  return stagecraft::cli::run_cli(argc, argv, [argv](const CLI::App& command) { return hand_off(command, argv); });
}
