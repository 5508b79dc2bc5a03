// The model report `stagecraft info` prints: the spec after defaults, parameter counts (total,
// embedding, per block, head, and per pipeline unit) and FLOPs per token. One result, two
// renderings (JSON here, the table in cli/).
#pragma once

#include <nlohmann/json.hpp>

#include "core/spec/model.hpp"

namespace stagecraft::count {

// Keys: name, parameters, active_parameters (= parameters for a dense model), embedding_parameters,
// block_parameters (layer 0's), head_parameters, flops_per_token_fwd, model_flops_per_token_train,
// hardware_flops_per_token_train {none, selective, full}, layers [{name, parameters,
// flops_per_token_fwd}], model {...}; a mixture of experts adds moe_layers, moe_block_parameters,
// dense_block_parameters (0 without dense layers) and expert_parameters.
nlohmann::json model_report(const spec::Model& m);

}  // namespace stagecraft::count
