// Transformer Engine's TP communication overlap (sim/models/tp_overlap.hpp): the time a
// collective adds beside its GEMM, by hand; the overlapped GEMMs as the compute model times them;
// and what the simulator does with it.
#include "sim/models/tp_overlap.hpp"

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/program/lower.hpp"
#include "sim/models/compute.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::sim {
namespace {

using program::Op;
using program::UnitKind;

// tp 4 on 132 SMs; attention: column GEMMs (QKV) 2 ms, row GEMM (proj) 1 ms.
TpOverlap attention_overlap() {
  TpOverlap o;
  o.on = true;
  o.tp = 4;
  o.sm_count = 132;
  o.gemms[static_cast<std::size_t>(UnitKind::kAttention)] = {2e-3, 1e-3};
  return o;
}

TEST(TpOverlap, EachMethodHidesWhatItsGemmCovers) {
  const TpOverlap o = attention_overlap();
  const UnitKind a = UnitKind::kAttention;
  // forward AG -> QKV, ring exchange over 4 chunks: 3/4 of the 2 ms GEMM hides it.
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, a, Op::kTpAllGather, false, 1e-3), 0.0);         // 1 - 1.5 < 0
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpAllGather, false, 2e-3), 0.5e-3, 1e-15);    // 2 - 1.5
  // forward proj -> RS, pipeline in 4 splits on 132 - 16 SMs: g' = 1 ms * 132/116 = 1.137931 ms;
  // max(1/4, 1 - 3/4 * 1.137931) = 0.25 ms exposed, plus g' - g = 0.137931 ms of slower GEMM.
  const double slowed = 1e-3 * 132.0 / 116.0;
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpReduceScatter, false, 1e-3), 0.25e-3 + (slowed - 1e-3), 1e-15);
  // backward AG (output gradient) -> proj dgrad (the row GEMM's shape, 1 ms): 1 - 3/4 = 0.25 ms.
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpAllGather, true, 1e-3), 0.25e-3, 1e-15);
  // backward RS (input gradient) beside the QKV wgrad (2 ms), bulk on 116 SMs: g' = 2.275862 ms;
  // a 3 ms RS shows 3 - g' + (g' - 2) = 1 ms; a 1 ms one only the slower GEMM, g' - g.
  const double wgrad = 2e-3 * 132.0 / 116.0;
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpReduceScatter, true, 3e-3), 1e-3, 1e-15);
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpReduceScatter, true, 1e-3), wgrad - 2e-3, 1e-15);
}

TEST(TpOverlap, NothingElseIsOverlapped) {
  TpOverlap o = attention_overlap();
  // the embedding's and the head's collectives, and all-reduces, keep their time
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, UnitKind::kHead, Op::kTpAllGather, false, 1e-3), 1e-3);
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, UnitKind::kEmbedding, Op::kTpReduceScatter, false, 1e-3), 1e-3);
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, UnitKind::kAttention, Op::kTpAllReduce, false, 1e-3), 1e-3);
  o.on = false;
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, UnitKind::kAttention, Op::kTpAllGather, false, 1e-3), 1e-3);
  // no sm_count in the profile: the pipeline's GEMM is not slowed, max(1/4, 1 - 3/4) = 0.25 ms
  o = attention_overlap();
  o.sm_count = 0;
  EXPECT_NEAR(tp_overlapped_s(o, UnitKind::kAttention, Op::kTpReduceScatter, false, 1e-3), 0.25e-3, 1e-15);
}

// Megatron-LM's own overlap (framework "megatron"): the backward all-reduce (or, with sequence
// parallelism, reduce-scatter) beside the column-parallel wgrad GEMM, NCCL holding 16 of 108 SMs
// while it runs, which slows the GEMM by min(T, g) · 16/92. Attention QKV wgrad 2 ms: a 3 ms
// all-reduce shows max(3 - 2, 2 · 16/92) = 1 ms, a 1 ms one max(1 - 2, 1 · 16/92) = 0.173913 ms; the
// head's 4 ms logits wgrad leaves a 1 ms all-reduce 16/92 ms. Forward collectives wait.
TEST(TpOverlap, MegatronsAsynchronousBackwardAllReduceHidesBehindTheWeightGradient) {
  TpOverlap o;
  o.async_grad = true;
  o.tp = 8;
  o.nccl_share = 16.0 / 108.0;
  o.gemms[static_cast<std::size_t>(UnitKind::kAttention)] = {2e-3, 1e-3};
  o.gemms[static_cast<std::size_t>(UnitKind::kHead)] = {4e-3, 0};
  const UnitKind a = UnitKind::kAttention;
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpAllReduce, true, 3e-3), 1e-3, 1e-15);
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpAllReduce, true, 1e-3), 1e-3 * 16.0 / 92.0, 1e-15);
  EXPECT_NEAR(tp_overlapped_s(o, a, Op::kTpReduceScatter, true, 3e-3), 1e-3, 1e-15);
  EXPECT_NEAR(tp_overlapped_s(o, UnitKind::kHead, Op::kTpAllReduce, true, 1e-3), 1e-3 * 16.0 / 92.0, 1e-15);
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, a, Op::kTpAllReduce, false, 3e-3), 3e-3);
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, a, Op::kTpAllGather, true, 3e-3), 3e-3);
  EXPECT_DOUBLE_EQ(tp_overlapped_s(o, UnitKind::kEmbedding, Op::kTpAllReduce, true, 3e-3), 3e-3);
  // the framework decides: Megatron-LM since 2021-09 overlaps, its 2021 code and the others do not
  EXPECT_TRUE(spec::framework_profile(spec::Framework::kMegatron, spec::Dtype::kBf16).tp_grad_overlap);
  EXPECT_FALSE(spec::framework_profile(spec::Framework::kMegatron2021, spec::Dtype::kBf16).tp_grad_overlap);
  EXPECT_FALSE(spec::framework_profile(spec::Framework::kDeepSpeed, spec::Dtype::kBf16).tp_grad_overlap);
  EXPECT_EQ(spec::parse_framework("megatron-2021"), spec::Framework::kMegatron2021);
}

spec::Model one_block() {
  return spec::model_from_json({{"name", "one-block"}, {"layers", 2}, {"hidden", 64}, {"heads", 4}, {"ffn_hidden", 256},
                                {"vocab", 64}, {"seq_len", 32}, {"tied_embeddings", false}},
                               "one-block.json");
}

TEST(TpOverlap, TheComputeModelTimesTheBlockLinearsOfOneMicroBatch) {
  // GEMMs at 1e12 FLOP/s, fp32, tp 2, micro-batch 2 of 32 tokens: T = 64.
  //   attention column: QKV 2·T·h·(3h/2) = 2·64·64·96 = 786,432 FLOPs -> 0.786432 µs
  //   attention row:    proj 2·T·(h/2)·h = 2·64·32·64 = 262,144 FLOPs -> 0.262144 µs
  //   MLP column: fc1 2·T·h·(f/2) = 2·64·64·128 = 1,048,576; row: fc2 the same
  spec::Cluster c = test::make_cluster();
  c.gpu.peak_flops[spec::Dtype::kFp32] = 1e12;
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  const spec::Training t = spec::training_from_json(
      {{"global_batch", 2}, {"dtype", "fp32"}, {"attention", "unfused"}, {"tp_comm_overlap", true}}, "t.json");
  const spec::Plan sp = spec::plan_from_json({{"tp", 2}, {"micro_batch", 2}, {"sequence_parallel", true}}, "p.json");
  const ComputeModel cm(one_block(), c, t, sp);
  ASSERT_TRUE(cm.tp_overlap().on);
  EXPECT_EQ(cm.tp_overlap().tp, 2);
  const TpOverlapGemms& a = cm.tp_overlap().gemms[static_cast<std::size_t>(UnitKind::kAttention)];
  const TpOverlapGemms& m = cm.tp_overlap().gemms[static_cast<std::size_t>(UnitKind::kMlp)];
  EXPECT_NEAR(a.column_s, 786432e-12, 1e-18);
  EXPECT_NEAR(a.row_s, 262144e-12, 1e-18);
  EXPECT_NEAR(m.column_s, 1048576e-12, 1e-18);
  EXPECT_NEAR(m.row_s, 1048576e-12, 1e-18);
  // TE requires sequence parallelism: without it (or without the training's flag) nothing overlaps
  const spec::Plan no_sp = spec::plan_from_json({{"tp", 2}, {"micro_batch", 2}}, "p.json");
  EXPECT_FALSE(ComputeModel(one_block(), c, t, no_sp).tp_overlap().on);
  spec::Training off = t;
  off.tp_comm_overlap = false;
  EXPECT_FALSE(ComputeModel(one_block(), c, off, sp).tp_overlap().on);
}

TEST(TpOverlap, TheSimulatedStepSavesWhatTheCollectivesHide) {
  // A tp 4 sequence-parallel plan on one 4-GPU node (GEMMs at 1e14 FLOP/s, NVLink 100 GB/s): a
  // collective moves T·h·2 = 1024·512·2 bytes (10.5 µs) beside GEMMs of a few µs, so each hides
  // part of it and the step is shorter; without sequence parallelism nothing changes.
  const spec::Cluster c = test::ideal_cluster(1, 4);
  spec::Training t = spec::training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"attention", "unfused"}}, "t.json");
  spec::Training with = t;
  with.tp_comm_overlap = true;
  const spec::Model model = spec::model_from_json({{"name", "wide"}, {"layers", 2}, {"hidden", 512}, {"heads", 8},
                                                   {"ffn_hidden", 2048}, {"vocab", 512}, {"seq_len", 512}},
                                                  "wide.json");
  for (const bool sp : {true, false}) {
    const spec::Plan plan = spec::plan_from_json({{"tp", 4}, {"micro_batch", 2}, {"micro_batches", 4}, {"sequence_parallel", sp}},
                                                 "p.json");
    const double base = simulate(program::lower(model, t, plan), c).metrics.step_time_s;
    const double overlapped = simulate(program::lower(model, with, plan), c).metrics.step_time_s;
    if (sp) {
      EXPECT_LT(overlapped, base);
    } else {
      EXPECT_DOUBLE_EQ(overlapped, base);
    }
  }
}

}  // namespace
}  // namespace stagecraft::sim
