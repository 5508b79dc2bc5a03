#include "core/program/units.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_map>

#include "core/count/count.hpp"
#include "core/count/tensors.hpp"

namespace stagecraft::program {

using spec::Model;

namespace {

// The unit's tensors and modules from the tensor table (count/tensors.hpp), the one description
// of every parameter tensor.
// With expert parallelism over `ep` ranks a MoE unit's stacked routed experts ([E·in x out], the
// table's "mlp.experts." tensors) keep E/ep of them; with expert tensor parallelism over `etp`
// ranks each expert's FFN is split as a tensor-parallel MLP: gate and up by columns (weights and
// biases), down by rows (its bias whole on every etp rank, as a row-parallel bias).
Unit with_tensors(Unit u, const Model& m, int32_t unit, int64_t tp, int64_t ep = 1, int64_t etp = 1) {
  for (const count::TensorSpec& t : count::unit_tensors(m, unit, tp)) {
    const bool expert = u.kind == UnitKind::kMoe && t.name.find(".mlp.experts.") != std::string::npos;
    const bool down = t.name.find(".down.") != std::string::npos, bias = t.name.ends_with(".b");
    int64_t rows = expert ? t.rows / ep : t.rows, cols = t.cols;
    if (expert && down && !bias) rows /= etp;
    if (expert && !down) cols /= etp;
    u.tensors.push_back(rows * cols);
    u.module.push_back(t.module);
    u.dims.push_back(rows > 1 ? std::max(rows, cols) : 0);
    if (u.kind == UnitKind::kMoe) u.expert.push_back(expert ? 1 : 0);
    if (expert) u.expert_params += rows * cols;
  }
  u.params = std::accumulate(u.tensors.begin(), u.tensors.end(), int64_t{0});
  return u;
}

// GEMM FLOPs per token of the block linears whose name starts with `group`, split over tp:
// 2 * in * out summed.
double linear_flops(const Model& m, int64_t tp, const char* group) {
  double flops = 0;
  for (const count::Linear& l : count::block_linears(m)) {
    if (l.name.rfind(group, 0) == 0) flops += 2.0 * static_cast<double>(count::shard(m, l, tp).weight());
  }
  return flops;
}

Unit attention(const Model& m, int64_t tp, int32_t block) {
  Unit u{UnitKind::kAttention, block, {}, {}, {}, 0, 0, 0, 0, 0};
  const double gemm = linear_flops(m, tp, "attn.");
  // 4·s·q/t (s: the keys of its window, if any); latent attention: over its query/key and value head sizes
  const double scores = count::attention_flops_per_token_fwd(m, block) / static_cast<double>(tp);
  u.fwd_flops_per_token = gemm + scores;
  u.bwd_input_flops_per_token = gemm + 2 * scores;
  u.bwd_weight_flops_per_token = gemm;
  u.score_flops_per_token = scores;
  return with_tensors(u, m, block_first_unit(block), tp);
}

Unit mlp(const Model& m, int64_t tp, int32_t block) {
  Unit u{UnitKind::kMlp, block, {}, {}, {}, 0, 0, 0, 0, 0};
  const double gemm = linear_flops(m, tp, "mlp.");
  u.fwd_flops_per_token = gemm;
  u.bwd_input_flops_per_token = gemm;
  u.bwd_weight_flops_per_token = gemm;
  return with_tensors(u, m, block_first_unit(block) + 1, tp);
}

// A MoE layer's MLP (header): per token of the micro-batch on one tp rank.
Unit moe(const Model& m, int64_t tp, int64_t ep, int64_t etp, int32_t block) {
  Unit u{UnitKind::kMoe, block, {}, {}, {}, 0, 0, 0, 0, 0};
  const double t = static_cast<double>(tp), h = static_cast<double>(m.hidden);
  double experts = 0, shared = 0;
  for (const count::Linear& l : count::mlp_linears(m, "mlp.experts", m.moe.ffn_hidden)) experts += l.forward_flops_per_token();
  experts *= static_cast<double>(m.moe.top_k) / t;
  if (m.moe.shared_ffn_hidden > 0) {
    for (const count::Linear& l : count::mlp_linears(m, "mlp.shared", m.moe.shared_ffn_hidden)) {
      shared += 2.0 * static_cast<double>(count::shard(m, l, tp).weight());
    }
  }
  if (m.moe.shared_gate) shared += 2.0 * h / t;
  const double router = 2.0 * h * static_cast<double>(m.moe.experts) / t;
  const double gemm = router + experts + shared;
  u.fwd_flops_per_token = gemm;
  u.bwd_input_flops_per_token = gemm;
  u.bwd_weight_flops_per_token = gemm;
  u.expert_flops_per_token = experts;
  return with_tensors(u, m, block_first_unit(block) + 1, tp, ep, etp);
}

}  // namespace

int64_t tied_head_copy(const Model& m, int64_t tp) { return m.tied_embeddings ? count::vocab_per_rank(m, tp) * m.hidden : 0; }

std::vector<Unit> model_units(const Model& m, int64_t tp, int64_t ep, int64_t etp) {
  std::vector<Unit> units;
  units.reserve(static_cast<std::size_t>(unit_count(m)));
  units.push_back(with_tensors(Unit{UnitKind::kEmbedding, -1, {}, {}, {}, 0, 0, 0, 0, 0}, m, 0, tp));
  for (int32_t b = 0; b < static_cast<int32_t>(m.layers); ++b) {
    units.push_back(attention(m, tp, b));
    units.push_back(m.moe_layer(b) ? moe(m, tp, ep, etp, b) : mlp(m, tp, b));
  }
  Unit head{UnitKind::kHead, -1, {}, {}, {}, 0, 0, 0, 0, 0};
  const double gemm = 2.0 * static_cast<double>(m.hidden) * static_cast<double>(count::vocab_per_rank(m, tp));
  head.fwd_flops_per_token = gemm;
  head.bwd_input_flops_per_token = gemm;
  head.bwd_weight_flops_per_token = gemm;
  units.push_back(with_tensors(head, m, head_unit(m), tp));
  for (int32_t u = 0; u < static_cast<int32_t>(units.size()); ++u) {
    units[static_cast<std::size_t>(u)].norm_elems = count::norm_elems(m, u, u + 1);
    units[static_cast<std::size_t>(u)].qk_norm_elems = count::norm_elems(m, u, u + 1, true);
  }
  return units;
}

std::shared_ptr<const std::vector<Unit>> shared_model_units(const Model& m, int64_t tp, int64_t ep, int64_t etp) {
  // the last one asked for, compared field by field: a lowering and its simulations ask for the
  // same units several times, and the key below costs a JSON serialisation each time
  thread_local struct {
    Model model;
    int64_t tp = 0, ep = 0, etp = 0;
    std::shared_ptr<const std::vector<Unit>> units;
  } last;
  if (last.units && last.tp == tp && last.ep == ep && last.etp == etp && last.model == m) return last.units;
  thread_local std::unordered_map<std::string, std::shared_ptr<const std::vector<Unit>>> built;
  std::string key = spec::to_json(m).dump();
  key += '#';
  key += std::to_string(tp);
  key += '#';
  key += std::to_string(ep);
  key += '#';
  key += std::to_string(etp);
  std::shared_ptr<const std::vector<Unit>> units;
  if (auto it = built.find(key); it != built.end()) {
    units = it->second;
  } else {
    if (built.size() >= 64) built.clear();   // the holders keep theirs
    units = std::make_shared<const std::vector<Unit>>(model_units(m, tp, ep, etp));
    built.emplace(std::move(key), units);
  }
  last.model = m;
  last.tp = tp;
  last.ep = ep;
  last.etp = etp;
  last.units = units;
  return units;
}

}  // namespace stagecraft::program
