#include "core/program/format.hpp"

#include <sstream>

namespace stagecraft::program {

using nlohmann::json;

namespace {

// A tensor-parallel collective's pass (instruction.hpp's flags), or null for any other instruction.
const char* tp_pass(const Instr& in) {
  if (in.lane != Lane::kTp) return nullptr;
  if (in.flags & kFlagNormGrads) return "norm_grads";
  if (in.flags & kFlagRecompute) return "recompute";
  return (in.flags & kFlagGrad) ? "backward" : "forward";
}

std::string ranks_text(const RoleProgram& role) {
  const auto& r = role.ranks;
  std::ostringstream out;
  if (r.size() > 1 && r.back() - r.front() + 1 == static_cast<int64_t>(r.size())) {
    out << r.front() << "-" << r.back();
  } else {
    for (std::size_t i = 0; i < r.size(); ++i) out << (i ? "," : "") << r[i];
  }
  return out.str();
}

std::vector<const RoleProgram*> selected(const Program& prog, std::optional<int64_t> rank) {
  std::vector<const RoleProgram*> out;
  if (rank) {
    out.push_back(&prog.role_of(*rank));
  } else {
    for (const RoleProgram& r : prog.roles) out.push_back(&r);
  }
  return out;
}

}  // namespace

std::string describe(const Program& prog, const RoleProgram& role, int32_t index) {
  const Instr& in = role.instrs[static_cast<std::size_t>(index)];
  std::ostringstream out;
  out << "#" << role.first_id + index << " " << to_string(in.op);
  if (in.mb >= 0) out << " mb=" << in.mb;
  if (in.chunk >= 0) out << " chunk=" << in.chunk;
  if (in.unit_begin >= 0) out << " units=[" << in.unit_begin << "," << in.unit_end << ")";
  if (in.bucket >= 0) out << " bucket=" << in.bucket;
  if (in.peer_stage >= 0) out << " peer=stage" << in.peer_stage << "/chunk" << in.peer_chunk;
  if (in.group != Group::kNone) out << " group=" << to_string(in.group);
  if (in.bytes > 0) out << " bytes=" << in.bytes;
  if (in.flops > 0) out << " flops=" << in.flops;
  if (in.op == Op::kOptimizerStep || (in.elems > 0 && is_compute(in.op))) out << " elems=" << in.elems;
  if (in.flags & kFlagOnHost) out << " on=host";
  if (in.op == Op::kOffloadCopy) out << ((in.flags & kFlagToHost) ? " to=host" : " to=device");
  if (const char* pass = tp_pass(in)) out << " pass=" << pass;
  (void)prog;
  return out.str();
}

void print_program(std::ostream& out, const Program& prog, std::optional<int64_t> rank) {
  out << "program: " << spec::summary(prog.plan) << ", " << prog.placement.world() << " ranks, "
      << prog.instruction_count() << " instructions in " << prog.roles.size() << " distinct lists\n";
  for (const RoleProgram* role : selected(prog, rank)) {
    out << "ranks " << ranks_text(*role) << " (stage " << role->stage << "): " << role->instrs.size()
        << " instructions\n";
    for (int32_t i = 0; i < static_cast<int32_t>(role->instrs.size()); ++i) {
      const Instr& in = role->instrs[i];
      out << "  " << std::left;
      out.width(10);
      out << to_string(in.lane) << describe(prog, *role, i);
      if (in.dep_count > 0) {
        out << "  after";
        for (int32_t d : role->deps_of(in)) out << " #" << role->first_id + d;
      }
      out << "\n";
    }
  }
}

json to_json(const Program& prog, std::optional<int64_t> rank) {
  json roles = json::array();
  for (const RoleProgram* role : selected(prog, rank)) {
    json instrs = json::array();
    for (int32_t i = 0; i < static_cast<int32_t>(role->instrs.size()); ++i) {
      const Instr& in = role->instrs[i];
      json deps = json::array();
      for (int32_t d : role->deps_of(in)) deps.push_back(role->first_id + d);
      json j = {{"id", role->first_id + i}, {"op", to_string(in.op)}, {"kind", trace_kind(in.op)},
                {"lane", to_string(in.lane)}, {"deps", deps}};
      if (in.mb >= 0) j["mb"] = in.mb;
      if (in.chunk >= 0) j["chunk"] = in.chunk;
      if (in.unit_begin >= 0) j["units"] = {in.unit_begin, in.unit_end};
      if (in.bucket >= 0) j["bucket"] = in.bucket;
      if (in.peer_stage >= 0) j["peer"] = {{"stage", in.peer_stage}, {"chunk", in.peer_chunk}};
      if (in.group != Group::kNone) j["group"] = to_string(in.group);
      if (in.bytes > 0) j["bytes"] = in.bytes;
      if (in.elems > 0) j["elems"] = in.elems;
      if (in.flops > 0) j["flops"] = in.flops;
      if (in.flags & kFlagOnHost) j["on_host"] = true;
      if (in.op == Op::kOffloadCopy) j["to"] = (in.flags & kFlagToHost) ? "host" : "device";
      if (const char* pass = tp_pass(in)) j["pass"] = pass;
      instrs.push_back(std::move(j));
    }
    roles.push_back({{"stage", role->stage}, {"ranks", role->ranks}, {"instructions", std::move(instrs)}});
  }
  auto buckets = [](const std::vector<Bucket>& list) {
    json arr = json::array();
    for (const Bucket& b : list) {
      arr.push_back({{"stage", b.stage}, {"chunk", b.chunk}, {"units", {b.unit_begin, b.unit_end}},
                     {"elems", b.elems}, {"persistent_elems", b.persistent_elems},
                     {"collectives", b.collectives}});
    }
    return arr;
  };
  json chunks = json::array();
  for (const ChunkInfo& c : prog.chunks) {
    chunks.push_back({{"stage", c.stage}, {"chunk", c.chunk}, {"units", {c.unit_begin, c.unit_end}}, {"params", c.params}});
  }
  return {{"plan", spec::to_json(prog.plan)},       {"model", spec::to_json(prog.model)},
          {"world", prog.placement.world()},         {"chunks", chunks},
          {"param_buckets", buckets(prog.param_buckets)}, {"grad_buckets", buckets(prog.grad_buckets)},
          {"roles", roles}};
}

}  // namespace stagecraft::program
