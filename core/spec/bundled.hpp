// Finds config files: a path that exists is used as is; otherwise a bare name ("gpt3-175b") is
// looked up among the bundled configs (configs/<kind>/<name>.json). The bundled directory is
// $STAGECRAFT_CONFIG_DIR if set, else the source tree's configs/ recorded at build time.
#pragma once

#include <string>
#include <vector>

namespace stagecraft::spec {

enum class ConfigKind { kModel, kCluster, kTraining, kPlan };

std::string config_dir();
// Resolves `arg` to a readable file, or throws SpecError listing the bundled names of that kind.
std::string resolve_config(ConfigKind kind, const std::string& arg);
// Names (file stems) of the bundled configs of one kind, sorted.
std::vector<std::string> bundled_names(ConfigKind kind);

// The bundled demo case (`stagecraft demo`, `stagecraft-gui --demo`): GPT-3 13B on 8 DGX-H100 nodes
// over NDR InfiniBand, global batch 1024, compared with a hand-written plan.
struct DemoCase {
  const char* model;
  const char* cluster;
  const char* training;
  const char* plan;
  long long nodes;
};
inline constexpr DemoCase kDemoCase = {"gpt3-13b", "dgx-h100-ndr", "demo-13b-1024", "demo-13b", 8};

}  // namespace stagecraft::spec
