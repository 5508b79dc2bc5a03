#include "cli/app.hpp"

#include <iostream>
#include <new>
#include <string_view>
#include <vector>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/spec/error.hpp"
#include "planner/pool.hpp"
#include "planner/store.hpp"

namespace stagecraft::cli {

int run_cli(int argc, char** argv, const HandOff& hand_off) {
  CLI::App app{"Stagecraft: plan, simulate and run pipeline + ZeRO training of large language models"};
  // The version, then what this build contains (cli/CMakeLists.txt), one item a line.
  std::string version = std::string("stagecraft ") + STAGECRAFT_VERSION;
  for (const char c : std::string_view("|" STAGECRAFT_CONTENTS)) version += c == '|' ? std::string("\n  ") : std::string(1, c);
  app.set_version_flag("--version", version);
  app.require_subcommand(1);
  std::vector<Subcommand> commands = {add_info(app), add_program(app), add_simulate(app), add_run(app), add_eval(app), add_demo(app),
                                      add_search(app), add_sweep(app), add_results(app), add_export(app),
                                      add_compare(app), add_calibrate(app), add_probe(app)};

  // A first word that names no command ("stagecraft explore") is said so, with the list.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::string names;
    bool known = false;
    for (const Subcommand& c : commands) {
      known = known || c.app->get_name() == word;
      names += (names.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!known) {
      std::cerr << "stagecraft: unknown command \"" << word.substr(0, 40) << "\" (commands: " << names << ")\n";
      return kBadInput;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kBadInput;
  }

  try {
    for (const Subcommand& c : commands) {
      if (!c.app->parsed()) continue;
      if (hand_off) {
        if (const std::optional<int> rc = hand_off(*c.app)) return *rc;
      }
      const int rc = c.run();
      if (!flush_stdout()) return kBadInput;
      return rc;
    }
  } catch (const stagecraft::spec::SpecError& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kBadInput;
  } catch (const stagecraft::planner::ThreadStartError& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kImpossible;
  } catch (const stagecraft::planner::StoreError& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::bad_alloc&) {
    // not a bug: the request needs more memory than this host gave (exit 1, as any request that
    // cannot be met); the commands size what they can before starting (docs/reliability.md)
    std::cerr << "stagecraft: error: out of memory: this request needs more memory than the host could give; "
                 "ask for less (fewer GPUs traced, a smaller search with --tp/--pp/--zero), or use a larger host\n";
    return kImpossible;
  } catch (const std::exception& e) {
    std::cerr << "stagecraft: internal error: " << e.what() << "\n";
    return 3;
  }
  return kBadInput;
}

}  // namespace stagecraft::cli
