// The executor's model states against the simulator's memory model (sim/models/memory.hpp) for
// tensor-parallel plans: on every rank (stage, dp index, tp index) the bytes StageState allocates
// for parameters, gradients and Adam state are sim::model_states of the Program's per-tp-rank stage
// parameters, in fp32 (4 bytes a value, Adam's m and v 8), with two differences the executor has
// and the model states do not, derived here: the stage buffer padded to dp x S (S = ceil(P / dp),
// ZeRO's shard), and under ZeRO >= 1 with dp > 1 the shard's reduce-scatter target (4 S bytes)
// beside the whole-stage accumulation buffer.
#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/memory.hpp"
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
  for (const spec::Model& model : {test::tiny_model(), test::tiny_llama_model()}) {
    for (const test::PlanSpec& spec : plans) {
      if (model.kv_heads % spec.tp != 0) continue;
      const program::Program prog = program::lower(model, test::tiny_training(), test::make_plan(spec));
      for (int64_t s = 0; s < spec.pp; ++s) {
        int64_t stage_params = 0;  // per tp rank (the Program's chunks)
        for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) stage_params += prog.chunk(s, c).params;
        const sim::ModelStates want = sim::model_states(stage_params, 0, prog.plan.zero, spec.dp, prog.training.dtype);
        const int64_t shard = (stage_params + spec.dp - 1) / spec.dp;
        const int64_t padding = 4 * (spec.dp * shard - stage_params);
        const int64_t rs_target = spec.zero >= 1 && spec.dp > 1 ? 4 * shard : 0;
        for (int64_t d = 0; d < spec.dp; ++d) {
          for (int64_t t = 0; t < spec.tp; ++t) {
            const StageLayout layout(prog, s, d, t);
            MemoryTracker mem;
            const StageState state(layout, false, mem);
            const std::string where = model.name + " " + spec.name() + " stage " + std::to_string(s) + " dp " +
                                      std::to_string(d) + " tp " + std::to_string(t);
            EXPECT_EQ(layout.elems(), stage_params) << where;
            EXPECT_EQ(mem.bytes(MemoryKind::kParams), want.params + padding) << where;
            EXPECT_EQ(mem.bytes(MemoryKind::kGrads), want.grads + padding + rs_target) << where;
            EXPECT_EQ(mem.bytes(MemoryKind::kOptimizer), want.optimizer + (spec.zero == 0 ? 2 * padding : 0)) << where;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace stagecraft::executor
