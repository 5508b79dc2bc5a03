#include "core/spec/bundled.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"

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
  if (fs::is_directory(arg, ec)) throw SpecError(arg, "", "is a directory, not a JSON file");
  // A pipe or device is refused by the reader (read_json_file: io::check_input), naming what it is.
  if (fs::exists(arg, ec)) return arg;
  // There, but not to be followed (a symbolic-link loop, a link to nowhere, a folder we may not
  // enter): the system's reason, not "no such file".
  if (fs::is_symlink(fs::symlink_status(arg, ec))) io::check_input(arg, kMaxSpecFileBytes, "a JSON file");
  const bool bare = arg.find('/') == std::string::npos;
  if (bare) {
    fs::path stem = arg;
    if (stem.extension() == ".json") stem.replace_extension();
    fs::path candidate = fs::path(config_dir()) / folder(kind) / (stem.string() + ".json");
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  if (bare && !fs::is_directory(config_dir(), ec)) {
    throw SpecError(arg, "", "no such file, and the bundled configs folder " + config_dir() +
                                 (std::getenv("STAGECRAFT_CONFIG_DIR") ? " (STAGECRAFT_CONFIG_DIR)" : "") + " does not exist");
  }
  std::string names;
  for (const std::string& n : bundled_names(kind)) names += (names.empty() ? "" : ", ") + n;
  throw SpecError(arg, "", std::string("no such file") +
                               (bare ? std::string(", and no bundled ") + folder(kind) + " config of that name" : "") +
                               (names.empty() ? "" : " (bundled: " + names + ")"));
}

}  // namespace stagecraft::spec
