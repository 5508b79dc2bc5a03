// The executor's model states against the simulator's memory model (sim/models/memory.hpp) for
// tensor-parallel plans: on every rank (stage, dp index, tp index) the bytes StageState allocates
// for parameters, gradients and Adam state are sim::model_states of the Program's per-tp-rank stage
// parameters, in fp32 (4 bytes a value, Adam's m and v 8), with two differences the executor has
// and the model states do not, derived here: the stage buffer padded to dp x S (S = ceil(P / dp),
// ZeRO's shard), and under ZeRO >= 1 with dp > 1 the shard's reduce-scatter target (4 S bytes)
// beside the whole-stage accumulation buffer. In bf16 (mixed precision, executor/precision.hpp) the
// model states are the 16-bit ones — 2-byte parameters, K = 12 bytes of fp32 master, m and v —
// except the gradients, which the executor accumulates in fp32 (Megatron's main_grad) where the
// model counts 2 bytes: twice the model's.
#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/memory.hpp"
#include "executor/zero/ranges.hpp"
#include "executor/zero/stage_layout.hpp"
#include "executor/zero/stage_state.hpp"
#include "plans.hpp"
#include "sim/models/memory.hpp"

namespace stagecraft::executor {
namespace {

TEST(MemoryModel, ExecutorModelStatesEqualTheSimulatorsOnEveryTensorParallelRank) {
  std::vector<test::PlanSpec> plans;
  for (const test::PlanSpec& p : test::tensor_parallel_matrix()) {
    if (p.zero <= 1 && !p.offload) plans.push_back(p);
  }
  ASSERT_GE(plans.size(), 8u);
  spec::Training bf16 = test::tiny_training();
  bf16.dtype = spec::Dtype::kBf16;
  for (const spec::Training& training : {test::tiny_training(), bf16}) {
  const bool half = training.dtype == spec::Dtype::kBf16;
  for (const spec::Model& model : {test::tiny_model(), test::tiny_llama_model()}) {
    for (const test::PlanSpec& spec : plans) {
      if (model.kv_heads % spec.tp != 0) continue;
      const program::Program prog = program::lower(model, training, test::make_plan(spec));
      for (int64_t s = 0; s < spec.pp; ++s) {
        int64_t stage_params = 0;  // per tp rank (the Program's chunks)
        for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) stage_params += prog.chunk(s, c).params;
        const sim::ModelStates want = sim::model_states(stage_params, 0, prog.plan.zero, spec.dp, prog.training.dtype);
        const int64_t shard = (stage_params + spec.dp - 1) / spec.dp;
        const int64_t pad = spec.dp * shard - stage_params;  // elements
        const int64_t padding = 4 * pad;
        const int64_t rs_target = spec.zero >= 1 && spec.dp > 1 ? 4 * shard : 0;
        for (int64_t d = 0; d < spec.dp; ++d) {
          for (int64_t t = 0; t < spec.tp; ++t) {
            const StageLayout layout(prog, s, d, t);
            MemoryTracker mem;
            const StageState state(layout, false, mem);
            const std::string where = model.name + " " + spec.name() + " " + spec::to_string(training.dtype) + " stage " +
                                      std::to_string(s) + " dp " + std::to_string(d) + " tp " + std::to_string(t);
            EXPECT_EQ(layout.elems(), stage_params) << where;
            if (!half) {
              EXPECT_EQ(mem.bytes(MemoryKind::kParams), want.params + padding) << where;
              EXPECT_EQ(mem.bytes(MemoryKind::kGrads), want.grads + padding + rs_target) << where;
              EXPECT_EQ(mem.bytes(MemoryKind::kOptimizer), want.optimizer + (spec.zero == 0 ? 8 * pad : 0)) << where;
            } else {
              EXPECT_EQ(mem.bytes(MemoryKind::kParams), want.params + 2 * pad) << where;
              EXPECT_EQ(mem.bytes(MemoryKind::kGrads), 2 * want.grads + 4 * pad + rs_target) << where;
              EXPECT_EQ(mem.bytes(MemoryKind::kOptimizer), want.optimizer + (spec.zero == 0 ? 12 * pad : 0)) << where;
            }
          }
        }
      }
    }
  }
  }
}

// With experts partitioned apart (ZeRO-1, StageLayout "split"), the simulator counts the dense
// states over dp and the routed experts' over their own group (sim/memory_accounting.cpp):
// model_states(P_d, dp) + model_states(P_e, edp). The executor allocates exactly that Adam state
// (8 bytes over S_d + S_e, the shards ceil(P_d / dp) and ceil(P_e / edp)); its parameters and
// gradient buffer are the stage padded per set (P + pad_d + pad_e, pad = group x shard - P), and
// beside them the packed reduce-scatter target 4 (S_d + S_e).
TEST(MemoryModel, ExpertsPartitionedApartEqualTheSimulatorsModelStates) {
  spec::Model m = test::tiny_llama_model();
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.ffn_hidden = 64;
  const std::vector<test::PlanSpec> plans = {
      {.dp = 4, .micro_batches = 2, .zero = 1, .ep = 2},
      {.pp = 2, .dp = 2, .micro_batches = 4, .zero = 1, .ep = 2},
      {.tp = 2, .dp = 2, .micro_batches = 4, .zero = 1, .sequence_parallel = true, .framework = spec::Framework::kMegatron},
  };
  for (const test::PlanSpec& spec : plans) {
    const program::Program prog = program::lower(m, test::tiny_training(spec.framework), test::make_plan(spec));
    ASSERT_TRUE(prog.placement.experts_apart) << spec.name();
    const int64_t edp = prog.plan.expert_dp();
    for (int64_t s = 0; s < spec.pp; ++s) {
      int64_t pe = 0, p = 0;
      for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) p += prog.chunk(s, c).params, pe += prog.chunk(s, c).expert_params;
      const int64_t pd = p - pe;
      const sim::ModelStates dense = sim::model_states(pd, 0, prog.plan.zero, spec.dp, prog.training.dtype);
      const sim::ModelStates experts = sim::model_states(pe, 0, prog.plan.zero, edp, prog.training.dtype);
      const int64_t sd = (pd + spec.dp - 1) / spec.dp, se = (pe + edp - 1) / edp;
      const int64_t pad = (spec.dp * sd - pd) + (edp * se - pe);
      for (int64_t d = 0; d < spec.dp; ++d) {
        for (int64_t t = 0; t < spec.tp; ++t) {
          const StageLayout layout(prog, s, d, t);
          MemoryTracker mem;
          const StageState state(layout, false, mem);
          const std::string where = spec.name() + " stage " + std::to_string(s) + " dp " + std::to_string(d) + " tp " + std::to_string(t);
          EXPECT_EQ(total(layout.expert_ranges()), pe) << where;
          EXPECT_EQ(mem.bytes(MemoryKind::kOptimizer), dense.optimizer + experts.optimizer) << where;
          EXPECT_EQ(mem.bytes(MemoryKind::kParams), dense.params + experts.params + 4 * pad) << where;
          EXPECT_EQ(mem.bytes(MemoryKind::kGrads), dense.grads + experts.grads + 4 * pad + 4 * (sd + se)) << where;
        }
      }
    }
  }
}

}  // namespace
}  // namespace stagecraft::executor
