#include "traces/program_context.hpp"

#include "core/program/fingerprint.hpp"
#include "core/program/lower.hpp"
#include "core/spec/error.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"

namespace stagecraft::traces {

using program::Instr;

namespace {

// Runs f; a SpecError from a header object is re-thrown against the trace file, its pointer
// prefixed with where the object sits in the trace.
template <typename F>
auto in_header(const std::string& file, const std::string& prefix, F&& f) {
  try {
    return f();
  } catch (const spec::SpecError& e) {
    throw spec::SpecError(file, prefix + e.pointer(), e.detail());
  }
}

const nlohmann::json& header_object(const Trace& t, const nlohmann::json& j, const char* key) {
  if (!j.is_object() || j.empty()) {
    throw spec::SpecError(t.files.at(0), std::string("/stagecraft/") + key,
                          "missing: comparing or calibrating by instruction needs the " + std::string(key) +
                              " the trace ran (SCHEMAS.md \"Trace\")");
  }
  return j;
}

ProgramContext lower_with(const Trace& t, const spec::Model& m, const spec::Plan& p, spec::Training tr) {
  ProgramContext pc;
  pc.training = tr;
  pc.program = in_header(t.files.at(0), "/stagecraft/plan", [&] { return program::lower(m, tr, p); });
  return pc;
}

// The Program lowered from the header must be the one the trace names.
void check_fingerprint(const Trace& t, const ProgramContext& pc) {
  const std::string& file = t.files.at(0);
  const trace::ProgramIdentity& named = t.data.program;
  if (named.fingerprint.empty()) {
    throw spec::SpecError(file, "/stagecraft/program",
                          "missing: the trace does not name the Program it ran (fingerprint); write it again with this "
                          "Stagecraft (simulate --trace, run --trace)");
  }
  const std::string lowered = program::fingerprint(pc.program);
  if (lowered != named.fingerprint) {
    throw spec::SpecError(file, "/stagecraft/program/fingerprint",
                          "expected " + lowered + ", the fingerprint of the Program lowered from the trace's model, plan and " +
                              pc.training_origin + " training, got " + named.fingerprint +
                              ": the trace ran another Program (an edited header, another training or another "
                              "Stagecraft's lowering)");
  }
}

}  // namespace

const Instr* ProgramContext::find(int64_t rank, int32_t instr) const {
  if (rank < 0 || rank >= program.placement.world()) return nullptr;
  const program::RoleProgram& role = program.role_of(rank);
  const int64_t k = static_cast<int64_t>(instr) - role.first_id;
  if (k < 0 || k >= static_cast<int64_t>(role.instrs.size())) return nullptr;
  return &role.instrs[static_cast<std::size_t>(k)];
}

ProgramContext program_of(const Trace& t, const std::optional<spec::Training>& training) {
  if (t.kernel_level()) {
    throw spec::SpecError(t.files.at(0), "", std::string("a ") + to_string(t.format) +
                                                 " trace has no Program instruction ids; expected a Stagecraft trace");
  }
  const std::string& file = t.files.at(0);
  const nlohmann::json& mj = header_object(t, t.data.model, "model");
  const nlohmann::json& pj = header_object(t, t.data.plan, "plan");
  const spec::Model m = in_header(file, "/stagecraft/model", [&] { return spec::model_from_json(mj, file); });
  const spec::Plan p = in_header(file, "/stagecraft/plan", [&] { return spec::plan_from_json(pj, file); });
  ProgramContext pc;
  if (training) {
    pc = lower_with(t, m, p, *training);
    pc.training_origin = "--training " + training->file;
  } else {
    const nlohmann::json& tj = header_object(t, t.data.training, "training");
    const spec::Training tr = in_header(file, "/stagecraft/training", [&] { return spec::training_from_json(tj, file); });
    pc = lower_with(t, m, p, tr);
    pc.training_origin = "trace header";
  }
  check_fingerprint(t, pc);
  check_events(t, pc);
  return pc;
}

void check_events(const Trace& t, const ProgramContext& pc) {
  for (std::size_t i = 0; i < t.data.events.size(); ++i) {
    const trace::Event& e = t.data.events[i];
    const std::string at = t.event_pointer(i);
    if (e.rank < 0 || e.rank >= pc.world()) {
      throw spec::SpecError(t.files.at(0), at + "/pid",
                            "rank " + std::to_string(e.rank) + " is outside the plan's " + std::to_string(pc.world()) +
                                " ranks: the trace does not match its plan");
    }
    const Instr* in = pc.find(e.rank, e.instr);
    if (!in || in->op != e.op) {
      const std::string what = in ? std::string("is ") + program::to_string(in->op) : std::string("does not exist");
      throw spec::SpecError(t.files.at(0), at + "/args/instr",
                            "instruction " + std::to_string(e.instr) + " on rank " + std::to_string(e.rank) + " " + what +
                                " in the Program lowered from the trace's plan, but the event is " +
                                program::to_string(e.op) + ": the trace does not match its plan");
    }
  }
}

}  // namespace stagecraft::traces
