#include "planner/megatron.hpp"

#include <cmath>
#include <numeric>
#include <sstream>

namespace stagecraft::planner {

namespace {

std::string n(int64_t v) { return std::to_string(v); }

// A value as Python reads it: an integer without exponent (--rotary-base is an int argument).
std::string number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

// Megatron-LM's --moe-layer-freq as a Python list: 1 where a layer's MLP is a mixture of experts.
std::string layer_pattern(const spec::Model& m) {
  // leading dense layers then experts everywhere (DeepSeek's first_k_dense_replace): ([0]*k+[1]*r)
  int64_t k = 0;
  while (k < m.layers && !m.moe_layer(k)) ++k;
  bool rest_moe = true;
  for (int64_t l = k; l < m.layers; ++l) rest_moe = rest_moe && m.moe_layer(l);
  if (rest_moe) return k == 0 ? "([1]*" + n(m.layers) + ")" : "([0]*" + n(k) + "+[1]*" + n(m.layers - k) + ")";
  std::string out = "[";
  for (int64_t l = 0; l < m.layers; ++l) out += (l ? "," : "") + std::string(m.moe_layer(l) ? "1" : "0");
  return out + "]";
}

}  // namespace

std::string MegatronExport::text() const {
  std::string out;
  for (const std::string& c : comments) out += "# " + c + "\n";
  for (std::size_t i = 0; i < args.size(); ++i) out += args[i] + (i + 1 < args.size() ? " \\\n" : "\n");
  return out;
}

MegatronExport to_megatron(const spec::Plan& p, const spec::Training& t, const spec::Model* m) {
  MegatronExport x;
  auto arg = [&](const std::string& flag, const std::string& value = "") {
    x.args.push_back(value.empty() ? flag : flag + " " + value);
  };
  if (t.framework != spec::Framework::kMegatron) {
    x.warnings.push_back(std::string("the training file's framework is ") + spec::to_string(t.framework) +
                         ": Stagecraft simulated the plan with that framework's collectives and copies, not Megatron-LM's");
  }
  arg("--tensor-model-parallel-size", n(p.tp));
  arg("--pipeline-model-parallel-size", n(p.pp));
  if (p.cp > 1) {
    arg("--context-parallel-size", n(p.cp));
    arg("--cp-comm-type", spec::to_string(p.cp_comm));
  }
  if (m != nullptr && m->moe.on()) {
    arg("--expert-model-parallel-size", n(p.ep));
    arg("--expert-tensor-parallel-size", n(p.etp));
  }
  if (p.sequence_parallel) arg("--sequence-parallel");
  // the stage split: Megatron-LM cuts equal stages, or sets the first and last apart
  if (!p.stage_layers.empty() && m != nullptr && p.pp > 1) {
    const std::vector<int64_t>& s = p.stage_layers;
    const int64_t inner = p.pp > 2 ? s[1] : 0;
    bool middle_equal = true;
    for (std::size_t i = 1; i + 1 < s.size(); ++i) middle_equal = middle_equal && s[i] == inner;
    const bool all_equal = middle_equal && (p.pp == 2 ? s[0] == s[1] : s.front() == inner && s.back() == inner);
    if (!all_equal && middle_equal && p.pp > 2) {
      if (s.front() != inner) arg("--decoder-first-pipeline-num-layers", n(s.front()));
      if (s.back() != inner) arg("--decoder-last-pipeline-num-layers", n(s.back()));
    } else if (!all_equal) {
      std::string list;
      for (int64_t l : s) list += (list.empty() ? "" : ", ") + n(l);
      x.warnings.push_back("stage_layers [" + list + "]: Megatron-LM sets only the first and last stages' layer counts apart "
                           "(--decoder-first/last-pipeline-num-layers); this split needs a custom pipeline layout");
    }
  }
  switch (p.schedule) {
    case spec::Schedule::kInterleaved:
      if (m != nullptr && m->layers % (p.pp * p.virtual_stages) == 0) {
        arg("--num-layers-per-virtual-pipeline-stage", n(m->layers / (p.pp * p.virtual_stages)));
      } else {
        arg("--num-virtual-stages-per-pipeline-rank", n(p.virtual_stages));
        if (m != nullptr) {
          x.warnings.push_back("interleaved with " + n(p.pp * p.virtual_stages) + " chunks of " + n(m->layers) +
                               " layers: Megatron-LM's chunks are equal unless a pipeline layout says otherwise");
        }
      }
      break;
    case spec::Schedule::kGpipe:
      x.warnings.push_back("schedule gpipe: Megatron-LM runs 1F1B (or interleaved); GPipe's all-forward-then-backward is not one of its schedules");
      break;
    case spec::Schedule::kZbH1:
      x.warnings.push_back("schedule zb-h1: Megatron-LM's pipeline schedules are 1F1B and interleaved 1F1B; the zero-bubble "
                           "schedule is not one of them");
      break;
    case spec::Schedule::k1F1B: break;
  }
  if (p.overlap_p2p) arg("--overlap-p2p-communication");
  arg("--micro-batch-size", n(p.micro_batch));
  arg("--global-batch-size", n(p.micro_batch * p.micro_batches * p.dp));
  switch (p.recompute) {
    case spec::Recompute::kSelective: arg("--recompute-granularity", "selective"); break;
    case spec::Recompute::kFull:
      arg("--recompute-granularity", "full");
      arg("--recompute-method", "uniform");
      arg("--recompute-num-layers", "1");
      break;
    case spec::Recompute::kNone: break;
  }
  const spec::ZeroConfig& z = p.zero;
  if (z.stage >= 1) arg("--use-distributed-optimizer");
  if (z.stage >= 2) {
    x.warnings.push_back("ZeRO-" + n(z.stage) + ": Megatron-LM's distributed optimizer shards the optimizer state only (ZeRO-1); "
                         "gradients and parameters stay whole (sharding them is Megatron-FSDP, --use-megatron-fsdp, another engine)");
  }
  if (spec::hierarchical(z, p.dp_cp())) {
    if (z.stage == 1) arg("--num-distributed-optimizer-instances", n(p.dp_cp() / spec::partition_group(z, p.dp_cp())));
  }
  if (z.overlap_comm && p.dp_cp() > 1) {
    arg("--overlap-grad-reduce");
    if (z.stage >= 1) arg("--overlap-param-gather");
  }
  if (z.hpz_group > 0 || z.quantized_weights.on() || z.quantized_gradients.on()) {
    x.warnings.push_back("hpZ and quantized ZeRO communication are DeepSpeed ZeRO++'s: Megatron-LM has no equivalent");
  }
  if (z.offload_optimizer != spec::Offload::kNone || z.offload_param != spec::Offload::kNone) {
    x.warnings.push_back("offload: Megatron-LM's optimizer CPU offload (--optimizer-cpu-offload) runs a hybrid device/host step, "
                         "not DeepSpeed's host Adam the simulator modelled");
  }
  switch (t.dtype) {
    case spec::Dtype::kBf16: arg("--bf16"); break;
    case spec::Dtype::kFp16: arg("--fp16"); break;
    case spec::Dtype::kFp8:
      arg("--bf16");
      arg("--fp8-format", "hybrid");
      break;
    default: break;
  }
  if (m == nullptr) {
    x.comments.push_back("without --model: the model's arguments (layers, widths, heads, experts) are yours to add");
    return x;
  }
  arg("--num-layers", n(m->layers));
  arg("--hidden-size", n(m->hidden));
  arg("--ffn-hidden-size", n(m->ffn_hidden));
  arg("--num-attention-heads", n(m->heads));
  if (m->kv_heads != m->heads && !m->mla.on()) {
    arg("--group-query-attention");
    arg("--num-query-groups", n(m->kv_heads));
  }
  if (m->head_size > 0 && !m->mla.on()) arg("--kv-channels", n(m->head_size));
  arg("--seq-length", n(m->seq_len));
  arg("--max-position-embeddings", n(m->max_positions > 0 ? m->max_positions : m->seq_len));
  if (m->mlp == spec::Mlp::kSwiglu) arg("--swiglu");
  if (m->mlp == spec::Mlp::kGeglu || m->mlp == spec::Mlp::kRelu) {
    x.warnings.push_back(std::string("mlp ") + (m->mlp == spec::Mlp::kGeglu ? "geglu" : "relu") +
                         ": Megatron-LM's pretrain_gpt.py takes GELU or SwiGLU (--swiglu); set the activation in the model code");
  }
  if (m->norm == spec::Norm::kRmsNorm) arg("--normalization", "RMSNorm");
  arg("--norm-epsilon", number(m->norm_eps));
  if (m->position == spec::Position::kRope) {
    arg("--position-embedding-type", "rope");
    arg("--rotary-base", number(m->rope_theta));
  } else if (m->position == spec::Position::kAlibi) {
    x.warnings.push_back("ALiBi positions: Megatron-LM's GPT model has learned, RoPE or no positions");
  }
  if (!m->tied_embeddings) arg("--untie-embeddings-and-output-weights");
  if (!m->out_bias && !m->mlp_bias) {
    arg("--disable-bias-linear");
    if (m->qkv_bias) arg("--add-qkv-bias");
  } else if (m->out_bias != m->mlp_bias || !m->qkv_bias) {
    x.warnings.push_back("biases on some linears only: Megatron-LM has biases on every linear, or none (--disable-bias-linear) "
                         "with the QKV's apart (--add-qkv-bias)");
  }
  if (m->qk_norm) arg("--qk-layernorm");
  if (m->qk_norm_whole) {
    x.warnings.push_back("q/k norms over the whole projections (OLMoE): Megatron-LM's --qk-layernorm normalises each head; "
                         "the model's norms need its model provider");
  }
  if (m->attention_sinks) {
    x.warnings.push_back("learned attention sinks (gpt-oss): no argument is written for them; they need a Megatron-LM "
                         "version or model provider that has them");
  }
  if (!m->sliding_window_layers.empty()) {
    x.warnings.push_back("sliding-window attention on some layers (" + n(static_cast<int64_t>(m->sliding_window_layers.size())) +
                         " of " + n(m->layers) + ", window " + n(m->sliding_window) +
                         "): Megatron-LM's --window-size applies to every layer; set the pattern in the model provider");
  }
  if (m->mla.on()) {
    arg("--multi-latent-attention");
    if (m->mla.q_lora_rank > 0) arg("--q-lora-rank", n(m->mla.q_lora_rank));
    arg("--kv-lora-rank", n(m->mla.kv_lora_rank));
    arg("--qk-head-dim", n(m->mla.qk_nope_head_dim));
    arg("--qk-pos-emb-head-dim", n(m->mla.qk_rope_head_dim));
    arg("--v-head-dim", n(m->mla.v_head_dim));
  }
  if (m->moe.on()) {
    const spec::Moe& e = m->moe;
    arg("--num-experts", n(e.experts));
    arg("--moe-router-topk", n(e.top_k));
    arg("--moe-ffn-hidden-size", n(e.ffn_hidden));
    if (e.shared_ffn_hidden > 0) arg("--moe-shared-expert-intermediate-size", n(e.shared_ffn_hidden));
    arg("--moe-layer-freq", "'" + layer_pattern(*m) + "'");
    arg("--moe-grouped-gemm");
    arg("--moe-token-dispatcher-type", spec::to_string(p.moe_dispatcher));
    if (p.moe_dispatcher == spec::MoeDispatcher::kFlex) arg("--moe-flex-dispatcher-backend", "deepep");
    if (e.router == "sigmoid") arg("--moe-router-score-function", "sigmoid");
    if (e.router_bias) arg("--moe-router-enable-expert-bias");
    if (e.router_bias && t.moe_router_bias_update_rate != spec::kMegatronExpertBiasUpdateRate) {
      arg("--moe-router-bias-update-rate", number(t.moe_router_bias_update_rate));
    }
    if (e.router_scaling != 1.0) arg("--moe-router-topk-scaling-factor", number(e.router_scaling));
    if (e.router_groups > 0) {
      arg("--moe-router-num-groups", n(e.router_groups));
      arg("--moe-router-group-topk", n(e.router_group_top_k));
    }
    // softmax over every expert, the top k's values kept as they are (Qwen2-MoE's default): Megatron's pre-softmax
    if (!e.normalize_top_k) arg("--moe-router-pre-softmax");
    if (t.moe_aux_loss_coeff > 0) {
      arg("--moe-router-load-balancing-type", "aux_loss");
      arg("--moe-aux-loss-coeff", number(t.moe_aux_loss_coeff));
    }
    if (e.router_logit_bias) {
      x.warnings.push_back("a router with a trained logit bias (gpt-oss): no argument is written for it; set it in the "
                           "model provider");
    }
    if (e.shared_gate) {
      x.warnings.push_back("a gated shared expert (Qwen2-MoE's sigmoid gate): no argument is written for it; set the gate "
                           "in the model provider of your Megatron-LM version");
    }
    if (t.moe_capacity_factor > 0) {
      arg("--moe-expert-capacity-factor", number(t.moe_capacity_factor));
      if (t.moe_pad_to_capacity) arg("--moe-pad-expert-input-to-capacity");
    }
    if (t.moe_imbalance != 1.0) {
      x.comments.push_back("the simulation assumed the busiest expert-parallel rank computes " + number(t.moe_imbalance) +
                           "x the mean tokens (moe_imbalance); Megatron-LM's balancing options (--moe-aux-loss-coeff, "
                           "--moe-router-load-balancing-type) set what it will be");
    }
  }
  x.comments.push_back("vocabulary " + n(m->vocab) + ": set by the tokenizer (--tokenizer-type, --vocab-size for a null tokenizer)");
  return x;
}

}  // namespace stagecraft::planner
