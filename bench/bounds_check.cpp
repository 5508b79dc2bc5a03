// The pruner's step-time bound against the contention-free step time, over samples of whole plan
// spaces: the search is exact only if no plan's bound exceeds what the simulator would say
// (planner/prune.hpp). Every `every`-th candidate the pruner keeps is lowered and timed
// contention-free (sim::contention_free_step_s, itself below the simulated step time); the
// program prints, per space, how many it checked, the violations (bound above the time by more
// than the simulator's nanosecond rounding, 1e-5) with their plans, and how tight the bound is
// (bound / time: the mean and the share within 5%), and exits 1 on any violation. Where pp > 1
// the last stage's bound alone (sim::contention_free_stage_s, with the pipeline's fill and drain)
// is checked against the same time.
// Too slow for CI (a minute or two on 2 cores): run it after changing the bounds or the lowering,
//   build/bench/stagecraft_bounds_check [every-multiplier]
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "planner/prune.hpp"
#include "planner/space.hpp"
#include "sim/simulator.hpp"

namespace {

using namespace stagecraft;

struct Case {
  std::string name, model, cluster;
  int64_t nodes = 1, gpus = 0;       // gpus 0: every GPU of the nodes
  std::string training;              // bundled training file, or empty for `t` below
  int64_t global_batch = 0, seq_len = 0;
  spec::Framework framework = spec::Framework::kDeepSpeed;
  std::vector<int64_t> cp;
  int64_t every = 1;
};

spec::Training training_of(const Case& c) {
  if (!c.training.empty()) return spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, c.training));
  spec::Training t;
  t.file = "bounds-check";
  t.global_batch = c.global_batch;
  t.seq_len = c.seq_len;
  t.framework = c.framework;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t scale = argc > 1 ? std::max(1L, std::atol(argv[1])) : 1;
  const std::vector<Case> cases = {
      {"GPT-3 175B, 1024 A100 (the 175B search)", "gpt3-175b", "dgx-a100-80g-hdr", 128, 0, "gpt3-175b-1536", 0, 0,
       spec::Framework::kDeepSpeed, {}, 151},
      {"GPT-3 13B, 64 H100 (the demo)", "gpt3-13b", "dgx-h100-ndr", 8, 0, "demo-13b-1024", 0, 0, spec::Framework::kDeepSpeed, {}, 53},
      {"GPT-3 6.7B, 16 H100, DeepSpeed (hpZ, ZeRO++, MiCS)", "gpt3-6.7b", "dgx-h100-ndr", 2, 0, "", 32, 2048,
       spec::Framework::kDeepSpeed, {}, 41},
      {"GPT-3 1.3B, 16 H100, FSDP2 (hybrid sharding)", "gpt3-1.3b", "dgx-h100-ndr", 2, 0, "", 32, 2048, spec::Framework::kFsdp2,
       {}, 23},
      {"Llama 3 8B, 16 H100, Megatron-Core, 8K tokens, cp 2 and 4", "llama3-8b", "dgx-h100-ndr", 2, 0, "", 16, 8192,
       spec::Framework::kMegatron, {2, 4}, 31},
  };
  int64_t violations = 0;
  for (const Case& c : cases) {
    spec::Cluster cluster = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, c.cluster));
    cluster.nodes = c.nodes;
    planner::SpaceLimits limits;
    limits.cp = c.cp;
    const planner::Space space(spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, c.model)), cluster,
                               training_of(c), c.gpus > 0 ? c.gpus : c.nodes * cluster.gpus_per_node, limits);
    planner::Pruner pruner(space);
    const int64_t every = c.every * scale;
    int64_t kept = 0, checked = 0, bad = 0, within5 = 0, stage_checked = 0;
    double sum = 0, stage_sum = 0;
    for (const planner::Group& g : planner::groups(space)) {
      pruner.enumerate(g, [&](const planner::Candidate& cand, planner::Verdict v, const planner::Estimate& e) {
        if (v != planner::Verdict::kKeep || kept++ % every != 0) return;
        const spec::Plan plan = space.plan(cand);
        const program::Program prog = program::lower(space.model(), space.training(), plan);
        const double t = sim::contention_free_step_s(prog, space.cluster());
        const double ratio = e.step_time_lb_s / t;
        ++checked;
        sum += ratio;
        within5 += ratio >= 0.95;
        if (e.step_time_lb_s > t * (1 + 1e-5)) {
          ++bad;
          std::printf("  VIOLATION %s: bound %.6f s above the contention-free %.6f s\n", planner::plan_key(plan).c_str(),
                      e.step_time_lb_s, t);
        }
        if (plan.pp > 1) {
          program::LowerOptions last;
          last.only_stage = static_cast<int32_t>(plan.pp - 1);
          const double stage = sim::contention_free_stage_s(program::lower(space.model(), space.training(), plan, last),
                                                            space.cluster(), std::numeric_limits<double>::infinity());
          ++stage_checked;
          stage_sum += stage / t;
          if (stage > t * (1 + 1e-5)) {
            ++bad;
            std::printf("  VIOLATION %s: the last stage's bound %.6f s above the contention-free %.6f s\n",
                        planner::plan_key(plan).c_str(), stage, t);
          }
        }
      });
    }
    std::printf("%s: %lld of %lld kept plans checked, %lld violations, bound / contention-free time: mean %.3f, "
                "%.0f%% within 5%%; the last stage's bound (%lld plans with pp > 1): mean %.3f\n",
                c.name.c_str(), static_cast<long long>(checked), static_cast<long long>(kept), static_cast<long long>(bad),
                checked > 0 ? sum / static_cast<double>(checked) : 0.0,
                checked > 0 ? 100.0 * static_cast<double>(within5) / static_cast<double>(checked) : 0.0,
                static_cast<long long>(stage_checked), stage_checked > 0 ? stage_sum / static_cast<double>(stage_checked) : 0.0);
    std::fflush(stdout);
    violations += bad;
  }
  return violations > 0 ? 1 : 0;
}
