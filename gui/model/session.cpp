#include "gui/model/session.hpp"

#include <fstream>

#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"

namespace stagecraft::gui {

namespace {
constexpr const char* kMarker = "stagecraft_session";
}

nlohmann::json to_json(const Session& s) {
  const Inputs& in = s.inputs;
  nlohmann::json sets = nlohmann::json::array();
  for (const spec::Override& o : in.overrides) sets.push_back(o.text);
  nlohmann::json axes = nlohmann::json::array();
  for (const AxisChoice& a : s.axes) {
    nlohmann::json off = nlohmann::json::array();
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      if (!a.checked[i]) off.push_back(a.values[i]);
    }
    axes.push_back({{"axis", a.axis}, {"unchecked", off}});
  }
  return {{kMarker, 1},
          {"model", in.model},
          {"cluster", in.cluster},
          {"training", in.training},
          {"nodes", in.nodes},
          {"top_k", in.top_k},
          {"threads", in.threads},
          {"db", in.db},
          {"deepspeed", in.deepspeed},
          {"set", sets},
          {"axes", axes},
          {"selected", s.selected},
          {"measured", s.measured}};
}

Session session_from_json(const nlohmann::json& j, const std::string& file) {
  spec::ObjectReader r(j, file, "");
  Session s;
  if (r.integer(kMarker) != 1) throw spec::SpecError(file, std::string("/") + kMarker, "expected session version 1");
  s.inputs.model = r.string("model");
  s.inputs.cluster = r.string("cluster");
  s.inputs.training = r.string("training");
  s.inputs.nodes = r.integer("nodes");
  s.inputs.top_k = r.integer("top_k");
  s.inputs.threads = static_cast<int>(r.integer("threads"));
  s.inputs.db = r.string("db");
  s.inputs.deepspeed = r.string("deepspeed");
  s.selected = r.string("selected");
  const auto strings = [&](const char* key) {
    std::vector<std::string> out;
    if (!j.contains(key) || !j[key].is_array()) throw spec::SpecError(file, std::string("/") + key, "expected an array of strings");
    for (std::size_t i = 0; i < j[key].size(); ++i) {
      if (!j[key][i].is_string()) throw spec::SpecError(file, std::string("/") + key + "/" + std::to_string(i), "expected a string");
      out.push_back(j[key][i].get<std::string>());
    }
    return out;
  };
  (void)r.has("set");
  (void)r.has("axes");
  (void)r.has("measured");
  for (const std::string& t : strings("set")) s.inputs.overrides.push_back(spec::parse_override(t));
  s.measured = strings("measured");
  if (!j.contains("axes") || !j["axes"].is_array()) throw spec::SpecError(file, "/axes", "expected an array");
  for (std::size_t i = 0; i < j["axes"].size(); ++i) {
    const std::string at = "/axes/" + std::to_string(i);
    spec::ObjectReader a(j["axes"][i], file, at);
    AxisChoice c;
    c.axis = a.string("axis");
    (void)a.has("unchecked");
    const nlohmann::json& off = j["axes"][i].value("unchecked", nlohmann::json::array());
    if (!off.is_array()) throw spec::SpecError(file, at + "/unchecked", "expected an array of values");
    for (const nlohmann::json& v : off) {
      if (!v.is_string()) throw spec::SpecError(file, at + "/unchecked", "expected strings");
      c.values.push_back(v.get<std::string>());   // the unchecked values; checked are the rest
      c.checked.push_back(false);
    }
    a.finish();
    s.axes.push_back(std::move(c));
  }
  r.finish();
  return s;
}

void write_session(const Session& s, const std::string& path) { io::write_file(path, to_json(s).dump(2) + "\n"); }

Session read_session(const std::string& path) { return session_from_json(spec::read_json_file(path), path); }

const char* to_string(FileKind k) {
  switch (k) {
    case FileKind::kModel: return "model";
    case FileKind::kCluster: return "cluster";
    case FileKind::kTraining: return "training";
    case FileKind::kPlan: return "plan";
    case FileKind::kDeepSpeed: return "DeepSpeed config";
    case FileKind::kTrace: return "trace";
    case FileKind::kSession: return "session";
    case FileKind::kResultsDb: return "results db";
    case FileKind::kUnknown: break;
  }
  return "unknown";
}

FileKind file_kind(const std::string& path) {
  {
    std::ifstream in(path, std::ios::binary);
    char head[16] = {};
    in.read(head, sizeof head);
    if (in.gcount() == 16 && std::string(head, 15) == "SQLite format 3") return FileKind::kResultsDb;
  }
  nlohmann::json j;
  try {
    j = spec::read_json_file(path, spec::kMaxTraceFileBytes);
  } catch (const std::exception&) {
    return FileKind::kUnknown;
  }
  if (j.is_array()) return FileKind::kTrace;   // the autograd profiler's bare array
  if (!j.is_object()) return FileKind::kUnknown;
  if (j.contains(kMarker)) return FileKind::kSession;
  if (j.contains("traceEvents")) return FileKind::kTrace;
  if (j.contains("train_batch_size") || j.contains("zero_optimization") || j.contains("train_micro_batch_size_per_gpu")) {
    return FileKind::kDeepSpeed;
  }
  if (j.contains("tp") && j.contains("pp") && j.contains("dp")) return FileKind::kPlan;
  if (j.contains("gpus_per_node")) return FileKind::kCluster;
  if (j.contains("global_batch")) return FileKind::kTraining;
  if (j.contains("hidden") || j.contains("model_type") || j.contains("architectures") || j.contains("hidden_size")) return FileKind::kModel;
  return FileKind::kUnknown;
}

}  // namespace stagecraft::gui
