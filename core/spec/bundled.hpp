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

}  // namespace stagecraft::spec
