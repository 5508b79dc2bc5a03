// Test plans for the tiny model (configs/models/tiny.json) with training/tiny-cpu (global batch
// 8): a builder over plan.json's fields (so every plan goes through the same validation as a
// file), the single-rank reference plan, and the 4-rank equivalence matrix
// {(pp, dp)} x schedules x ZeRO 0-3 plus variants (overlap, recompute, offload, persistence).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/bundled.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::executor::test {

struct PlanSpec {
  int tp = 1;
  int cp = 1;
  std::string cp_comm = "p2p";        // plan.json cp_comm_type
  int pp = 1, dp = 1, micro_batch = 1, micro_batches = 8;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  int zero = 0;
  int overlap = -1;                   // -1: DeepSpeed's default (true only for stage 3)
  std::string recompute = "none";
  bool offload = false;
  bool keep_gathered = false;
  int64_t persistence = 100;          // elements; DeepSpeed's 1e5 keeps the whole tiny model whole
  int64_t reduce_bucket = 50000;      // below a stage's ~0.1M parameters: several buckets
  bool overlap_p2p = false;           // sends overlap the next compute (else it waits for them)
  bool sequence_parallel = false;
  spec::Framework framework = spec::Framework::kDeepSpeed;  // training.json "framework"
  // hierarchical and quantized ZeRO (plan.json zero.*; 0 / "" / false: unset)
  int shard_group = 0;
  std::string replica_sync{};         // "micro_batch" or "step"; "": the framework's rule
  bool hierarchical_gather = false;
  int hpz_group = 0;
  int local_group = 0;
  bool qwz = false, qgz = false;
  int ep = 1;                         // expert parallelism (a model with experts)
  int etp = 1;                        // expert tensor parallelism
  std::string moe_dispatcher = "alltoall";

  std::string name() const {
    std::string s = (tp > 1 ? "tp" + std::to_string(tp) + "-" : std::string()) +
                    (cp > 1 ? "cp" + std::to_string(cp) + "-" + cp_comm + "-" : std::string()) + "pp" + std::to_string(pp) +
                    "-dp" + std::to_string(dp) + "-" + schedule;
    if (virtual_stages > 1) s += "-v" + std::to_string(virtual_stages);
    if (ep > 1) s += "-ep" + std::to_string(ep);
    if (etp > 1) s += "-etp" + std::to_string(etp);
    if (moe_dispatcher != "alltoall") s += "-" + moe_dispatcher;
    s += "-zero" + std::to_string(zero);
    if (overlap >= 0) s += overlap ? "-overlap" : "-no-overlap";
    if (recompute != "none") s += "-recompute-" + recompute;
    if (offload) s += "-offload";
    if (keep_gathered) s += "-keep-gathered";
    if (persistence != 100) s += "-persist" + std::to_string(persistence);
    if (overlap_p2p) s += "-p2p-overlap";
    if (sequence_parallel) s += "-sp";
    if (framework != spec::Framework::kDeepSpeed) s += std::string("-") + spec::to_string(framework);
    if (shard_group > 0) s += "-shard" + std::to_string(shard_group);
    if (!replica_sync.empty()) s += "-sync-" + replica_sync;
    if (hierarchical_gather) s += "-hgather";
    if (hpz_group > 0) s += "-hpz" + std::to_string(hpz_group);
    if (local_group > 0) s += "-local" + std::to_string(local_group);
    if (qwz) s += "-qwz";
    if (qgz) s += "-qgz";
    return s;
  }
};

inline spec::Model tiny_model() { return spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny")); }
inline spec::Training tiny_training(spec::Framework framework = spec::Framework::kDeepSpeed) {
  spec::Training t = spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, "tiny-cpu"));
  t.framework = framework;
  return t;
}

inline spec::Plan make_plan(const PlanSpec& s) {
  nlohmann::json zero = {{"stage", s.zero},
                         {"prefetch_bucket", 20000},
                         {"reduce_bucket", s.reduce_bucket},
                         {"allgather_bucket", 50000},
                         {"max_live_parameters", 100000},
                         {"max_reuse_distance", 50000},
                         {"param_persistence_threshold", s.persistence},
                         {"offload_optimizer", s.offload ? "cpu" : "none"},
                         {"keep_gathered_across_microbatches", s.keep_gathered}};
  if (s.overlap >= 0) zero["overlap_comm"] = s.overlap == 1;
  if (s.shard_group > 0) zero["shard_group"] = s.shard_group;
  if (!s.replica_sync.empty()) zero["replica_sync"] = s.replica_sync;
  if (s.hierarchical_gather) zero["hierarchical_gather"] = true;
  if (s.hpz_group > 0) zero["hpz_group"] = s.hpz_group;
  if (s.local_group > 0) zero["local_group"] = s.local_group;
  if (s.qwz) zero["quantized_weights"] = true;
  if (s.qgz) zero["quantized_gradients"] = true;
  nlohmann::json j = {{"tp", s.tp},
                            {"cp", s.cp},
                            {"cp_comm_type", s.cp_comm},
                            {"pp", s.pp},
                            {"dp", s.dp},
                            {"micro_batch", s.micro_batch},
                            {"micro_batches", s.micro_batches},
                            {"schedule", s.schedule},
                            {"virtual_stages", s.virtual_stages},
                            {"recompute", s.recompute},
                            {"overlap_p2p", s.overlap_p2p},
                            {"sequence_parallel", s.sequence_parallel},
                            {"zero", zero}};
  if (s.ep > 1) j["ep"] = s.ep;
  if (s.etp > 1) j["etp"] = s.etp;
  if (s.moe_dispatcher != "alltoall") j["moe_dispatcher"] = s.moe_dispatcher;
  return spec::plan_from_json(j, "<test plan " + s.name() + ">");
}

// One rank, the whole global batch as 8 micro-batches of one sequence, plain data flow.
inline PlanSpec reference_plan() { return PlanSpec{}; }

// The LLaMA family at the tiny model's sizes (SwiGLU, RMSNorm, RoPE, no biases, untied head) with
// grouped-query attention, 4 query heads on 2 K/V heads: what tp 2 must split by heads.
inline spec::Model tiny_llama_model() {
  spec::Model m = tiny_model();
  m.name = "tiny-llama-gqa";
  m.kv_heads = 2, m.ffn_hidden = 128;
  m.mlp = spec::Mlp::kSwiglu, m.norm = spec::Norm::kRmsNorm, m.position = spec::Position::kRope;
  m.tied_embeddings = false, m.set_biases(false);
  return m;
}

// The 4-rank tensor-parallel plans: tp 2 with dp 2 (ZeRO 0-3) and with pp 2 (every schedule),
// tp 4 alone, and variants (recompute, zero-bubble, overlap, offload, persistence).
inline std::vector<PlanSpec> tensor_parallel_matrix() {
  std::vector<PlanSpec> out;
  for (int zero = 0; zero <= 3; ++zero) out.push_back({.tp = 2, .dp = 2, .micro_batches = 4, .zero = zero});
  for (const auto& [schedule, v] : std::vector<std::pair<std::string, int>>{{"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}, {"zb-h1", 1}}) {
    out.push_back({.tp = 2, .pp = 2, .micro_batches = 8, .schedule = schedule, .virtual_stages = v});
  }
  out.push_back({.tp = 4, .micro_batches = 8});
  out.push_back({.tp = 4, .micro_batch = 2, .micro_batches = 4, .zero = 1});
  out.push_back({.tp = 2, .pp = 2, .micro_batches = 8, .zero = 1, .recompute = "full"});
  out.push_back({.tp = 2, .pp = 2, .micro_batch = 2, .micro_batches = 4, .schedule = "zb-h1", .zero = 2, .overlap_p2p = true});
  out.push_back({.tp = 2, .dp = 2, .micro_batches = 4, .zero = 3, .recompute = "full"});
  out.push_back({.tp = 2, .dp = 2, .micro_batches = 4, .zero = 2, .overlap = 1});
  out.push_back({.tp = 2, .dp = 2, .micro_batches = 4, .zero = 1, .offload = true});
  out.push_back({.tp = 2, .dp = 2, .micro_batches = 4, .zero = 3, .persistence = 100000});
  // sequence parallelism: every entry above again with it
  const std::size_t n = out.size();
  for (std::size_t k = 0; k < n; ++k) {
    PlanSpec p = out[k];
    p.sequence_parallel = true;
    out.push_back(p);
  }
  out.push_back({.tp = 2, .pp = 2, .micro_batch = 2, .micro_batches = 4, .recompute = "selective", .sequence_parallel = true});
  // ZeRO-3 gathering the norms' tensors too (nothing persistent; FSDP never keeps a tensor whole):
  // their backward runs after the tp collective, on gathered parameters
  out.push_back({.tp = 2, .dp = 2, .micro_batches = 4, .zero = 3, .persistence = 0});
  out.push_back({.tp = 2, .dp = 2, .micro_batches = 4, .zero = 3, .framework = spec::Framework::kFsdp});
  return out;
}

// Every 4-rank plan the equivalence test runs.
inline std::vector<PlanSpec> equivalence_matrix() {
  std::vector<PlanSpec> out;
  struct Shape {
    int pp, dp, micro_batch, micro_batches;
    std::vector<std::pair<std::string, int>> schedules;  // (schedule, virtual stages)
  };
  const std::vector<Shape> shapes = {
      {1, 4, 1, 2, {{"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1}}},
      {2, 2, 1, 4, {{"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}, {"zb-h1", 1}}},
      {4, 1, 1, 8, {{"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1}}},  // interleaved needs 8 chunks of >= 1 layer
  };
  for (const Shape& sh : shapes) {
    for (const auto& [schedule, v] : sh.schedules) {
      for (int zero = 0; zero <= 3; ++zero) {
        PlanSpec p;
        p.pp = sh.pp, p.dp = sh.dp, p.micro_batch = sh.micro_batch, p.micro_batches = sh.micro_batches;
        p.schedule = schedule, p.virtual_stages = v, p.zero = zero;
        out.push_back(p);
      }
    }
  }
  auto variant = [&](PlanSpec p) { out.push_back(p); };
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 1, .overlap = 1});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 2, .overlap = 1});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .schedule = "zb-h1", .zero = 2, .overlap = 1});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 3, .overlap = 0});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 0, .overlap = 1, .recompute = "full"});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 3, .recompute = "full"});
  variant({.pp = 1, .dp = 4, .micro_batches = 2, .zero = 3, .recompute = "full"});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 1, .offload = true});
  variant({.pp = 1, .dp = 4, .micro_batches = 2, .zero = 3, .offload = true});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 3, .keep_gathered = true});
  variant({.pp = 1, .dp = 4, .micro_batches = 2, .zero = 3, .persistence = 100000});
  variant({.pp = 4, .dp = 1, .micro_batch = 2, .micro_batches = 4, .schedule = "gpipe", .zero = 2,
           .recompute = "selective"});
  variant({.pp = 2, .dp = 2, .micro_batch = 2, .micro_batches = 2, .schedule = "interleaved",
           .virtual_stages = 2, .zero = 2, .overlap = 1});
  variant({.pp = 4, .dp = 1, .micro_batches = 8, .overlap_p2p = true});
  variant({.pp = 4, .dp = 1, .micro_batches = 8, .schedule = "zb-h1", .zero = 1, .overlap_p2p = true});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .schedule = "interleaved", .virtual_stages = 2, .zero = 3,
           .overlap_p2p = true});
  // the frameworks' collectives per bucket: deepspeed-0.5 gathers and reduces tensor by tensor
  // (several collectives per bucket), FSDP block by block
  variant({.pp = 1, .dp = 4, .micro_batches = 2, .zero = 3, .framework = spec::Framework::kDeepSpeed05});
  variant({.pp = 2, .dp = 2, .micro_batches = 4, .zero = 2, .framework = spec::Framework::kDeepSpeed05});
  variant({.pp = 1, .dp = 4, .micro_batches = 2, .zero = 3, .recompute = "full", .framework = spec::Framework::kFsdp});
  return out;
}

}  // namespace stagecraft::executor::test
