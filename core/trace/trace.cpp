#include "core/trace/trace.hpp"

#include <array>
#include <cmath>
#include <map>

#include "core/io/file.hpp"
#include "core/program/fingerprint.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"

namespace stagecraft::trace {

using nlohmann::json;
using program::Lane;
using program::Op;

namespace {

constexpr std::array<Lane, program::kLaneCount> kLanes = {Lane::kCompute, Lane::kTp,       Lane::kPpSend, Lane::kPpRecv,
                                                          Lane::kDpGather, Lane::kDpReduce, Lane::kOffload,
                                                          Lane::kDpReplica, Lane::kCp,       Lane::kEp};
static_assert(kLanes.back() == Lane::kEp, "every lane listed");

double to_us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }
int64_t to_ns(double us) { return static_cast<int64_t>(std::llround(us * 1000.0)); }

template <typename E, std::size_t N>
std::map<std::string, E> by_name(const std::array<E, N>& values) {
  std::map<std::string, E> out;
  for (E v : values) out[program::to_string(v)] = v;
  return out;
}

std::map<std::string, Op> op_names() {
  std::array<Op, program::kOpCount> ops{};
  for (int i = 0; i < program::kOpCount; ++i) ops[static_cast<std::size_t>(i)] = static_cast<Op>(i);
  return by_name(ops);
}

json event_json(const Event& e) {
  json args = {{"instr", e.instr}, {"kind", program::trace_kind(e.op)}, {"op", program::to_string(e.op)}};
  if (e.mb >= 0) args["mb"] = e.mb;
  if (e.stage >= 0) args["stage"] = e.stage;
  if (e.chunk >= 0) args["chunk"] = e.chunk;
  if (e.bytes > 0) args["bytes"] = e.bytes;
  if (e.flops > 0) args["flops"] = e.flops;
  return {{"ph", "X"},
          {"name", program::to_string(e.op)},
          {"cat", program::trace_kind(e.op)},
          {"pid", e.rank},
          {"tid", static_cast<int>(e.lane)},
          {"ts", to_us(e.start_ns)},
          {"dur", to_us(e.end_ns - e.start_ns)},
          {"args", args}};
}

Event read_event(const json& j, const std::string& file, const std::string& at) {
  static const std::map<std::string, Op> ops = op_names();
  spec::ObjectReader r(j, file, at);
  Event e;
  e.rank = r.integer("pid");
  const int64_t tid = r.integer("tid");
  if (tid < 0 || tid >= program::kLaneCount) r.fail_value("tid", "a lane index 0.." + std::to_string(program::kLaneCount - 1));
  e.lane = kLanes[static_cast<std::size_t>(tid)];
  e.start_ns = trace_us_to_ns(r.number("ts"), false, file, r.pointer_of("ts"));
  e.end_ns = e.start_ns + trace_us_to_ns(r.number("dur"), true, file, r.pointer_of("dur"));
  spec::ObjectReader a = r.object("args");
  const std::string op = a.string("op");
  auto it = ops.find(op);
  if (it == ops.end()) a.fail_value("op", "a Program instruction name (docs/program.md)");
  e.op = it->second;
  e.instr = static_cast<int32_t>(a.integer("instr"));
  a.string("kind");
  e.mb = static_cast<int32_t>(a.integer_or("mb", -1));
  e.stage = static_cast<int32_t>(a.integer_or("stage", -1));
  e.chunk = static_cast<int32_t>(a.integer_or("chunk", -1));
  e.bytes = a.integer_or("bytes", 0);
  e.flops = a.number_or("flops", 0);
  return e;
}

json memory_json(const MemorySample& m) {
  json args = json::object();
  for (MemoryKind k : kMemoryKinds) args[to_string(k)] = m.bytes[k];
  json j = {{"ph", "C"}, {"name", "memory"}, {"pid", m.rank}, {"ts", to_us(m.time_ns)}, {"args", std::move(args)}};
  if (m.instr >= 0) j["instr"] = m.instr;
  return j;
}

MemorySample read_memory(const json& j, const std::string& file, const std::string& at) {
  spec::ObjectReader r(j, file, at);
  MemorySample m;
  m.rank = r.integer("pid");
  m.time_ns = trace_us_to_ns(r.number("ts"), false, file, r.pointer_of("ts"));
  m.instr = static_cast<int32_t>(r.integer_or("instr", -1));
  spec::ObjectReader a = r.object("args");
  for (MemoryKind k : kMemoryKinds) {
    m.bytes[k] = a.integer(to_string(k));
    if (m.bytes[k] < 0) a.fail_value(to_string(k), "bytes >= 0");
  }
  return m;
}

}  // namespace

int64_t trace_us_to_ns(double us, bool duration, const std::string& file, const std::string& pointer) {
  if (duration && !(us >= 0 && us <= 1e12)) {
    throw spec::SpecError(file, pointer, "expected a duration from 0 to 1e12 microseconds, got " + spec::describe(us));
  }
  if (!duration && !(us >= -4e15 && us <= 4e15)) {
    throw spec::SpecError(file, pointer, "expected a timestamp within +-4e15 microseconds, got " + spec::describe(us));
  }
  return to_ns(us);
}

const char* to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kParams: return "params";
    case MemoryKind::kGrads: return "grads";
    case MemoryKind::kOptimizer: return "optimizer";
    case MemoryKind::kActivations: return "activations";
    case MemoryKind::kBuffers: return "buffers";
    case MemoryKind::kReserved: return "reserved";
  }
  return "?";
}

const MemorySample* peak_sample(const std::vector<MemorySample>& samples) {
  const MemorySample* best = nullptr;
  for (const MemorySample& m : samples) {
    if (!best || m.total() > best->total()) best = &m;
  }
  return best;
}

void name_program(Trace& t, const program::Program& prog) {
  t.model = spec::to_json(prog.model);
  t.training = spec::to_json(prog.training);
  t.plan = spec::to_json(prog.plan);
  t.program = {program::fingerprint(prog), static_cast<int64_t>(prog.instruction_count())};
}

json header_json(const Trace& t) {
  json header = {{"source", t.source}, {"plan", t.plan}, {"model", t.model}, {"cluster", t.cluster}};
  if (!t.training.empty()) header["training"] = t.training;
  if (!t.program.fingerprint.empty()) {
    header["program"] = {{"fingerprint", t.program.fingerprint}, {"instructions", t.program.instructions}};
  }
  return header;
}

namespace {

// The ranks named in the file: every rank with an event or a memory sample.
std::map<int64_t, bool> ranks_of(const Trace& t) {
  std::map<int64_t, bool> ranks;
  for (const Event& e : t.events) ranks[e.rank] = true;
  for (const MemorySample& m : t.memory) ranks[m.rank] = true;
  return ranks;
}

// Every trace event in file order, one at a time: the ranks' and lanes' names, the instructions,
// the memory samples.
template <typename F>
void for_each_event(const Trace& t, F&& f) {
  for (const auto& [rank, _] : ranks_of(t)) {
    f(json{{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    for (Lane lane : kLanes) {
      f(json{{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", static_cast<int>(lane)},
             {"args", {{"name", program::to_string(lane)}}}});
    }
  }
  for (const Event& e : t.events) f(event_json(e));
  for (const MemorySample& m : t.memory) f(memory_json(m));
}

}  // namespace

int64_t metadata_event_count(const Trace& t) {
  return static_cast<int64_t>(ranks_of(t).size() * (1 + kLanes.size()));
}

json to_chrome_json(const Trace& t) {
  json events = json::array();
  for_each_event(t, [&](json e) { events.push_back(std::move(e)); });
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"stagecraft", header_json(t)}};
}

Trace from_chrome_json(const json& j, const std::string& file) {
  spec::ObjectReader top(j, file, "");
  spec::ObjectReader meta = top.object("stagecraft");
  Trace t;
  t.source = meta.choice("source", {"simulated", "measured"});
  t.plan = meta.has("plan") ? meta.raw("plan") : json::object();
  t.model = meta.has("model") ? meta.raw("model") : json::object();
  t.cluster = meta.has("cluster") ? meta.raw("cluster") : json::object();
  t.training = meta.has("training") ? meta.raw("training") : json::object();
  if (meta.has("program")) {
    spec::ObjectReader p = meta.object("program");
    t.program.fingerprint = p.string("fingerprint");
    t.program.instructions = p.integer("instructions");
    p.finish();
  }
  const json& events = top.raw("traceEvents");
  if (!events.is_array()) top.fail_value("traceEvents", "an array of trace events");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::string at = "/traceEvents/" + std::to_string(i);
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) {
      throw spec::SpecError(file, at, "expected a trace event object with \"ph\"");
    }
    const std::string ph = e["ph"];
    if (ph == "X") {
      t.events.push_back(read_event(e, file, at));
    } else if (ph == "C" && e.contains("name") && e["name"].is_string() && e["name"].get<std::string>() == "memory") {
      t.memory.push_back(read_memory(e, file, at));
    }
  }
  return t;
}

// Streamed event by event, in to_chrome_json(t).dump()'s bytes (keys in its sorted order): a
// document of every rank's events built in memory first took about 1 KB per event, 10 GB and an
// abort for the 64-GPU demo plan's --full trace; this holds one event and a 1 MiB buffer.
void write_trace(const Trace& t, const std::string& path) {
  io::AtomicFile out(path);
  std::string buf = "{\"displayTimeUnit\":\"ms\",\"stagecraft\":" + header_json(t).dump() + ",\"traceEvents\":[";
  bool first = true;
  for_each_event(t, [&](const json& e) {
    if (!first) buf += ',';
    first = false;
    buf += e.dump();
    if (buf.size() >= (std::size_t{1} << 20)) {
      out.write(buf);
      buf.clear();
    }
  });
  buf += "]}\n";
  out.write(buf);
  out.commit();
}

Trace read_trace(const std::string& path) { return from_chrome_json(spec::read_json_file(path, spec::kMaxTraceFileBytes), path); }

}  // namespace stagecraft::trace
