// Megatron-LM interop: a Stagecraft plan as the command-line arguments of Megatron-LM's
// pretrain_gpt.py (megatron/training/arguments.py names each), for dense and mixture-of-experts
// models alike.
//
// Parallelism and batch (always):
//   --tensor-model-parallel-size tp, --pipeline-model-parallel-size pp, --context-parallel-size cp
//   and --cp-comm-type (cp > 1), --expert-model-parallel-size ep and
//   --expert-tensor-parallel-size etp (a model with experts), --sequence-parallel,
//   --num-layers-per-virtual-pipeline-stage L/(pp·v) (interleaved; Megatron cuts equal chunks),
//   --micro-batch-size, --global-batch-size (Megatron derives the data-parallel size from the world
//   and the accumulation steps from the two), --overlap-p2p-communication (overlap_p2p).
// Memory: --recompute-granularity selective, or full with --recompute-method uniform
//   --recompute-num-layers 1 (every layer a checkpoint, as the Program's full recompute);
//   ZeRO-1: --use-distributed-optimizer, with --num-distributed-optimizer-instances dp/g for a
//   shard group g; --overlap-grad-reduce and --overlap-param-gather with overlap_comm.
// Precision: --bf16, --fp16, or --bf16 --fp8-format hybrid (Transformer Engine's E4M3 forward, E5M2
//   backward: the simulator's fp8); fp32 none.
// Model (with a model): --num-layers, --hidden-size, --ffn-hidden-size, --num-attention-heads,
//   --group-query-attention --num-query-groups, --kv-channels, --seq-length,
//   --max-position-embeddings, --swiglu, --normalization RMSNorm, --norm-epsilon, --position-embedding-type rope
//   --rotary-base, --untie-embeddings-and-output-weights, --disable-bias-linear, --qk-layernorm,
//   --vocab-size is not an argument (the tokenizer sets it) and is said in a comment;
//   experts: --num-experts, --moe-router-topk, --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size,
//   --moe-layer-freq (a Python list where dense layers are), --moe-grouped-gemm,
//   --moe-token-dispatcher-type alltoall (the dispatcher the simulator models),
//   --moe-router-score-function sigmoid and --moe-router-enable-expert-bias (DeepSeek-V3);
//   latent attention: --multi-latent-attention, --q-lora-rank, --kv-lora-rank, --qk-head-dim,
//   --qk-pos-emb-head-dim, --v-head-dim.
// Each choice Megatron-LM cannot take as the plan says is a warning with the reason: ZeRO-2/3
// (Megatron-LM's distributed optimizer shards the optimizer only; its FSDP is another engine), the
// GPipe and ZB-H1 schedules, a stage split other than Megatron's (first/last stage counts only:
// --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers), ZeRO++, hpZ,
// offload, a framework other than Megatron-LM in the training file.
#pragma once

#include <string>
#include <vector>

#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::planner {

struct MegatronExport {
  std::vector<std::string> args;       // "--flag" or "--flag value", in the order above
  std::vector<std::string> comments;   // what the arguments leave to the user (the vocabulary, ...)
  std::vector<std::string> warnings;   // where Megatron-LM cannot run the plan as Stagecraft would
  // The arguments as a shell continuation, one per line, comments first (# ...).
  std::string text() const;
};

// `model` may be null: the parallel, batch, memory and precision arguments only.
MegatronExport to_megatron(const spec::Plan& plan, const spec::Training& training, const spec::Model* model);

}  // namespace stagecraft::planner
