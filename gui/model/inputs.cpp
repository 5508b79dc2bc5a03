#include "gui/model/inputs.hpp"

#include <algorithm>
#include <sstream>

#include "core/count/count.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/text/format.hpp"
#include "planner/deepspeed.hpp"
#include "planner/search.hpp"

namespace stagecraft::gui {

Inputs demo_inputs() {
  Inputs in;
  in.model = spec::kDemoCase.model;
  in.cluster = spec::kDemoCase.cluster;
  in.training = spec::kDemoCase.training;
  in.nodes = spec::kDemoCase.nodes;
  return in;
}

Loaded load(const Inputs& in) {
  using spec::ConfigKind;
  Loaded l;
  l.model = spec::load_model(spec::resolve_config(ConfigKind::kModel, in.model));
  l.cluster = spec::load_cluster(spec::resolve_config(ConfigKind::kCluster, in.cluster), in.overrides);
  if (in.nodes < 0) throw spec::SpecError("--nodes", "", "expected a number of nodes >= 1, got " + std::to_string(in.nodes));
  if (in.nodes > 0) l.cluster.nodes = in.nodes;
  l.training = spec::load_training(spec::resolve_config(ConfigKind::kTraining, in.training), in.overrides);
  l.space = std::make_shared<const planner::Space>(l.model, l.cluster, l.training, l.cluster.gpus(), in.limits);
  if (!in.deepspeed.empty()) {
    // as `search --deepspeed` reads it: DeepSpeed's batch must be the training's
    planner::HfTrainerArgs hf;
    hf.hidden_size = l.model.hidden;
    const planner::DeepSpeedImport ds = planner::load_deepspeed(in.deepspeed, l.cluster.gpus(), l.model.layers, hf, l.cluster.gpus_per_node);
    if (ds.training.global_batch != l.training.global_batch) {
      throw spec::SpecError(in.deepspeed, "/train_batch_size",
                            "expected the global batch of " + l.training.label() + " (" + std::to_string(l.training.global_batch) +
                                "), got " + std::to_string(ds.training.global_batch));
    }
    spec::validate_plan(ds.plan, l.space->model(), l.training, l.cluster.gpus());
    l.baseline = planner::Baseline{"DeepSpeed config " + in.deepspeed, ds.plan, planner::simulate_plan(*l.space, ds.plan)};
    l.baseline_notes = ds.defaults;
    for (const std::string& w : ds.warnings) l.baseline_notes.push_back("warning: " + w);
  }
  return l;
}

namespace {

std::string quoted(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+@") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

template <typename T, typename F>
void list(std::ostringstream& out, const char* option, const std::vector<T>& values, F name) {
  if (values.empty()) return;
  out << ' ' << option << ' ';
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << name(values[i]);
}

}  // namespace

std::string search_command(const Inputs& in) {
  std::ostringstream out;
  out << "stagecraft search --model " << quoted(in.model) << " --cluster " << quoted(in.cluster) << " --training "
      << quoted(in.training);
  if (in.nodes > 0) out << " --nodes " << in.nodes;
  for (const spec::Override& o : in.overrides) out << " --set " << quoted(o.text);
  out << " --top " << in.top_k;
  if (in.pareto_window != 0.1) out << " --pareto-window " << in.pareto_window;
  const planner::SpaceLimits& l = in.limits;
  const auto num = [](auto v) { return std::to_string(v); };
  list(out, "--tp", l.tp, num);
  list(out, "--pp", l.pp, num);
  list(out, "--cp", l.cp, num);
  list(out, "--ep", l.ep, num);
  list(out, "--etp", l.etp, num);
  list(out, "--cp-comm", l.cp_comm, [](spec::CpComm c) { return std::string(spec::to_string(c)); });
  list(out, "--moe-dispatcher", l.moe_dispatcher, [](spec::MoeDispatcher d) { return std::string(spec::to_string(d)); });
  list(out, "--micro-batch", l.micro_batch, num);
  if (l.max_micro_batch > 0) out << " --max-micro-batch " << l.max_micro_batch;
  list(out, "--virtual-stages", l.virtual_stages, num);
  list(out, "--zero", l.zero, num);
  list(out, "--schedule", l.schedules, [](spec::Schedule s) { return std::string(spec::to_string(s)); });
  list(out, "--recompute", l.recompute, [](spec::Recompute r) { return std::string(spec::to_string(r)); });
  list(out, "--sequence-parallel", l.sequence_parallel, [](int v) { return std::string(v ? "on" : "off"); });
  list(out, "--offload", l.offload, [](spec::Offload o) { return std::string(spec::to_string(o)); });
  list(out, "--split", l.split, [](planner::Split s) { return std::string(planner::to_string(s)); });
  if (l.overlap_comm != std::vector<int>{1}) list(out, "--overlap-comm", l.overlap_comm, [](int v) { return std::string(v ? "true" : "false"); });
  list(out, "--reduce-bucket", l.reduce_bucket, [](int64_t v) { return planner::short_elems(v); });
  list(out, "--prefetch-bucket", l.prefetch_bucket, [](int64_t v) { return planner::short_elems(v); });
  list(out, "--max-live-parameters", l.max_live_parameters, [](int64_t v) { return planner::short_elems(v); });
  if (!in.deepspeed.empty()) out << " --deepspeed " << quoted(in.deepspeed);
  if (in.threads > 0) out << " --threads " << in.threads;
  if (!in.db.empty()) out << " --db " << quoted(in.db) << (in.resume ? " --resume" : "");
  return out.str();
}

std::vector<AxisChoice> axis_choices(const planner::Space& space) {
  std::vector<AxisChoice> out;
  const auto add = [&](const std::string& axis, std::vector<std::string> values) {
    out.push_back({axis, values, std::vector<bool>(values.size(), true)});
  };
  std::vector<int64_t> pp, cps, eps, etps;
  std::vector<spec::MoeDispatcher> dispatchers;
  std::vector<spec::Schedule> schedules;
  bool sp_on = false;
  for (int64_t tp : space.tp_values()) {
    for (int64_t p : space.pp_values(tp)) {
      if (std::find(pp.begin(), pp.end(), p) == pp.end()) pp.push_back(p);
      for (int64_t c : space.cp_values(tp, p)) {
        if (std::find(cps.begin(), cps.end(), c) == cps.end()) cps.push_back(c);
        for (bool s : space.sequence_parallel_values(tp, c)) sp_on = sp_on || s;
        const int64_t dp = space.gpus() / (tp * p * c);
        for (int64_t e : space.ep_values(tp, c, dp)) {
          if (std::find(eps.begin(), eps.end(), e) == eps.end()) eps.push_back(e);
          for (int64_t t : space.etp_values(tp, c, dp, e)) {
            if (std::find(etps.begin(), etps.end(), t) == etps.end()) etps.push_back(t);
            for (spec::MoeDispatcher d : space.moe_dispatchers(e, t)) {
              if (std::find(dispatchers.begin(), dispatchers.end(), d) == dispatchers.end()) dispatchers.push_back(d);
            }
          }
        }
      }
      for (spec::Schedule s : space.schedules(p)) {
        if (std::find(schedules.begin(), schedules.end(), s) == schedules.end()) schedules.push_back(s);
      }
    }
    for (bool v : space.sequence_parallel_values(tp)) sp_on = sp_on || v;
  }
  if (space.interleaved_allowed()) schedules.push_back(spec::Schedule::kInterleaved);
  std::sort(pp.begin(), pp.end());
  std::sort(cps.begin(), cps.end());
  std::sort(eps.begin(), eps.end());
  std::sort(etps.begin(), etps.end());
  std::vector<std::string> v;
  for (int64_t t : space.tp_values()) v.push_back(std::to_string(t));
  add("tp", v);
  v.clear();
  for (int64_t c : cps) v.push_back(std::to_string(c));
  add("cp", v);
  if (eps.size() > 1) {   // a mixture-of-experts model: its expert-parallel sizes
    v.clear();
    for (int64_t e : eps) v.push_back(std::to_string(e));
    add("ep", v);
  }
  if (etps.size() > 1) {   // and its expert tensor-parallel sizes
    v.clear();
    for (int64_t e : etps) v.push_back(std::to_string(e));
    add("etp", v);
  }
  if (dispatchers.size() > 1) {   // and its token dispatchers
    v.clear();
    for (spec::MoeDispatcher d : spec::kMoeDispatchers) v.push_back(spec::to_string(d));
    add("moe_dispatcher", v);
  }
  v.clear();
  for (int64_t p : pp) v.push_back(std::to_string(p));
  add("pp", v);
  v.clear();
  for (int z : space.zero_values()) v.push_back(std::to_string(z));
  add("zero", v);
  v.clear();
  for (spec::Schedule s : spec::kSchedules) {
    if (std::find(schedules.begin(), schedules.end(), s) != schedules.end()) v.push_back(spec::to_string(s));
  }
  add("schedule", v);
  v.clear();
  for (spec::Recompute r : space.recompute_values()) v.push_back(spec::to_string(r));
  add("recompute", v);
  add("sp", sp_on ? std::vector<std::string>{"off", "on"} : std::vector<std::string>{"off"});
  return out;
}

planner::SpaceLimits limits_of(const std::vector<AxisChoice>& axes, planner::SpaceLimits l) {
  for (const AxisChoice& a : axes) {
    std::vector<std::string> on;
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      if (a.checked[i]) on.push_back(a.values[i]);
    }
    const std::string option = a.axis == "sp" ? "--sequence-parallel" : a.axis == "moe_dispatcher" ? "--moe-dispatcher" : "--" + a.axis;
    if (on.empty()) throw spec::SpecError(option, "", "expected at least one value checked");
    if (on.size() == a.values.size()) continue;   // free
    const auto ints = [&] {
      std::vector<int64_t> out;
      for (const std::string& s : on) out.push_back(std::stoll(s));
      return out;
    };
    if (a.axis == "tp") {
      l.tp = ints();
    } else if (a.axis == "pp") {
      l.pp = ints();
    } else if (a.axis == "cp") {
      l.cp = ints();
    } else if (a.axis == "ep") {
      l.ep = ints();
    } else if (a.axis == "etp") {
      l.etp = ints();
    } else if (a.axis == "moe_dispatcher") {
      l.moe_dispatcher.clear();
      for (const std::string& s : on) {
        for (spec::MoeDispatcher d : spec::kMoeDispatchers) {
          if (s == spec::to_string(d)) l.moe_dispatcher.push_back(d);
        }
      }
    } else if (a.axis == "zero") {
      l.zero.clear();
      for (int64_t z : ints()) l.zero.push_back(static_cast<int>(z));
    } else if (a.axis == "schedule") {
      l.schedules.clear();
      for (const std::string& s : on) {
        for (spec::Schedule x : spec::kSchedules) {
          if (s == spec::to_string(x)) l.schedules.push_back(x);
        }
      }
    } else if (a.axis == "recompute") {
      l.recompute.clear();
      for (const std::string& s : on) {
        for (spec::Recompute x : spec::kRecomputes) {
          if (s == spec::to_string(x)) l.recompute.push_back(x);
        }
      }
    } else if (a.axis == "sp") {
      l.sequence_parallel.clear();
      for (const std::string& s : on) l.sequence_parallel.push_back(s == "on" ? 1 : 0);
    }
  }
  return l;
}

std::string model_summary(const spec::Model& m) {
  std::ostringstream out;
  out << text::short_count(static_cast<double>(count::parameters(m))) << " parameters · " << m.layers << " layers · hidden "
      << m.hidden << " · " << m.heads << " heads";
  if (m.kv_heads != m.heads) out << " (" << m.kv_heads << " kv)";
  out << " · seq " << m.seq_len;
  return out.str();
}

std::string cluster_summary(const spec::Cluster& c) {
  std::ostringstream out;
  out << c.gpu.name << " " << text::short_bytes(static_cast<double>(c.gpu.memory_bytes)) << " · " << c.nodes << " × "
      << c.gpus_per_node << " = " << c.gpus() << " GPUs · " << c.inter_node.nics_per_node << " × "
      << text::fmt("%.0f", c.inter_node.nic_bandwidth_Bps * 8 / 1e9) << " Gb/s NICs per node";
  return out.str();
}

std::string training_summary(const spec::Training& t, const spec::Model& m) {
  std::ostringstream out;
  out << "batch " << t.global_batch << " × " << m.seq_len << " tokens · " << spec::to_string(t.dtype) << " · "
      << spec::to_string(t.optimizer);
  return out.str();
}

}  // namespace stagecraft::gui
