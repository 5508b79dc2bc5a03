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
  json out = {{"name", m.name},
          {"parameters", parameters(m)},
          {"active_parameters", active_parameters(m)},
          {"embedding_parameters", embedding_parameters(m)},
          {"block_parameters", block_parameters(m)},
          {"head_parameters", head_parameters(m)},
          {"flops_per_token_fwd", flops_per_token_fwd(m)},
          {"model_flops_per_token_train", model_flops_per_token_train(m)},
          {"hardware_flops_per_token_train", hardware},
          {"layers", layers},
          {"model", spec::to_json(m)}};
  if (m.moe.on()) {  // a dense and a MoE layer's block (the first of each), one routed expert
    int64_t first_moe = 0, first_dense = -1;
    while (first_moe < m.layers && !m.moe_layer(first_moe)) ++first_moe;
    for (int64_t l = 0; l < m.layers && first_dense < 0; ++l) first_dense = m.moe_layer(l) ? -1 : l;
    out["moe_layers"] = moe_layers(m);
    out["moe_block_parameters"] = first_moe < m.layers ? block_parameters(m, first_moe) : 0;
    out["dense_block_parameters"] = first_dense >= 0 ? block_parameters(m, first_dense) : 0;
    out["expert_parameters"] = expert_parameters(m);
  }
  return out;
}

}  // namespace stagecraft::count
