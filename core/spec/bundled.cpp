#include "core/spec/bundled.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/spec/error.hpp"

#ifndef STAGECRAFT_CONFIG_DIR
#define STAGECRAFT_CONFIG_DIR "configs"
#endif

namespace stagecraft::spec {

namespace fs = std::filesystem;

namespace {
const char* folder(ConfigKind kind) {
  switch (kind) {
    case ConfigKind::kModel: return "models";
    case ConfigKind::kCluster: return "clusters";
    case ConfigKind::kTraining: return "training";
    case ConfigKind::kPlan: return "plans";
  }
  return "";
}
}  // namespace

std::string config_dir() {
  if (const char* env = std::getenv("STAGECRAFT_CONFIG_DIR"); env && *env) return env;
  return STAGECRAFT_CONFIG_DIR;
}

std::vector<std::string> bundled_names(ConfigKind kind) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(config_dir()) / folder(kind), ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolve_config(ConfigKind kind, const std::string& arg) {
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) return arg;
  const bool bare = arg.find('/') == std::string::npos;
  if (bare) {
    fs::path stem = arg;
    if (stem.extension() == ".json") stem.replace_extension();
    fs::path candidate = fs::path(config_dir()) / folder(kind) / (stem.string() + ".json");
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  std::string names;
  for (const std::string& n : bundled_names(kind)) names += (names.empty() ? "" : ", ") + n;
  throw SpecError(arg, "", std::string("no such file") +
                               (bare ? std::string(", and no bundled ") + folder(kind) + " config of that name" : "") +
                               (names.empty() ? "" : " (bundled: " + names + ")"));
}

}  // namespace stagecraft::spec
