#include "core/spec/overrides.hpp"

#include <algorithm>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"

namespace stagecraft::spec {

std::string Override::key() const {
  std::string k = target;
  for (const std::string& p : path) k += "." + p;
  return k;
}

std::string Override::pointer() const {
  std::string p;
  for (const std::string& s : path) p += "/" + s;
  return p;
}

nlohmann::json parse_value(const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return text;
  }
}

Override parse_override(const std::string& arg) {
  const std::size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    throw SpecError("--set", "", "expected KEY=VALUE (e.g. cluster.inter_node.nic_bandwidth_Bps=25e9), got \"" + arg + "\"");
  }
  Override o;
  o.text = arg;
  const std::string key = arg.substr(0, eq);
  std::size_t start = 0;
  std::vector<std::string> parts;
  while (true) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const std::string& p : parts) {
    if (p.empty()) throw SpecError("--set", "", "\"" + key + "\" has an empty name between dots");
  }
  if (parts.size() < 2 || (parts[0] != "cluster" && parts[0] != "training")) {
    throw SpecError("--set", "", "expected a key starting cluster. or training. (e.g. cluster.nodes), got \"" + key + "\"");
  }
  o.target = parts[0];
  o.path.assign(parts.begin() + 1, parts.end());
  o.value = parse_value(arg.substr(eq + 1));
  return o;
}

std::vector<Override> parse_overrides(const std::vector<std::string>& args) {
  std::vector<Override> out;
  for (const std::string& a : args) out.push_back(parse_override(a));
  return out;
}

Override with_value(const Override& o, const nlohmann::json& value) {
  Override out = o;
  out.value = value;
  out.text = o.key() + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  return out;
}

void apply_overrides(nlohmann::json& j, const std::vector<Override>& overrides, const std::string& target,
                     const std::string& file) {
  std::string edits;
  for (const Override& o : overrides) {
    if (o.target != target) continue;
    nlohmann::json* at = &j;
    std::string pointer;
    for (std::size_t i = 0; i + 1 < o.path.size(); ++i) {
      pointer += "/" + o.path[i];
      if (!at->is_object() || !at->contains(o.path[i]) || !(*at)[o.path[i]].is_object()) {
        throw SpecError(file, pointer, "--set " + o.text + ": the file has no object here to set " + o.path.back() + " in");
      }
      at = &(*at)[o.path[i]];
    }
    if (!at->is_object()) throw SpecError(file, pointer, "--set " + o.text + ": not an object");
    (*at)[o.path.back()] = o.value;
    edits += (edits.empty() ? "" : ", ") + std::string("--set ") + o.text.substr(o.target.size() + 1);
  }
  if (!edits.empty() && j.is_object()) {
    const std::string before = j.contains("source") && j["source"].is_string() ? j["source"].get<std::string>() : "";
    j["source"] = before + (before.empty() ? "" : "; ") + "what-if: " + edits;
  }
}

namespace {

std::string label(const std::string& path, const std::vector<Override>& overrides, const std::string& target) {
  std::string sets;
  for (const Override& o : overrides) {
    if (o.target == target) sets += " --set " + o.text;
  }
  return sets.empty() ? path : path + " (with" + sets + ")";
}

// The file read, the target's overrides applied, then its loader; the spec keeps the path.
template <typename Spec>
Spec load_with(const std::string& path, const std::vector<Override>& overrides, const std::string& target,
               Spec (*from_json)(const nlohmann::json&, const std::string&)) {
  nlohmann::json j = read_json_file(path);
  const std::string file = label(path, overrides, target);
  apply_overrides(j, overrides, target, file);
  Spec s = from_json(j, file);
  s.file = path;
  return s;
}

}  // namespace

Cluster load_cluster(const std::string& path, const std::vector<Override>& overrides) {
  return load_with<Cluster>(path, overrides, "cluster", &cluster_from_json);
}

Training load_training(const std::string& path, const std::vector<Override>& overrides) {
  return load_with<Training>(path, overrides, "training", &training_from_json);
}

Training with_overrides(const Training& t, const std::vector<Override>& overrides) {
  if (std::none_of(overrides.begin(), overrides.end(), [](const Override& o) { return o.target == "training"; })) return t;
  nlohmann::json j = to_json(t);
  const std::string file = label(t.file, overrides, "training");
  apply_overrides(j, overrides, "training", file);
  Training out = training_from_json(j, file);
  out.file = t.file;
  return out;
}

}  // namespace stagecraft::spec
