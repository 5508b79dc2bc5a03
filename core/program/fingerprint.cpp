#include "core/program/fingerprint.hpp"

#include <type_traits>

#include "core/text/hash.hpp"

namespace stagecraft::program {

namespace {

class Hasher {
 public:
  template <typename T>
  void add(const T& v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    h_ = text::fnv1a(&v, sizeof v, h_);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = text::kFnv1aBasis;
};

}  // namespace

std::string fingerprint(const Program& prog) {
  Hasher h;
  h.add(prog.placement.tp);
  h.add(prog.placement.pp);
  h.add(prog.placement.dp);
  if (prog.placement.cp > 1) {  // only then, so the fingerprints of plans without it stay as they were
    h.add(prog.placement.cp);
    h.add(prog.plan.cp_comm);
  }
  h.add(prog.param_bytes);
  h.add(prog.activation_bytes);
  for (const RoleProgram& role : prog.roles) {
    h.add(role.stage);
    h.add(role.first_id);
    for (int64_t r : role.ranks) h.add(r);
    for (const Instr& in : role.instrs) {  // field by field: padding bytes are not part of it
      h.add(in.flops);
      h.add(in.bytes);
      h.add(in.elems);
      h.add(in.mb);
      h.add(in.unit_begin);
      h.add(in.unit_end);
      h.add(in.bucket);
      h.add(in.dep_begin);
      h.add(in.dep_count);
      h.add(in.chunk);
      h.add(in.peer_stage);
      h.add(in.peer_chunk);
      h.add(in.op);
      h.add(in.lane);
      h.add(in.group);
      h.add(in.flags);
    }
    for (int32_t d : role.deps) h.add(d);
  }
  // collectives per bucket, where a framework issues more than one (older Programs hash as before)
  for (const std::vector<Bucket>* list : {&prog.param_buckets, &prog.grad_buckets}) {
    for (const Bucket& b : *list) {
      if (b.collectives > 1) h.add(b.collectives);
    }
  }
  return text::hex16(h.value());
}

}  // namespace stagecraft::program
