#include "core/count/report.hpp"

#include "core/count/count.hpp"

namespace stagecraft::count {

using nlohmann::json;

json model_report(const spec::Model& m) {
  json layers = json::array();
  for (const LayerCount& l : layer_counts(m)) {
    layers.push_back({{"name", l.name}, {"parameters", l.parameters}, {"flops_per_token_fwd", l.flops_per_token_fwd}});
  }
  json hardware = json::object();
  for (spec::Recompute r : {spec::Recompute::kNone, spec::Recompute::kSelective, spec::Recompute::kFull}) {
    hardware[spec::to_string(r)] = hardware_flops_per_token_train(m, r);
  }
  return {{"name", m.name},
          {"parameters", parameters(m)},
          {"embedding_parameters", embedding_parameters(m)},
          {"block_parameters", block_parameters(m)},
          {"head_parameters", head_parameters(m)},
          {"flops_per_token_fwd", flops_per_token_fwd(m)},
          {"model_flops_per_token_train", model_flops_per_token_train(m)},
          {"hardware_flops_per_token_train", hardware},
          {"layers", layers},
          {"model", spec::to_json(m)}};
}

}  // namespace stagecraft::count
