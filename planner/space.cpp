#include "planner/space.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/spec/error.hpp"
#include "core/spec/limits.hpp"
#include "sim/models/work.hpp"

namespace stagecraft::planner {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    out.push_back(d);
    if (d != n / d) out.push_back(n / d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

template <typename T, typename U>
bool allowed(const std::vector<T>& limit, const U& value) {
  return limit.empty() || std::find(limit.begin(), limit.end(), static_cast<T>(value)) != limit.end();
}

std::string join(const std::vector<int64_t>& v) {
  std::string out;
  for (int64_t x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out;
}

bool tp_fits_model(const spec::Model& m, int64_t tp) {
  return m.heads % tp == 0 && m.ffn_hidden % tp == 0 && (m.kv_heads % tp == 0 || tp % m.kv_heads == 0);
}

std::vector<int64_t> grid_or_default(const std::vector<int64_t>& v) {
  std::vector<int64_t> out = v.empty() ? default_bucket_grid() : v;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void check_pinned_tp(const spec::Model& m, const spec::Cluster& c, int64_t gpus, const std::vector<int64_t>& tps) {
  for (int64_t tp : tps) {
    if (tp < 1 || c.gpus_per_node % tp != 0 || gpus % tp != 0) {
      throw spec::SpecError("--tp", "", "expected a divisor of gpus_per_node (" + std::to_string(c.gpus_per_node) +
                                            ") and of the " + std::to_string(gpus) + " GPUs, got " + std::to_string(tp));
    }
    if (!tp_fits_model(m, tp)) {
      throw spec::SpecError("--tp", "", "expected a divisor of heads (" + std::to_string(m.heads) + ") and ffn_hidden (" +
                                            std::to_string(m.ffn_hidden) + ") of model " + m.name + ", got " +
                                            std::to_string(tp));
    }
  }
}

// A pinned pipeline size must divide the GPUs and leave every stage a layer; a pinned micro-batch
// must divide the global batch. (Whether a combination of pinned values leaves a plan is the
// search's answer, exit 1; a single value no plan can take is a bad option, exit 2.)
void check_pinned_pp(const spec::Model& m, int64_t gpus, const std::vector<int64_t>& pps) {
  for (int64_t pp : pps) {
    if (pp < 1 || gpus % pp != 0 || pp > m.layers) {
      throw spec::SpecError("--pp", "", "expected a divisor of the " + std::to_string(gpus) + " GPUs of at most the " +
                                            std::to_string(m.layers) + " layers of model " + m.name + ", got " +
                                            std::to_string(pp));
    }
  }
}

void check_pinned_micro_batch(const spec::Training& t, const std::vector<int64_t>& mbs) {
  for (int64_t mb : mbs) {
    if (mb < 1 || t.global_batch % mb != 0) {
      throw spec::SpecError("--micro-batch", "", "expected a divisor of global_batch " + std::to_string(t.global_batch) +
                                                     (t.label().empty() ? "" : " (" + t.label() + ")") + ", got " + std::to_string(mb));
    }
  }
}

}  // namespace

const char* to_string(Split s) { return s == Split::kUniform ? "uniform" : "balanced"; }

std::vector<int64_t> default_bucket_grid() { return {1'000'000, 10'000'000, 100'000'000, 1'000'000'000}; }

Space::Space(const spec::Model& model, const spec::Cluster& cluster, const spec::Training& training, int64_t gpus,
             SpaceLimits limits)
    : model_(spec::with_training_length(model, training)),
      cluster_(cluster),
      training_(sim::effective_training(training, cluster)),  // attention as this cluster's GPUs run it
      gpus_(gpus),
      limits_(std::move(limits)) {
  if (gpus_ < 1) throw spec::SpecError("--gpus", "", "expected at least one GPU, got " + std::to_string(gpus_));
  if (gpus_ > cluster_.gpus()) {
    throw spec::SpecError("--gpus", "", "expected at most the cluster's " + std::to_string(cluster_.gpus()) +
                                            " GPUs, got " + std::to_string(gpus_));
  }
  check_pinned_tp(model_, cluster_, gpus_, limits_.tp);
  check_pinned_pp(model_, gpus_, limits_.pp);
  check_pinned_micro_batch(training_, limits_.micro_batch);
  for (int64_t tp : divisors(cluster_.gpus_per_node)) {
    if (gpus_ % tp == 0 && tp_fits_model(model_, tp) && allowed(limits_.tp, tp)) tp_.push_back(tp);
  }
  for (spec::Recompute r : {spec::Recompute::kNone, spec::Recompute::kSelective, spec::Recompute::kFull}) {
    if (allowed(limits_.recompute, r)) recompute_.push_back(r);
  }
  // the framework's own limit (Megatron-LM: ZeRO-1 at most; fp8: ZeRO-2)
  for (int z = 0; z <= training_.max_zero_stage(); ++z) {
    if (allowed(limits_.zero, z)) zero_.push_back(z);
  }
  for (spec::Offload o : {spec::Offload::kNone, spec::Offload::kCpu}) {
    if (allowed(limits_.offload, o)) offload_.push_back(o == spec::Offload::kCpu);
  }
  for (int o : {1, 0}) {
    if (allowed(limits_.overlap_comm, o)) overlap_.push_back(o == 1);
  }
  reduce_ = grid_or_default(limits_.reduce_bucket);
  prefetch_ = grid_or_default(limits_.prefetch_bucket);
  max_live_ = grid_or_default(limits_.max_live_parameters);
}

std::vector<int64_t> Space::pp_values(int64_t tp) const {
  std::vector<int64_t> out;
  for (int64_t pp : divisors(gpus_ / tp)) {
    if (pp <= model_.layers && allowed(limits_.pp, pp)) out.push_back(pp);
  }
  return out;
}

std::vector<int64_t> Space::cp_values(int64_t tp, int64_t pp) const {
  std::vector<int64_t> out;
  for (int64_t cp : divisors(gpus_ / (tp * pp))) {
    if (cp > 1 && (model_.seq_len % (2 * cp) != 0 || cp_comms(tp, cp).empty() || model_.mla.on())) continue;
    if (limits_.cp.empty() ? cp > 1 && model_.seq_len / (2 * cp) < kMinCpChunk : !allowed(limits_.cp, cp)) continue;
    out.push_back(cp);
  }
  return out;
}

std::vector<int64_t> Space::ep_values(int64_t tp, int64_t cp, int64_t dp) const {
  if (!model_.moe.on()) return {1};
  const spec::Framework f = training_.framework;
  const bool deepspeed = f == spec::Framework::kDeepSpeed || f == spec::Framework::kDeepSpeed05;
  std::vector<int64_t> out;
  for (int64_t ep : divisors(tp * cp * dp)) {
    if (model_.moe.experts % ep != 0 || (deepspeed && ep > 1 && tp > 1) || !allowed(limits_.ep, ep)) continue;
    out.push_back(ep);
  }
  return out;
}

std::vector<int64_t> Space::etp_values(int64_t tp, int64_t cp, int64_t dp, int64_t ep) const {
  if (!model_.moe.on()) return {1};
  const spec::Framework f = training_.framework;
  const bool deepspeed = f == spec::Framework::kDeepSpeed || f == spec::Framework::kDeepSpeed05;
  std::vector<int64_t> out;
  for (int64_t etp : divisors((tp * cp * dp) / ep)) {
    const bool free = limits_.etp.empty();
    if (etp > 1 && (deepspeed || model_.moe.ffn_hidden % etp != 0 || (free && tp % etp != 0))) continue;
    if (!allowed(limits_.etp, etp)) continue;
    out.push_back(etp);
  }
  return out;
}

std::vector<spec::MoeDispatcher> Space::moe_dispatchers(int64_t ep, int64_t etp) const {
  std::vector<spec::MoeDispatcher> out;
  for (spec::MoeDispatcher d : spec::kMoeDispatchers) {
    const bool allgather = d == spec::MoeDispatcher::kAllGather, flex = d == spec::MoeDispatcher::kFlex;
    if (allgather && (ep * etp == 1 || training_.framework != spec::Framework::kMegatron || model_.mlp_bias)) continue;
    if (flex && (!spec::deepep_group_size(ep * etp) || training_.framework != spec::Framework::kMegatron ||
                 training_.moe_pad_to_capacity)) {
      continue;
    }
    if (allowed(limits_.moe_dispatcher, d)) out.push_back(d);
  }
  if (out.empty() && ep * etp == 1) out.push_back(spec::MoeDispatcher::kAllToAll);   // nothing to dispatch across ranks
  return out;
}

std::vector<spec::CpComm> Space::cp_comms(int64_t tp, int64_t cp) const {
  if (cp == 1) return {spec::CpComm::kP2p};
  const spec::Framework f = training_.framework;
  std::vector<spec::CpComm> out;
  for (spec::CpComm c : spec::kCpComms) {
    const bool runs = f == spec::Framework::kMegatron || (f == spec::Framework::kDeepSpeed && c == spec::CpComm::kA2a) ||
                      (f == spec::Framework::kFsdp2 && c != spec::CpComm::kA2a);
    const bool heads = c != spec::CpComm::kA2a || ((model_.heads / tp) % cp == 0 && model_.kv_heads % (tp * cp) == 0);
    if (runs && heads && allowed(limits_.cp_comm, c)) out.push_back(c);
  }
  return out;
}

std::vector<int64_t> Space::micro_batch_values(int64_t dp) const {
  std::vector<int64_t> out;
  if (training_.global_batch % dp != 0) return out;
  for (int64_t mb : divisors(training_.global_batch / dp)) {
    if (limits_.max_micro_batch > 0 && mb > limits_.max_micro_batch) continue;
    if (training_.global_batch / dp / mb > spec::limits::kMicroBatches) continue;  // a Program too large to build
    if (allowed(limits_.micro_batch, mb)) out.push_back(mb);
  }
  return out;
}

std::vector<int64_t> Space::virtual_stage_values(int64_t pp, int64_t micro_batches) const {
  std::vector<int64_t> out;
  if (pp < 2 || micro_batches % pp != 0 || model_.layers % pp != 0 || !interleaved_allowed()) return out;
  for (int64_t v : divisors(model_.layers / pp)) {
    if (v >= 2 && allowed(limits_.virtual_stages, v)) out.push_back(v);
  }
  return out;
}

bool Space::interleaved_allowed() const { return allowed(limits_.schedules, spec::Schedule::kInterleaved); }

std::vector<spec::Schedule> Space::schedules(int64_t pp) const {
  std::vector<spec::Schedule> out;
  for (spec::Schedule s : {spec::Schedule::k1F1B, spec::Schedule::kGpipe, spec::Schedule::kZbH1}) {
    if (!allowed(limits_.schedules, s)) continue;
    out.push_back(s);
    if (pp == 1) break;  // nothing to pipeline: one schedule stands for all
  }
  if (!limits_.virtual_stages.empty() &&
      std::find(limits_.virtual_stages.begin(), limits_.virtual_stages.end(), 1) == limits_.virtual_stages.end()) {
    out.clear();  // --virtual-stages without 1: only interleaved plans
  }
  return out;
}

std::vector<bool> Space::sequence_parallel_values(int64_t tp, int64_t cp) const {
  std::vector<bool> out;
  // experts with tp > 1 need sequence parallelism (spec::validate_plan)
  if (allowed(limits_.sequence_parallel, 0) && !(model_.moe.on() && tp > 1)) out.push_back(false);
  if (tp > 1 && (model_.seq_len / cp) % tp == 0 && allowed(limits_.sequence_parallel, 1)) out.push_back(true);
  return out;
}

std::vector<Split> Space::split_values(int64_t pp) const {
  std::vector<Split> out;
  for (Split s : {Split::kBalanced, Split::kUniform}) {
    if (!allowed(limits_.split, s)) continue;
    out.push_back(s);
    if (pp == 1) break;  // one stage holds everything
  }
  return out;
}

const char* to_string(ZeroVariant v) {
  switch (v) {
    case ZeroVariant::kPlain: return "plain";
    case ZeroVariant::kHpz: return "hpz";
    case ZeroVariant::kZeroPP: return "zeropp";
    case ZeroVariant::kShard: return "shard";
  }
  return "plain";
}

std::vector<ZeroVariant> Space::zero_variants(int zero, int64_t tp, int64_t dp) const {
  std::vector<ZeroVariant> out;
  if (allowed(limits_.zero_variants, ZeroVariant::kPlain)) out.push_back(ZeroVariant::kPlain);
  if (node_dp(tp, dp) == 0) return out;
  const spec::Framework f = training_.framework;
  const bool deepspeed = f == spec::Framework::kDeepSpeed, fsdp2 = f == spec::Framework::kFsdp2;
  const bool fsdp = f == spec::Framework::kFsdp || fsdp2;
  const auto add = [&](ZeroVariant v, bool runs) {
    if (runs && allowed(limits_.zero_variants, v)) out.push_back(v);
  };
  add(ZeroVariant::kHpz, zero == 3 && (deepspeed || fsdp2));
  add(ZeroVariant::kZeroPP, zero == 3 && deepspeed);
  add(ZeroVariant::kShard, (deepspeed && zero == 3) || (fsdp && zero >= 2) || (f == spec::Framework::kMegatron && zero == 1));
  return out;
}

spec::Plan Space::plan(const Candidate& c) const {
  spec::Plan p;
  p.tp = c.tp;
  p.pp = c.pp;
  p.dp = c.dp;
  p.cp = c.cp;
  p.cp_comm = c.cp_comm;
  p.ep = c.ep;
  p.etp = c.etp;
  p.moe_dispatcher = c.moe_dispatcher;
  p.micro_batch = c.micro_batch;
  p.micro_batches = c.micro_batches;
  p.schedule = c.schedule;
  p.virtual_stages = c.virtual_stages;
  p.sequence_parallel = c.sequence_parallel;
  p.recompute = c.recompute;
  if (c.split == Split::kUniform) {
    for (int64_t s = 0; s < c.pp; ++s) p.stage_layers.push_back(model_.layers / c.pp + (s < model_.layers % c.pp ? 1 : 0));
  }
  p.zero.stage = c.zero;
  p.zero.overlap_comm = c.overlap_comm;
  p.zero.offload_optimizer = c.offload ? spec::Offload::kCpu : spec::Offload::kNone;
  if (c.reduce_i >= 0) p.zero.reduce_bucket = reduce_[static_cast<std::size_t>(c.reduce_i)];
  if (c.prefetch_i >= 0) p.zero.prefetch_bucket = prefetch_[static_cast<std::size_t>(c.prefetch_i)];
  if (c.max_live_i >= 0) p.zero.max_live_parameters = max_live_[static_cast<std::size_t>(c.max_live_i)];
  const int64_t l = node_dp(c.tp, c.dp);   // the variants are plain with cp > 1 (spec::validate_plan)
  switch (c.zero_variant) {
    case ZeroVariant::kPlain: break;
    case ZeroVariant::kHpz: p.zero.hpz_group = l; break;
    case ZeroVariant::kZeroPP:
      p.zero.hpz_group = l;
      p.zero.quantized_weights = spec::kQwzDefault;
      p.zero.quantized_gradients = spec::kQgzDefault;
      p.zero.local_group = l;
      break;
    case ZeroVariant::kShard: p.zero.shard_group = l; break;
  }
  p.source = "stagecraft search";
  return p;
}

std::string Space::why_empty() const {
  const std::string g = std::to_string(gpus_);
  if (tp_.empty()) {
    return "no tensor-parallel size divides gpus_per_node (" + std::to_string(cluster_.gpus_per_node) + "), the " + g +
           " GPUs and heads (" + std::to_string(model_.heads) + ") of model " + model_.name +
           (limits_.tp.empty() ? "" : " among --tp " + join(limits_.tp));
  }
  std::vector<int64_t> dps;
  bool any_pp = false, any_mb = false;
  bool any_cp = false;
  for (int64_t tp : tp_) {
    for (int64_t pp : pp_values(tp)) {
      any_pp = true;
      for (int64_t cp : cp_values(tp, pp)) {
        any_cp = true;
        const int64_t dp = gpus_ / (tp * pp * cp);
        dps.push_back(dp);
        if (!micro_batch_values(dp).empty()) any_mb = true;
      }
    }
  }
  if (!any_pp) {
    return "no pipeline size divides the " + g + " GPUs with at most " + std::to_string(model_.layers) +
           " stages (one layer each)" + (limits_.pp.empty() ? "" : " among --pp " + join(limits_.pp));
  }
  if (!any_cp) {
    return "no context-parallel size among --cp " + join(limits_.cp) + " divides the GPUs left by tp × pp, with 2 × cp "
           "dividing seq_len (" + std::to_string(model_.seq_len) + ") and a comm type the framework (" +
           spec::to_string(training_.framework) + ") runs";
  }
  if (!any_mb) {
    std::sort(dps.begin(), dps.end());
    dps.erase(std::unique(dps.begin(), dps.end()), dps.end());
    std::string why = "global_batch " + std::to_string(training_.global_batch) +
                      (training_.label().empty() ? "" : " (" + training_.label() + ")") +
                      " is not divisible into micro_batch × micro_batches × dp for any data-parallel size dp = " + g +
                      " / (tp × cp × pp) in {" + join(dps) + "}";
    if (!limits_.micro_batch.empty() || limits_.max_micro_batch > 0) why += " with the micro-batch limits given";
    why += " and at most " + std::to_string(spec::limits::kMicroBatches) + " micro-batches a step";
    return why;
  }
  if (zero_.empty() || recompute_.empty() || overlap_.empty() || offload_.empty()) {
    return "the limits leave no ZeRO stage, recompute, overlap or offload value";
  }
  return "";
}

nlohmann::json Space::to_json() const {
  auto names = [](const auto& values) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : values) out.push_back(spec::to_string(v));
    return out;
  };
  nlohmann::json splits = nlohmann::json::array();
  for (Split s : limits_.split) splits.push_back(to_string(s));
  nlohmann::json j = {{"model", spec::to_json(model_)},
          {"cluster", spec::to_json(cluster_)},
          {"training", spec::to_json(training_)},
          {"gpus", gpus_},
          {"limits",
           {{"tp", limits_.tp},
            {"pp", limits_.pp},
            {"micro_batch", limits_.micro_batch},
            {"max_micro_batch", limits_.max_micro_batch},
            {"virtual_stages", limits_.virtual_stages},
            {"zero", limits_.zero},
            {"schedule", names(limits_.schedules)},
            {"recompute", names(limits_.recompute)},
            {"sequence_parallel", limits_.sequence_parallel},
            {"offload", names(limits_.offload)},
            {"split", splits},
            {"overlap_comm", limits_.overlap_comm},
            {"reduce_bucket", reduce_},
            {"prefetch_bucket", prefetch_},
            {"max_live_parameters", max_live_}}}};
  if (!limits_.cp.empty()) j["limits"]["cp"] = limits_.cp;   // only when limited, as below
  if (!limits_.ep.empty()) j["limits"]["ep"] = limits_.ep;
  if (!limits_.etp.empty()) j["limits"]["etp"] = limits_.etp;
  if (!limits_.moe_dispatcher.empty()) j["limits"]["moe_dispatcher"] = names(limits_.moe_dispatcher);
  if (!limits_.cp_comm.empty()) j["limits"]["cp_comm"] = names(limits_.cp_comm);
  if (!limits_.zero_variants.empty()) {   // only when limited, so earlier searches' inputs read the same
    nlohmann::json variants = nlohmann::json::array();
    for (ZeroVariant v : limits_.zero_variants) variants.push_back(to_string(v));
    j["limits"]["zero_variant"] = variants;
  }
  return j;
}

std::string short_elems(int64_t v) {
  if (v <= 0) return std::to_string(v);
  int e = 0;
  int64_t m = v;
  while (m % 10 == 0) {
    m /= 10;
    ++e;
  }
  if (e < 3 || m >= 100) return std::to_string(v);
  return std::to_string(m) + "e" + std::to_string(e);
}

std::string plan_key(const spec::Plan& p) {
  std::string key = spec::summary(p);
  const spec::ZeroConfig& z = p.zero;
  const spec::ZeroConfig d;
  if (!p.stage_layers.empty()) {
    // only an explicit split is part of the key; a uniform one is named so
    bool uniform = true;
    const int64_t total = [&] {
      int64_t t = 0;
      for (int64_t l : p.stage_layers) t += l;
      return t;
    }();
    for (std::size_t s = 0; s < p.stage_layers.size(); ++s) {
      const int64_t n = static_cast<int64_t>(p.stage_layers.size());
      if (p.stage_layers[s] != total / n + (static_cast<int64_t>(s) < total % n ? 1 : 0)) uniform = false;
    }
    if (uniform) {
      key += " split=uniform";
    } else {
      key += " layers=";
      for (std::size_t s = 0; s < p.stage_layers.size(); ++s) key += (s ? "," : "") + std::to_string(p.stage_layers[s]);
    }
  }
  if (p.dp_cp() > 1) key += " rb=" + short_elems(z.reduce_bucket);
  if (p.dp_cp() > 1 && z.stage == 3) key += " pf=" + short_elems(z.prefetch_bucket) + " live=" + short_elems(z.max_live_parameters);
  if (z.allgather_bucket != d.allgather_bucket) key += " ag=" + short_elems(z.allgather_bucket);
  if (z.max_reuse_distance != d.max_reuse_distance) key += " reuse=" + short_elems(z.max_reuse_distance);
  if (z.param_persistence_threshold != d.param_persistence_threshold) {
    key += " persist=" + short_elems(z.param_persistence_threshold);
  }
  if (!z.overlap_comm) key += " no-overlap";
  if (z.keep_gathered_across_microbatches) key += " keep-gathered";
  return key;
}

}  // namespace stagecraft::planner
