// stagecraft-full: the command line with everything the build found (MPI, Qt), built from the
// same sources as `stagecraft`, which hands it the commands that need MPI or Qt (cli/main.cpp
// says which, and why two executables). It runs every command itself.
#include "cli/app.hpp"

int main(int argc, char** argv) { return stagecraft::cli::run_cli(argc, argv); }
