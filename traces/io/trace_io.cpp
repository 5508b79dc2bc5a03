#include "traces/io/trace_io.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "traces/io/kineto.hpp"

namespace stagecraft::traces {

using nlohmann::json;

const char* to_string(Format f) {
  switch (f) {
    case Format::kStagecraft: return "stagecraft";
    case Format::kKineto: return "kineto";
    case Format::kAutograd: return "autograd-profiler";
  }
  return "?";
}

const char* to_string(KernelClass c) {
  switch (c) {
    case KernelClass::kCompute: return "compute";
    case KernelClass::kCommunication: return "communication";
    case KernelClass::kMemory: return "memory";
  }
  return "?";
}

namespace {

std::string pointer(const Origin& o, Format f) {
  std::string at = f == Format::kAutograd ? "/" : "/traceEvents/";  // appended: see kineto.cpp at_of
  at += std::to_string(o.index);
  return at;
}

// The JSON array indices of the "X" events, in order: core's reader keeps exactly these.
std::vector<int64_t> x_event_indices(const json& j) {
  std::vector<int64_t> out;
  const json& events = j.at("traceEvents");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (e.is_object() && e.contains("ph") && e["ph"] == "X") out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

void shift_to_zero(Trace& t) {
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const Kernel& k : t.kernels) origin = std::min(origin, k.start_ns);
  for (const StepSpan& s : t.steps) origin = std::min(origin, s.start_ns);
  if (origin == std::numeric_limits<int64_t>::max()) return;
  for (Kernel& k : t.kernels) {
    k.start_ns -= origin;
    k.end_ns -= origin;
  }
  for (StepSpan& s : t.steps) {
    s.start_ns -= origin;
    s.end_ns -= origin;
  }
}

Trace read_imported(const std::vector<std::string>& paths, const std::vector<json>& docs, Format format) {
  Trace t;
  t.format = format;
  t.files = paths;
  t.data.source = "measured";
  std::set<int64_t> seen;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const int32_t index = static_cast<int32_t>(i);
    const int64_t rank = format == Format::kKineto
                             ? append_kineto(docs[i], paths[i], index, static_cast<int64_t>(i), t)
                             : append_autograd(docs[i], paths[i], index, static_cast<int64_t>(i), t);
    if (!seen.insert(rank).second) {
      throw spec::SpecError(paths[i], format == Format::kKineto ? "/distributedInfo/rank" : "",
                            "rank " + std::to_string(rank) + " appears in two files (give one file per rank)");
    }
  }
  shift_to_zero(t);
  return t;
}

}  // namespace

std::string Trace::event_pointer(std::size_t i) const {
  return i < event_origin.size() ? pointer(event_origin[i], format) : "(event " + std::to_string(i) + ")";
}
std::string Trace::kernel_pointer(std::size_t i) const {
  return i < kernel_origin.size() ? pointer(kernel_origin[i], format) : "(kernel " + std::to_string(i) + ")";
}

const std::string& Trace::event_file(std::size_t i) const {
  static const std::string in_memory = "<in memory>";
  if (i >= event_origin.size() || static_cast<std::size_t>(event_origin[i].file) >= files.size()) return in_memory;
  return files[static_cast<std::size_t>(event_origin[i].file)];
}

const std::string& Trace::kernel_file(std::size_t i) const {
  static const std::string in_memory = "<in memory>";
  if (i >= kernel_origin.size() || static_cast<std::size_t>(kernel_origin[i].file) >= files.size()) return in_memory;
  return files[static_cast<std::size_t>(kernel_origin[i].file)];
}

// What from_stagecraft_json(to_chrome_json(data)) gives, without the document in between (about
// 1 KB per event: 10 GB for the 64-GPU demo plan's --full trace drawn by simulate --png).
Trace from_core(const trace::Trace& data, const std::string& name, const json& extra_meta) {
  Trace t;
  t.format = Format::kStagecraft;
  t.files = {name};
  t.data = data;
  t.meta = trace::header_json(data);
  for (const auto& [key, value] : extra_meta.items()) t.meta[key] = value;
  const int64_t first = trace::metadata_event_count(data);  // the file's events: names, instructions, memory
  t.event_origin.reserve(data.events.size());
  for (std::size_t i = 0; i < data.events.size(); ++i) t.event_origin.push_back({0, first + static_cast<int64_t>(i)});
  t.event_step = occurrence_steps(t.data.events);
  return t;
}

std::vector<int64_t> Trace::ranks() const {
  std::set<int64_t> r;
  for (const trace::Event& e : data.events) r.insert(e.rank);
  for (const Kernel& k : kernels) r.insert(k.rank);
  return {r.begin(), r.end()};
}

int32_t Trace::step_count() const {
  std::set<int32_t> s;
  for (int32_t step : event_step) s.insert(step);
  for (const Kernel& k : kernels) {
    if (k.step >= 0) s.insert(k.step);
  }
  return static_cast<int32_t>(s.size());
}

json read_json(const std::string& path) { return spec::read_json_file(path, spec::kMaxTraceFileBytes); }

Format detect_format(const json& j, const std::string& file) {
  if (j.is_array()) return Format::kAutograd;
  if (!j.is_object() || !j.contains("traceEvents")) {
    throw spec::SpecError(file, "", "expected a Chrome trace: an object with \"traceEvents\" (Stagecraft, Kineto) or an "
                                    "array of events (autograd profiler), got " + spec::describe(j));
  }
  if (!j["traceEvents"].is_array()) throw spec::SpecError(file, "/traceEvents", "expected an array of trace events");
  if (j.contains("stagecraft")) return Format::kStagecraft;
  return Format::kKineto;
}

std::vector<int32_t> occurrence_steps(const std::vector<trace::Event>& events) {
  std::vector<std::size_t> order(events.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return events[a].start_ns < events[b].start_ns; });
  std::map<std::pair<int64_t, int32_t>, int32_t> seen;
  std::vector<int32_t> step(events.size(), 0);
  for (std::size_t i : order) step[i] = seen[{events[i].rank, events[i].instr}]++;
  return step;
}

Trace from_stagecraft_json(const json& j, const std::string& file) {
  Trace t;
  t.format = Format::kStagecraft;
  t.files = {file};
  t.data = trace::from_chrome_json(j, file);
  t.meta = j.at("stagecraft");
  const std::vector<int64_t> indices = x_event_indices(j);
  for (int64_t index : indices) t.event_origin.push_back({0, index});
  t.event_step = occurrence_steps(t.data.events);
  return t;
}

Trace read_trace_files(const std::vector<std::string>& paths) {
  if (paths.empty()) throw spec::SpecError("", "", "no trace files given");
  std::vector<json> docs;
  std::vector<Format> formats;
  for (const std::string& p : paths) {
    docs.push_back(read_json(p));
    formats.push_back(detect_format(docs.back(), p));
  }
  for (std::size_t i = 1; i < paths.size(); ++i) {
    if (formats[i] != formats[0]) {
      throw spec::SpecError(paths[i], "", std::string("expected a ") + to_string(formats[0]) + " trace like " + paths[0] +
                                              ", got a " + to_string(formats[i]) + " trace");
    }
  }
  if (formats[0] == Format::kStagecraft) {
    if (paths.size() > 1) {
      throw spec::SpecError(paths[1], "", "expected one Stagecraft trace (it holds every rank); got " +
                                              std::to_string(paths.size()) + " files");
    }
    return from_stagecraft_json(docs[0], paths[0]);
  }
  return read_imported(paths, docs, formats[0]);
}

json to_stagecraft_json(const Trace& t) {
  json j = trace::to_chrome_json(t.data);
  for (const auto& [key, value] : t.meta.items()) {
    if (!j["stagecraft"].contains(key)) j["stagecraft"][key] = value;
  }
  return j;
}

void write_stagecraft(const Trace& t, const std::string& path) {
  io::write_file(path, to_stagecraft_json(t).dump() + "\n");
}

}  // namespace stagecraft::traces
