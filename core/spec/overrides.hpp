// What-if overrides of cluster and training fields (`--set KEY=VALUE` on simulate, search and
// sweep; the GUI's what-if panel): KEY is "cluster." or "training." and a dotted path into that
// file's JSON (cluster.inter_node.nic_bandwidth_Bps, cluster.nodes, training.global_batch), VALUE
// a JSON value (25e9, true, "fa3") or, when it does not parse as JSON, a string (200Gbps, which the
// loader reads as a bandwidth). The overrides are applied to the file's JSON and then the file's
// own loader reads it, so every value is validated as if it had been in the file: an error names
// the file, the --set that changed it and the field's JSON pointer. The object that holds the
// field must exist in the file (so a misspelt path is an error, not a silently added key); the
// loader's unknown-key check catches a misspelt last name. The profile's "source" records each
// edit ("what-if: --set inter_node.nic_bandwidth_Bps=25e9").
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/cluster.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::spec {

struct Override {
  std::string target;                 // "cluster" | "training"
  std::vector<std::string> path;      // below the target, e.g. {"inter_node", "nic_bandwidth_Bps"}
  nlohmann::json value;
  std::string text;                   // as given: "cluster.inter_node.nic_bandwidth_Bps=25e9"

  std::string key() const;            // "cluster.inter_node.nic_bandwidth_Bps"
  std::string pointer() const;        // "/inter_node/nic_bandwidth_Bps"
};

// Parses one KEY=VALUE; a SpecError naming --set otherwise.
Override parse_override(const std::string& arg);
std::vector<Override> parse_overrides(const std::vector<std::string>& args);
// The same key with another value (a sweep's points).
Override with_value(const Override& o, const nlohmann::json& value);
// A value as a sweep point reads it: JSON when it parses, else the text as a string.
nlohmann::json parse_value(const std::string& text);

// Applies the overrides for `target` to `j` (a file's JSON). SpecError naming the file and --set
// when a path's parent is missing or not an object.
void apply_overrides(nlohmann::json& j, const std::vector<Override>& overrides, const std::string& target,
                     const std::string& file);

// The file (bundled name resolved by the caller) read with the overrides applied.
Cluster load_cluster(const std::string& path, const std::vector<Override>& overrides);
Training load_training(const std::string& path, const std::vector<Override>& overrides);
// A training made without a file of its own (a DeepSpeed config's) with the "training." overrides
// applied the same way: its JSON (to_json), the overrides, its loader; errors name t.file.
Training with_overrides(const Training& t, const std::vector<Override>& overrides);

}  // namespace stagecraft::spec
