// Start-up time of the command line: how long `stagecraft --help` and `stagecraft info --model
// gpt2-124m` take from spawn to exit, next to /bin/true (what any process costs here) and the
// same commands of stagecraft-full (which loads MPI and Qt). Each command is spawned
// (posix_spawn, stdout and stderr to /dev/null) and waited for; the commands take turns, one
// run each per round, so that a change in the machine's load hits all of them alike; 3 rounds
// of warm-up, then 50. Prints median, mean, min and max wall time in ms. The goal for the plain
// commands of `stagecraft` is a median under 3 ms (cli/main.cpp says how it gets there).
// With --simulate, each executable's `simulate` of GPT-3 175B on 1024 A100s
// (configs/plans/gpt3-175b-1024gpu, 96 micro-batches) is timed too, with its error bars (the
// default: 2 more step-time simulations per uncertain parameter that can move the plan) and
// without; the goal for the first is a median under 50 ms.
// Usage: stagecraft_bench_startup [--runs N] [--simulate] [EXECUTABLE...]   (default: the build's
// cli/stagecraft and cli/stagecraft-full; any other stagecraft binary can be measured too).
// bench/startup.sh runs it; flags starting with --benchmark (bench/run.sh) are ignored.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct Command {
  std::string label;
  std::vector<std::string> argv;
  std::vector<double> ms;
};

double spawn_and_wait_ms(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t io;
  posix_spawn_file_actions_init(&io);
  posix_spawn_file_actions_addopen(&io, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&io, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &io, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&io);
  if (rc != 0) throw std::runtime_error("cannot start " + command[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const auto end = std::chrono::steady_clock::now();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error(command[0] + " failed");
  return std::chrono::duration<double, std::milli>(end - start).count();
}

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

void print(const Command& c) {
  std::vector<double> v = c.ms;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  double sum = 0;
  for (double x : v) sum += x;
  std::printf("%-58s %8.2f %8.2f %8.2f %8.2f\n", c.label.c_str(), median, sum / static_cast<double>(n), v.front(),
              v.back());
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 50;
  bool simulate = false;
  std::vector<std::string> exes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--simulate") {
      simulate = true;
    } else if (a.rfind("--benchmark", 0) != 0) {
      exes.push_back(a);
    }
  }
  if (exes.empty()) {
    const std::string light = STAGECRAFT_EXECUTABLE;
    exes.push_back(light);
    const std::string full = light.substr(0, light.rfind('/') + 1) + "stagecraft-full";
    if (executable(full)) exes.push_back(full);
  }
  std::vector<Command> commands = {{"/bin/true", {"/bin/true"}, {}}};
  for (const std::string& exe : exes) {
    commands.push_back({exe + " --help", {exe, "--help"}, {}});
    commands.push_back({exe + " info --model gpt2-124m", {exe, "info", "--model", "gpt2-124m"}, {}});
    if (!simulate) continue;
    const std::vector<std::string> sim175b = {exe, "simulate", "--model", "gpt3-175b", "--cluster", "dgx-a100-80g-hdr",
                                              "--training", "gpt3-175b-1536", "--plan", "gpt3-175b-1024gpu", "--nodes", "128"};
    commands.push_back({exe + " simulate 175B/1024", sim175b, {}});
    std::vector<std::string> bare = sim175b;
    bare.push_back("--no-error-bars");
    commands.push_back({exe + " simulate 175B/1024 --no-error-bars", bare, {}});
  }
  try {
    for (int round = 0; round < 3 + runs; ++round) {
      for (Command& c : commands) {
        const double ms = spawn_and_wait_ms(c.argv);
        if (round >= 3) c.ms.push_back(ms);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stagecraft_bench_startup: %s\n", e.what());
    return 1;
  }
  std::printf("wall time from spawn to exit, %d runs each, ms\n", runs);
  std::printf("%-58s %8s %8s %8s %8s\n", "command", "median", "mean", "min", "max");
  for (const Command& c : commands) print(c);
  return 0;
}
