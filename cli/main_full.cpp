// stagecraft-full: the command line with everything the build found (MPI, Qt), built from the
// same sources as `stagecraft`, which hands it the commands that need MPI or Qt (cli/main.cpp
// says which, and why two executables). It runs every command itself.
#include "cli/app.hpp"

// Under AddressSanitizer (scripts/test_sanitized.sh) this executable, which starts Open MPI, runs
// without leak detection: Open MPI's plugins are unloaded before exit and leave allocations that
// LeakSanitizer can neither attribute nor suppress. Every other ASan and UBSan check stays on, and
// the `stagecraft` executable (every command but run, probe and MPI search) keeps leak detection.
#if defined(STAGECRAFT_SANITIZED)
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

int main(int argc, char** argv) { return stagecraft::cli::run_cli(argc, argv); }
