#include "cli/app.hpp"

#include <iostream>
#include <vector>

#include "cli/common.hpp"
#include "core/spec/error.hpp"
#include "planner/store.hpp"

namespace stagecraft::cli {

int run_cli(int argc, char** argv, const HandOff& hand_off) {
  CLI::App app{"Stagecraft: plan, simulate and run pipeline + ZeRO training of large language models"};
  app.set_version_flag("--version", std::string("stagecraft ") + STAGECRAFT_VERSION);
  app.require_subcommand(1);
  std::vector<Subcommand> commands = {add_info(app), add_program(app), add_simulate(app), add_run(app), add_demo(app),
                                      add_search(app), add_results(app), add_export(app),
                                      add_compare(app), add_calibrate(app), add_probe(app)};

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
      return c.run();
    }
  } catch (const stagecraft::spec::SpecError& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kBadInput;
  } catch (const stagecraft::planner::StoreError& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::exception& e) {
    std::cerr << "stagecraft: internal error: " << e.what() << "\n";
    return 3;
  }
  return kBadInput;
}

}  // namespace stagecraft::cli
