#include "traces/program_context.hpp"

#include <map>

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

// How many of the trace's communication events carry the bytes `prog` gives their instruction.
std::pair<int64_t, int64_t> matching_bytes(const Trace& t, const program::Program& prog) {
  int64_t with_bytes = 0, matching = 0;
  for (const trace::Event& e : t.data.events) {
    if (e.bytes <= 0 || program::is_compute(e.op) || e.rank < 0 || e.rank >= prog.placement.world()) continue;
    const auto& role = prog.role_of(e.rank);
    const int64_t k = e.instr - role.first_id;
    if (k < 0 || k >= static_cast<int64_t>(role.instrs.size())) continue;
    ++with_bytes;
    matching += role.instrs[static_cast<std::size_t>(k)].bytes == e.bytes;
  }
  return {with_bytes, matching};
}

ProgramContext lower_with(const Trace& t, const spec::Model& m, const spec::Plan& p, spec::Training tr) {
  ProgramContext pc;
  pc.training = tr;
  pc.program = in_header(t.files.at(0), "/stagecraft/plan", [&] { return program::lower(m, tr, p); });
  return pc;
}

ProgramContext infer_training(const Trace& t, const spec::Model& m, const spec::Plan& p) {
  spec::Training tr;
  tr.global_batch = p.micro_batch * p.micro_batches * p.dp;
  tr.optimizer = spec::Optimizer::kAdam;
  std::map<spec::Dtype, ProgramContext> lowered;
  int64_t best = -1, with_bytes = 0;
  std::vector<spec::Dtype> matches;
  for (spec::Dtype d : {spec::Dtype::kFp32, spec::Dtype::kBf16, spec::Dtype::kFp16}) {
    tr.dtype = d;
    ProgramContext pc = lower_with(t, m, p, tr);
    const auto [n, hits] = matching_bytes(t, pc.program);
    with_bytes = n;
    if (hits > best) {
      best = hits;
      matches = {d};
    } else if (hits == best) {
      matches.push_back(d);
    }
    lowered.emplace(d, std::move(pc));
  }
  if (with_bytes == 0 || 2 * best <= with_bytes) {
    throw spec::SpecError(t.files.at(0), "/stagecraft",
                          "cannot tell the training dtype: " + std::string(with_bytes == 0
                              ? "no communication event carries bytes"
                              : "the events' message sizes match no lowering of this plan (fp32, bf16, fp16)") +
                              "; pass --training");
  }
  ProgramContext pc = std::move(lowered.at(matches.front()));
  pc.dtypes = matches;
  pc.training_origin = std::string("inferred: ") + spec::to_string(matches.front()) + " from " + std::to_string(best) +
                       " of " + std::to_string(with_bytes) + " message sizes, global batch " +
                       std::to_string(tr.global_batch);
  return pc;
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
    pc.dtypes = {training->dtype};
  } else if (t.meta.contains("training")) {
    const spec::Training tr =
        in_header(file, "/stagecraft/training", [&] { return spec::training_from_json(t.meta["training"], file); });
    pc = lower_with(t, m, p, tr);
    pc.training_origin = "trace header";
    pc.dtypes = {tr.dtype};
  } else {
    pc = infer_training(t, m, p);
  }
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
