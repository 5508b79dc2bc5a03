// stagecraft demo: the bundled case, with no arguments — GPT-3 13B on 8 DGX-H100 nodes over NDR
// InfiniBand, global batch 1024. This build loads and checks the case and reports the model; the
// plan search over it belongs to `stagecraft search`.
#include <cstdio>
#include <iostream>

#include "cli/common.hpp"
#include "core/count/count.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::cli {

namespace {

constexpr const char* kModel = "gpt3-13b";
constexpr const char* kCluster = "dgx-h100-ndr";
constexpr const char* kTraining = "demo-13b-1024";
constexpr const char* kPlan = "demo-13b";

int run_demo() {
  using spec::ConfigKind;
  const spec::Model m = spec::load_model(spec::resolve_config(ConfigKind::kModel, kModel));
  const spec::Cluster c = spec::load_cluster(spec::resolve_config(ConfigKind::kCluster, kCluster));
  const spec::Training t = spec::load_training(spec::resolve_config(ConfigKind::kTraining, kTraining));
  const spec::Plan p = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, kPlan));
  spec::validate_plan(p, m, t, c.gpus());

  const double params = static_cast<double>(count::parameters(m));
  const double tokens = static_cast<double>(t.global_batch * m.seq_len);
  std::printf("Stagecraft demo: %s on %s, global batch %lld sequences\n\n", m.name.c_str(), c.name.c_str(),
              static_cast<long long>(t.global_batch));
  std::printf("model     %s: %s parameters, %s FLOP per token forward (%s)\n", m.name.c_str(),
              with_commas(count::parameters(m)).c_str(), short_count(count::flops_per_token_fwd(m)).c_str(),
              m.file.c_str());
  std::printf("cluster   %lld nodes x %lld %s (%s each, %s dense %s), %lld x %.0f Gb/s NICs per node (%s)\n",
              static_cast<long long>(c.nodes), static_cast<long long>(c.gpus_per_node), c.gpu.name.c_str(),
              short_bytes(static_cast<double>(c.gpu.memory_bytes)).c_str(),
              (short_count(c.gpu.peak_flops.count(t.dtype) ? c.gpu.peak_flops.at(t.dtype) : 0) + "FLOP/s").c_str(),
              spec::to_string(t.dtype), static_cast<long long>(c.inter_node.nics_per_node),
              c.inter_node.nic_bandwidth_Bps * 8 / 1e9, c.file.c_str());
  std::printf("training  %lld sequences x %lld tokens = %s tokens per step, %s, %s (%s)\n",
              static_cast<long long>(t.global_batch), static_cast<long long>(m.seq_len),
              short_count(tokens).c_str(), spec::to_string(t.dtype), spec::to_string(t.optimizer), t.file.c_str());
  std::printf("          %s model FLOP per step (3 x forward); fp16 weights + grads + fp32 Adam states\n"
              "          (16 bytes per parameter) need %s before ZeRO shards them\n",
              short_count(tokens * count::model_flops_per_token_train(m)).c_str(),
              short_bytes(16.0 * params).c_str());
  std::printf("example   %s (%s): valid for this case\n\n", spec::summary(p).c_str(), p.file.c_str());
  std::printf(
      "The plan search (`stagecraft search`) enumerates tp x pp x dp factorings of the %lld GPUs,\n"
      "micro-batching, ZeRO stage and buckets, schedule and recompute for this case, simulates each\n"
      "candidate and ranks them by tokens/s. This build has the specs and counting it stands on.\n",
      static_cast<long long>(c.gpus()));
  return kOk;
}

}  // namespace

Subcommand add_demo(CLI::App& root) {
  CLI::App* app = root.add_subcommand("demo", "The bundled case: GPT-3 13B on 8 DGX-H100 nodes, global batch 1024");
  return {app, run_demo};
}

}  // namespace stagecraft::cli
