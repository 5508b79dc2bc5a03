#include "gui/model/whatif.hpp"

#include <algorithm>
#include <cmath>
#include <thread>
#include <stdexcept>

#include "core/spec/bundled.hpp"
#include "core/text/format.hpp"
#include "planner/space.hpp"

namespace stagecraft::gui {

const std::vector<WhatIfField>& whatif_fields() {
  static const std::vector<WhatIfField> fields = {
      {"cluster.inter_node.nic_bandwidth_Bps", "IB bandwidth per NIC", "Gb/s", 1e9 / 8, false, 1, 3200},
      {"cluster.inter_node.nics_per_node", "NICs per node", "", 1, true, 1, 64},
      {"cluster.inter_node.latency_ns", "inter-node latency", "us", 1e3, false, 0.1, 1000},
      {"cluster.intra_node.bandwidth_Bps", "NVLink bandwidth per GPU", "GB/s", 1e9, false, 1, 5000},
      {"cluster.gpu.memory_bytes", "GPU memory", "GiB", 1024.0 * 1024 * 1024, false, 1, 1024},
      {"cluster.nodes", "nodes", "", 1, true, 1, 100000},
      // a straggler (spec::Straggler): the cluster's own, else GPU 0, this many times slower
      {"cluster.straggler", "straggler slowdown", "×", 1, false, 1, 100},
  };
  return fields;
}

const WhatIfField& whatif_field(const std::string& key) {
  for (const WhatIfField& f : whatif_fields()) {
    if (f.key == key) return f;
  }
  throw std::out_of_range("no what-if field " + key);
}

double field_value(const spec::Cluster& c, const WhatIfField& f) {
  double v = 0;
  if (f.key == "cluster.inter_node.nic_bandwidth_Bps") v = c.inter_node.nic_bandwidth_Bps;
  if (f.key == "cluster.inter_node.nics_per_node") v = static_cast<double>(c.inter_node.nics_per_node);
  if (f.key == "cluster.inter_node.latency_ns") v = c.inter_node.latency_ns;
  if (f.key == "cluster.intra_node.bandwidth_Bps") v = c.intra_node.bandwidth_Bps;
  if (f.key == "cluster.gpu.memory_bytes") v = static_cast<double>(c.gpu.memory_bytes);
  if (f.key == "cluster.nodes") v = static_cast<double>(c.nodes);
  if (f.key == "cluster.straggler") v = c.straggler ? c.straggler->slowdown : 1.0;
  return v / f.scale;
}

spec::Override field_override(const WhatIfField& f, double shown, const spec::Cluster* cluster) {
  const double v = shown * f.scale;
  if (f.key == "cluster.straggler") {   // the whole object: the cluster's straggler (or GPU 0) at this slowdown
    const spec::Straggler s = cluster && cluster->straggler ? *cluster->straggler : spec::Straggler{};
    return spec::parse_override(f.key + "={\"kind\": \"" + spec::to_string(s.kind) + "\", \"first\": " + std::to_string(s.first) +
                                ", \"count\": " + std::to_string(s.count) + ", \"slowdown\": " + text::fmt("%.17g", v) + "}");
  }
  const bool whole = f.integer || f.key == "cluster.gpu.memory_bytes" || f.key == "cluster.inter_node.latency_ns";
  return spec::parse_override(f.key + "=" + (whole ? std::to_string(std::llround(v)) : text::fmt("%.17g", v)));
}

namespace {

// The edits that are not the node count (which --nodes sets) and the node count, if edited.
Inputs with_edits(const Inputs& inputs, const std::vector<spec::Override>& edits) {
  Inputs in = inputs;
  for (const spec::Override& o : edits) {
    if (o.key() == "cluster.nodes") {
      in.nodes = o.value.is_number_integer() ? o.value.get<int64_t>() : static_cast<int64_t>(o.value.get<double>());
    } else {
      in.overrides.push_back(o);
    }
  }
  return in;
}

}  // namespace

planner::AdaptedPlan edit_plan(const spec::Plan& plan, int64_t global_batch, const PlanEdits& e) {
  planner::AdaptedPlan out;
  spec::Plan p = plan;
  if (e.micro_batch) {
    const int64_t per = p.dp * *e.micro_batch;
    if (*e.micro_batch < 1 || global_batch % per != 0) {
      out.reason = "the global batch " + std::to_string(global_batch) + " / (dp " + std::to_string(p.dp) + " x micro-batch " +
                   std::to_string(*e.micro_batch) + ") is not a whole number of micro-batches";
      return out;
    }
    p.micro_batch = *e.micro_batch;
    p.micro_batches = global_batch / per;
  }
  if ((e.reduce_bucket || e.prefetch_bucket || e.max_live_parameters) && p.zero.stage == 0) {
    out.reason = "ZeRO stage 0 has no buckets to size";
    return out;
  }
  if ((e.prefetch_bucket || e.max_live_parameters) && p.zero.stage < 3) {
    out.reason = "prefetch and max-live sizes are ZeRO-3's; this plan is ZeRO-" + std::to_string(p.zero.stage);
    return out;
  }
  if (e.reduce_bucket) p.zero.reduce_bucket = *e.reduce_bucket;
  if (e.prefetch_bucket) p.zero.prefetch_bucket = *e.prefetch_bucket;
  if (e.max_live_parameters) p.zero.max_live_parameters = *e.max_live_parameters;
  out.plan = p;
  return out;
}

WhatIfResult evaluate_whatif(const Inputs& inputs, const std::vector<spec::Override>& edits, const planner::Evaluated& plan,
                             const PlanEdits& plan_edits) {
  WhatIfResult r;
  r.key = plan.key;
  r.base = plan.metrics;
  try {
    const Inputs in = with_edits(inputs, edits);
    Inputs free = in;
    free.limits = {};
    const Loaded l = load(free);
    spec::Plan p = plan.plan;
    if (!plan_edits.empty()) {
      const planner::AdaptedPlan a = edit_plan(p, l.training.global_batch, plan_edits);
      if (!a.plan) {
        r.error = a.reason;
        return r;
      }
      if (a.plan->micro_batch != p.micro_batch) {
        r.plan_note = "micro-batch " + std::to_string(p.micro_batch) + " -> " + std::to_string(a.plan->micro_batch) + ", micro-batches " +
                      std::to_string(p.micro_batches) + " -> " + std::to_string(a.plan->micro_batches);
      }
      p = *a.plan;
    }
    if (l.cluster.gpus() != p.world()) {
      const planner::AdaptedPlan a = planner::adapt_plan(p, l.training.global_batch, l.cluster.gpus(), l.cluster.gpus_per_node);
      if (!a.plan) {
        r.error = a.reason;
        return r;
      }
      r.plan_note += std::string(r.plan_note.empty() ? "" : "; ") + "keeping tp " + std::to_string(p.tp) + (p.cp > 1 ? ", cp " + std::to_string(p.cp) : std::string()) + ", pp " + std::to_string(p.pp) + " and micro-batch " +
                    std::to_string(p.micro_batch) + ": dp " + std::to_string(p.dp) + " -> " + std::to_string(a.plan->dp) +
                    ", micro-batches " + std::to_string(p.micro_batches) + " -> " + std::to_string(a.plan->micro_batches);
      p = *a.plan;
    }
    spec::validate_plan(p, l.space->model(), l.training, l.cluster.gpus());
    r.view = simulate_view(*l.space, p, plan.key);
    r.modified = r.view->sim.metrics;
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

planner::Sweep whatif_sweep(const Inputs& inputs, const std::vector<spec::Override>& edits, const WhatIfField& field, double lo,
                            double hi, int n, const std::vector<planner::SweepPlan>& plans) {
  const Inputs in = with_edits(inputs, edits);
  planner::SweepInputs s;
  s.model = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, in.model));
  s.cluster_path = spec::resolve_config(spec::ConfigKind::kCluster, in.cluster);
  s.training_path = spec::resolve_config(spec::ConfigKind::kTraining, in.training);
  s.base = in.overrides;
  s.nodes = in.nodes;
  std::vector<std::string> values;
  // the straggler field sweeps the cluster's own straggler (GPU 0 when it has none)
  std::optional<spec::Cluster> cluster;
  if (field.key == "cluster.straggler") cluster = spec::load_cluster(s.cluster_path, s.base);
  for (int i = 0; i < n; ++i) {
    const double f = n > 1 ? static_cast<double>(i) / (n - 1) : 0;
    const double shown = lo > 0 && hi > 0 ? lo * std::pow(hi / lo, f) : lo + (hi - lo) * f;
    const spec::Override o = field_override(field, field.integer ? std::round(shown) : shown, cluster ? &*cluster : nullptr);
    values.push_back(o.text.substr(o.text.find('=') + 1));
  }
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return planner::sweep(s, spec::parse_override(field.key + "=0"), values, plans, std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1));
}

}  // namespace stagecraft::gui
