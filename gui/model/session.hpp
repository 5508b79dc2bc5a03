// Sessions and dropped files (docs/gui.md). A session (`*.stagecraft-session.json`) keeps what a
// view needs to come back: the inputs (names or paths as typed, nodes, top K, threads, results db,
// baseline, what-if --set edits), the checked chips, the selected plan and the measured traces of
// Compare. Opening one restores the inputs and searches again (resuming from the results db when
// it has one), then selects the plan and loads the traces.
// A dropped file is routed by its content, not its name (file_kind).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gui/model/inputs.hpp"

namespace stagecraft::gui {

struct Session {
  Inputs inputs;
  std::vector<AxisChoice> axes;       // the chips as they were (values and checked)
  std::string selected;               // plan key
  std::vector<std::string> measured;  // trace files
};

nlohmann::json to_json(const Session& s);
// Throws spec::SpecError naming the file and the JSON pointer of a bad field.
Session session_from_json(const nlohmann::json& j, const std::string& file);
void write_session(const Session& s, const std::string& path);
Session read_session(const std::string& path);

enum class FileKind { kModel, kCluster, kTraining, kPlan, kDeepSpeed, kTrace, kSession, kResultsDb, kUnknown };
const char* to_string(FileKind k);
// By content: a SQLite header, a session's marker, trace events, a DeepSpeed config's keys, a
// plan's tp/pp/dp, a cluster's gpus_per_node, a training's global_batch, a model (ours or a
// Hugging Face config). Unreadable or other files are kUnknown.
FileKind file_kind(const std::string& path);

}  // namespace stagecraft::gui
