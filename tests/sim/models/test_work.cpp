// Work: the amounts behind the compute model. The compute model times an instruction as the sum
// of its units' work_seconds; the work of the whole instruction, evaluated at once, must give the
// same duration (work_seconds is linear in the amounts) for every compute instruction of plans
// that exercise each term. And the amounts of one unit, counted by hand.
#include "sim/models/work.hpp"

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "sim/models/compute.hpp"
#include "support.hpp"

namespace stagecraft::sim {
namespace {

using program::Op;

spec::Cluster cluster_with_curve() {
  spec::Cluster c = test::make_cluster();
  c.gpu.peak_flops = {{spec::Dtype::kFp32, 60e12}, {spec::Dtype::kBf16, 400e12}, {spec::Dtype::kFp16, 400e12}};
  c.gpu.hbm_Bps = 3e12;
  c.gpu.memory_efficiency = 0.8;
  c.gpu.matmul_efficiency = {{1e7, 0.2}, {1e9, 0.55}, {1e11, 0.8}, {1e13, 0.85}};
  c.gpu.activation_elems_per_s = 4e11;
  c.gpu.adam_params_per_s = 2e10;
  return c;
}

spec::Plan plan(int64_t tp, int64_t pp, spec::Schedule schedule, spec::Recompute recompute, bool sp, int64_t mb) {
  spec::Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = 1;
  p.micro_batch = mb;
  p.micro_batches = 2 * pp;
  p.schedule = schedule;
  p.recompute = recompute;
  p.sequence_parallel = sp;
  return p;
}

void expect_same_durations(const std::string& model, spec::Dtype dtype, const spec::Plan& p) {
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, model));
  spec::Training t;
  t.attention = "unfused";  // the hand derivations time the score GEMMs
  t.dtype = dtype;
  t.global_batch = p.micro_batch * p.micro_batches * p.dp;
  const program::Program prog = program::lower(m, t, p);
  const spec::Cluster c = cluster_with_curve();
  const ComputeModel reference(prog.model, c, prog.training, prog.plan);
  const WorkModel work(prog.model, prog.training, prog.plan);
  const double peak = c.gpu.peak_flops.at(dtype);
  int checked = 0;
  for (const program::RoleProgram& role : prog.roles) {
    for (const program::Instr& in : role.instrs) {
      double expected = 0, got = 0;
      if (program::is_compute(in.op)) {
        expected = reference.compute_s(in.op, in.unit_begin, in.unit_end);
        got = work_seconds(work.compute(in.op, in.unit_begin, in.unit_end), c.gpu, peak);
      } else if (in.op == Op::kOptimizerStep) {
        expected = reference.optimizer_gpu_s(in.elems);
        got = work_seconds(work.optimizer_gpu(in.elems), c.gpu, peak);
      } else {
        continue;
      }
      ASSERT_NEAR(got / expected, 1.0, 1e-12) << model << " " << program::to_string(in.op) << " units [" << in.unit_begin
                                              << ", " << in.unit_end << ")";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Work, EqualsTheComputeModelFp32GeluLearnedPositions) {
  expect_same_durations("tiny", spec::Dtype::kFp32, plan(1, 2, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 2));
}

TEST(Work, EqualsTheComputeModelTensorParallelSequenceParallelSelective) {
  expect_same_durations("gpt3-1.3b", spec::Dtype::kFp16, plan(4, 2, spec::Schedule::k1F1B, spec::Recompute::kSelective, true, 1));
}

TEST(Work, EqualsTheComputeModelSwigluGqaZeroBubbleFullRecompute) {
  expect_same_durations("llama3-8b", spec::Dtype::kBf16, plan(4, 2, spec::Schedule::kZbH1, spec::Recompute::kNone, false, 1));
  expect_same_durations("llama3-8b", spec::Dtype::kBf16, plan(2, 4, spec::Schedule::k1F1B, spec::Recompute::kFull, false, 1));
}

TEST(Work, OneMlpUnitByHand) {
  // tiny (h 64, f 256, s 64), fp32, tp 1, micro-batch 1: T = 64 tokens.
  // GEMMs 2·T·h·f = 2·64·64·256 = 2,097,152 FLOPs, twice (up and down);
  // bytes w·T·(11h + 4f) = 2·64·(704 + 1024) = 221,184.
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  spec::Training t;
  t.attention = "unfused";  // the hand derivations time the score GEMMs
  t.dtype = spec::Dtype::kFp32;
  const WorkModel work(m, t, plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 1));
  const Work w = work.compute(Op::kForward, 2, 3);  // unit 2 = block 0's MLP
  ASSERT_EQ(w.gemms.size(), 1u);
  EXPECT_EQ(w.gemms[0].flops, 2.0 * 64 * 64 * 256);
  EXPECT_EQ(w.gemms[0].count, 2.0);
  EXPECT_EQ(w.total_bytes(), 2.0 * 64 * (11 * 64 + 4 * 256));
  // GELU on T·f = 64·256 = 16,384 elements; again in the input gradient, not in the weight gradient.
  EXPECT_EQ(w.activation_elems, 64.0 * 256);
  EXPECT_EQ(work.compute(Op::kBackwardInput, 2, 3).activation_elems, 64.0 * 256);
  EXPECT_EQ(work.compute(Op::kBackwardWeight, 2, 3).activation_elems, 0.0);
  EXPECT_EQ(work.compute(Op::kBackward, 2, 3).activation_elems, 64.0 * 256);
  EXPECT_EQ(work.compute(Op::kForward, 1, 2).activation_elems, 0.0);  // attention: none
}

TEST(Work, EagerKernelsMoveTheirExtraPassesByHand) {
  // tiny (h 64, f 256, s 64, 4 heads), bf16 (w = 1), tp 1, micro-batch 1: T = 64 tokens.
  //   attention forward: fused T·(11h + 9·a·s) = 64·(704 + 9·4·64) = 64·3008 = 192,512 bytes;
  //                      eager T·(19h + 17·a·s) = 64·(1216 + 4352) = 64·5568 = 356,352, plus the
  //                      copies torch.matmul makes of q, k and v (4 bytes per element each, 12h):
  //                      64·(5568 + 768) = 64·6336 = 405,504
  //   MLP forward:       fused T·(11h + 4f) = 64·1728 = 110,592; eager T·(15h + 4f) = 64·1984 = 126,976
  // Backward input moves twice the forward bytes.
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  ASSERT_EQ(m.heads, 4);
  spec::Training t;
  t.attention = "unfused";  // the hand derivations time the score GEMMs
  t.dtype = spec::Dtype::kBf16;
  const spec::Plan p = plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 1);
  const WorkModel fused(m, t, p);
  t.kernels = spec::Kernels::kEager;
  const WorkModel eager(m, t, p);
  EXPECT_EQ(fused.compute(Op::kForward, 1, 2).total_bytes(), 64.0 * (11 * 64 + 9 * 4 * 64));
  EXPECT_EQ(eager.compute(Op::kForward, 1, 2).total_bytes(), 64.0 * (19 * 64 + 17 * 4 * 64 + 12 * 64));
  EXPECT_EQ(eager.compute(Op::kBackwardInput, 1, 2).total_bytes(), 2 * 64.0 * (19 * 64 + 17 * 4 * 64 + 12 * 64));
  EXPECT_EQ(fused.compute(Op::kForward, 2, 3).total_bytes(), 64.0 * (11 * 64 + 4 * 256));
  EXPECT_EQ(eager.compute(Op::kForward, 2, 3).total_bytes(), 64.0 * (15 * 64 + 4 * 256));
  // the GEMMs are the same
  EXPECT_EQ(eager.compute(Op::kForward, 1, 3).gemms.size(), fused.compute(Op::kForward, 1, 3).gemms.size());
  // training.json names it
  EXPECT_EQ(spec::training_from_json({{"global_batch", 1}, {"dtype", "bf16"}, {"kernels", "eager"}}, "t.json").kernels,
            spec::Kernels::kEager);
  EXPECT_THROW(spec::training_from_json({{"global_batch", 1}, {"dtype", "bf16"}, {"kernels", "triton"}}, "t.json"),
               spec::SpecError);
}

TEST(Work, EagerLlamaCodeMovesItsNormRotaryAndRepeatBytesByHand) {
  // tiny (h 64, f 256, s 64, 4 heads of d 16) made Llama-like: RMSNorm, RoPE, 2 K/V heads;
  // FlashAttention, tp 1, micro-batch 1: T = 64 tokens; q = 4·16 = 64, kv = 2·16 = 32 wide.
  // bf16, attention forward per token: 15h (dropout 5, residual 6, norm 4; no context copy under
  // a fused attention kernel) = 960, plus the eager passes
  //   RMSNorm 36h − the fused count's 4h: 32·64          = 2048
  //   rotary  20·(q + kv) = 20·96                         = 1920
  //   K/V repeated to 4 heads: 4·(q + kv) = 4·96          =  384
  //   = 960 + 4352 = 5312 bytes, ·64 tokens = 339,968; backward input twice that.
  // MLP (GELU) forward per token: 15h + 4f = 1984, plus RMSNorm 2048 = 4032, ·64 = 258,048.
  // fp32 (no casts): attention 2·15h = 1920, RMSNorm (28 − 8)·64 = 1280, rotary 8·96 = 768,
  // repeat 8·96 = 768: 4736 per token, ·64 = 303,104.
  spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  ASSERT_EQ(m.hidden, 64);
  ASSERT_EQ(m.heads, 4);
  ASSERT_EQ(m.head_dim(), 16);
  ASSERT_EQ(m.mlp, spec::Mlp::kGelu);
  m.norm = spec::Norm::kRmsNorm;
  m.position = spec::Position::kRope;
  m.kv_heads = 2;
  spec::Training t;
  t.dtype = spec::Dtype::kBf16;
  t.kernels = spec::Kernels::kEager;
  ASSERT_TRUE(t.flash_attention());
  const spec::Plan p = plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 1);
  const WorkModel eager(m, t, p);
  EXPECT_EQ(eager.compute(Op::kForward, 1, 2).total_bytes(), 64.0 * (960 + 2048 + 1920 + 384));
  EXPECT_EQ(eager.compute(Op::kBackwardInput, 1, 2).total_bytes(), 2 * 64.0 * (960 + 2048 + 1920 + 384));
  EXPECT_EQ(eager.compute(Op::kForward, 2, 3).total_bytes(), 64.0 * (15 * 64 + 4 * 256 + 2048));
  // fused kernels charge none of it: 11h per token for the attention unit
  t.kernels = spec::Kernels::kFused;
  EXPECT_EQ(WorkModel(m, t, p).compute(Op::kForward, 1, 2).total_bytes(), 64.0 * 11 * 64);
  t.kernels = spec::Kernels::kEager;
  t.dtype = spec::Dtype::kFp32;
  EXPECT_EQ(WorkModel(m, t, p).compute(Op::kForward, 1, 2).total_bytes(), 64.0 * (2 * 15 * 64 + 1280 + 768 + 768));
  // one K/V head per query head: no repeat; learned positions: no rotary
  t.dtype = spec::Dtype::kBf16;
  m.kv_heads = 4;
  m.position = spec::Position::kLearned;
  EXPECT_EQ(WorkModel(m, t, p).compute(Op::kForward, 1, 2).total_bytes(), 64.0 * (960 + 2048));
}

TEST(Work, TheLossMovesItsLogitsAsMegatronOrPyTorchComputeItByHand) {
  // tiny (h 64, V as the file says), tp 1, micro-batch 1: T = 64 tokens; the head is the last unit.
  //   fused (Megatron-LM): forward T·(4h + 38V), backward input T·(2·4h + 14V)
  //   eager (F.cross_entropy on fp32 logits): T·(4h + 22V), T·(8h + 26V)
  //   fp32, fused: T·(2·4h + 32V), T·(4·4h + 8V)
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  const double h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab), T = 64;
  spec::Training t;
  t.dtype = spec::Dtype::kBf16;
  const spec::Plan p = plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 1);
  const WorkModel fused(m, t, p);
  const int32_t head = fused.unit_count() - 1;
  EXPECT_EQ(fused.compute(Op::kForward, head, head + 1).total_bytes(), T * (4 * h + 38 * V));
  EXPECT_EQ(fused.compute(Op::kBackwardInput, head, head + 1).total_bytes(), T * (8 * h + 14 * V));
  t.kernels = spec::Kernels::kEager;
  const WorkModel eager(m, t, p);
  EXPECT_EQ(eager.compute(Op::kForward, head, head + 1).total_bytes(), T * (4 * h + 22 * V));
  EXPECT_EQ(eager.compute(Op::kBackwardInput, head, head + 1).total_bytes(), T * (8 * h + 26 * V));
  t.kernels = spec::Kernels::kFused;
  t.dtype = spec::Dtype::kFp32;
  const WorkModel fp32(m, t, p);
  EXPECT_EQ(fp32.compute(Op::kForward, head, head + 1).total_bytes(), T * (8 * h + 32 * V));
  EXPECT_EQ(fp32.compute(Op::kBackwardInput, head, head + 1).total_bytes(), T * (16 * h + 8 * V));
}

TEST(Work, SecondsWithAndWithoutTheArithmeticTerms) {
  // One GEMM of 1e9 FLOPs at efficiency 0.5 of 1e12: 2 ms; 1e6 bytes at 2e10 · 0.5 B/s: 0.1 ms;
  // 1e5 activation elements at 5e7 per second: 2 ms; 3e5 Adam parameters at 3e8 per second: 1 ms.
  // Rates left unset (0) drop their terms.
  Work w;
  w.add_gemm(1e9, 1);
  w.memory_bytes = 1e6;
  w.activation_elems = 1e5;
  w.adam_params = 3e5;
  spec::Gpu gpu;
  gpu.matmul_efficiency = {{1e6, 0.5}};
  gpu.hbm_Bps = 2e10;
  gpu.memory_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(work_seconds(w, gpu, 1e12), 1e9 / (1e12 * 0.5) + 1e6 / (2e10 * 0.5));
  gpu.activation_elems_per_s = 5e7;
  gpu.adam_params_per_s = 3e8;
  EXPECT_DOUBLE_EQ(work_seconds(w, gpu, 1e12), 1e9 / (1e12 * 0.5) + 1e6 / (2e10 * 0.5) + 1e5 / 5e7 + 3e5 / 3e8);
}

TEST(Work, MemoryKindsAndTheirRatesByHand) {
  // tiny (h 64, 4 heads, s 64), bf16, unfused, eager, tp 1, micro-batch 1: T = 64 tokens, a·s = 256.
  // Attention forward, per token, by kind (work.hpp, memory-bound work):
  //   softmax  4·a·s = 1024                      dropout  5·a·s + 5h = 1280 + 320 = 1600
  //   strided  mask 4·a·s + context copy 4h + torch.matmul's copies of q, k, v 12h = 1024 + 256 + 768 = 2048
  //   contiguous: the rest of 19h + 17·a·s + 12h = 5568 + 768 = 6336: 6336 − 1024 − 1600 − 2048 = 1664
  //     (norm 4h + residual 6h + the scale 4·a·s = 256 + 384 + 1024)
  // The backward input moves twice each; softmax's and dropout's backward kernels are contiguous.
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  spec::Training t;
  t.attention = "unfused";
  t.dtype = spec::Dtype::kBf16;
  t.kernels = spec::Kernels::kEager;
  const WorkModel work(m, t, plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 1));
  const Work f = work.compute(Op::kForward, 1, 2);
  EXPECT_EQ(f.kind(MemKind::kSoftmax), 64.0 * 1024);
  EXPECT_EQ(f.kind(MemKind::kDropout), 64.0 * 1600);
  EXPECT_EQ(f.kind(MemKind::kStrided), 64.0 * 2048);
  EXPECT_EQ(f.memory_bytes, 64.0 * 1664);
  EXPECT_EQ(f.softmax_row, 64.0);
  const Work b = work.compute(Op::kBackwardInput, 1, 2);
  EXPECT_EQ(b.kind(MemKind::kSoftmax), 0.0);
  EXPECT_EQ(b.kind(MemKind::kDropout), 0.0);
  EXPECT_EQ(b.kind(MemKind::kStrided), 2 * 64.0 * 2048);
  EXPECT_EQ(b.memory_bytes, 2 * 64.0 * (1664 + 1024 + 1600));

  // Seconds on a GPU of 1e12 B/s at memory_efficiency 0.8 whose profile rates the strided path at
  // 0.4, dropout at 0.5 and softmax at 0.6 (32 columns) to 0.2 (128): 64 columns is halfway in log2, 0.4.
  spec::Gpu gpu;
  gpu.matmul_efficiency = {{1e6, 0.5}};
  gpu.hbm_Bps = 1e12;
  gpu.memory_efficiency = 0.8;
  Work mem;  // f's memory-bound part alone
  mem.memory_bytes = f.memory_bytes;
  for (MemKind k : {MemKind::kStrided, MemKind::kSoftmax, MemKind::kDropout}) mem.add_bytes(k, f.kind(k));
  mem.softmax_row = f.softmax_row;
  // without rates of their own every kind runs at memory_efficiency
  EXPECT_DOUBLE_EQ(memory_seconds(mem, gpu), 64.0 * 6336 / (1e12 * 0.8));
  gpu.memory_kernels.strided = 0.4;
  gpu.memory_kernels.dropout = 0.5;
  gpu.memory_kernels.softmax = {{32, 0.6}, {128, 0.2}};
  EXPECT_NEAR(memory_kind_efficiency(gpu, MemKind::kSoftmax, 64), 0.4, 1e-12);
  const double expected = 64.0 * 1664 / (1e12 * 0.8) + 64.0 * 2048 / (1e12 * 0.4) + 64.0 * 1600 / (1e12 * 0.5) +
                          64.0 * 1024 / (1e12 * 0.4);
  EXPECT_NEAR(memory_seconds(mem, gpu), expected, 1e-18);
  EXPECT_NEAR(work_seconds(mem, gpu, 1e12), expected, 1e-18);
  // a profile's memory_kernels round-trip through the cluster file
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "h200-1"));
  EXPECT_GT(c.gpu.memory_kernels.strided, 0.0);
  const spec::Cluster back = spec::cluster_from_json(spec::to_json(c), "round-trip.json");
  EXPECT_EQ(back.gpu.memory_kernels.strided, c.gpu.memory_kernels.strided);
  EXPECT_EQ(back.gpu.memory_kernels.softmax, c.gpu.memory_kernels.softmax);
  // a fraction outside (0, 1] names the field
  nlohmann::json bad = spec::to_json(c);
  bad["gpu"]["memory_kernels"]["strided"] = 1.5;
  try {
    spec::cluster_from_json(bad, "bad.json");
    ADD_FAILURE() << "accepted strided 1.5";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("/gpu/memory_kernels/strided"), std::string::npos) << e.what();
  }
}

TEST(Work, AnOptimizerStepUpdatesItsParameters) {
  // fp32: 2·12 + 4 = 28 bytes per parameter, and every parameter counts for the Adam rate.
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  spec::Training t;
  t.attention = "unfused";  // the hand derivations time the score GEMMs
  t.dtype = spec::Dtype::kFp32;
  const WorkModel work(m, t, plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 1));
  const Work w = work.optimizer_gpu(1000);
  EXPECT_EQ(w.memory_bytes, 1000.0 * 28);
  EXPECT_EQ(w.adam_params, 1000.0);
  EXPECT_TRUE(w.gemms.empty());
}

TEST(Work, EfficiencyIsLogLinearBetweenPoints) {
  const std::vector<std::pair<double, double>> pts = {{1e9, 0.5}, {1e11, 0.7}};
  EXPECT_DOUBLE_EQ(matmul_efficiency(pts, 1e8), 0.5);   // flat below
  EXPECT_DOUBLE_EQ(matmul_efficiency(pts, 1e12), 0.7);  // flat above
  EXPECT_NEAR(matmul_efficiency(pts, 1e10), 0.6, 1e-12);  // halfway in log10
}

// FlashAttention ("attention": "flash", the default): one fused kernel per pass instead of the two
// score GEMMs and the softmax bytes. tiny (h 64, 4 heads of d 16, s 64), bf16, tp 1, micro-batch 2:
// b·a = 2·4 = 8 (sequence, head) pairs, T = 128 tokens.
//   forward kernel 2·b·a·s²·d = 2·8·64²·16 = 1,048,576 FLOPs (4·s²·d per head, halved: causal)
//   backward kernel 2.5x = 2,621,440 FLOPs; attention bytes T·11h = 128·704 (no 9·a·s scores)
TEST(Work, FlashAttentionKernelByHand) {
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  ASSERT_EQ(m.heads, 4);
  ASSERT_EQ(m.head_dim(), 16);
  spec::Training t;
  t.dtype = spec::Dtype::kBf16;
  ASSERT_EQ(t.attention, "flash");  // the default
  const spec::Plan p = plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 2);
  const WorkModel work(m, t, p);
  const double fwd = 2.0 * 8 * 64 * 64 * 16;
  const Work f = work.compute(Op::kForward, 1, 2);
  EXPECT_EQ(f.attention_fwd_flops, fwd);
  EXPECT_EQ(f.attention_bwd_flops, 0.0);
  EXPECT_EQ(f.attention_seq, 64.0);
  EXPECT_EQ(f.gemms.size(), 2u);  // QKV and out only
  EXPECT_EQ(f.total_bytes(), 128.0 * 11 * 64);
  const Work bi = work.compute(Op::kBackwardInput, 1, 2);
  EXPECT_EQ(bi.attention_bwd_flops, 2.5 * fwd);
  EXPECT_EQ(bi.attention_fwd_flops, 0.0);
  EXPECT_EQ(work.compute(Op::kBackwardWeight, 1, 2).attention_bwd_flops, 0.0);
  // selective recompute re-runs the forward kernel in the backward
  const WorkModel selective(m, t, plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kSelective, false, 2));
  EXPECT_EQ(selective.compute(Op::kBackwardInput, 1, 2).attention_fwd_flops, fwd);
  // unfused keeps the score GEMMs: 2·b·a of 2·s²·d each
  t.attention = "unfused";
  const Work u = WorkModel(m, t, p).compute(Op::kForward, 1, 2);
  EXPECT_EQ(u.attention_fwd_flops, 0.0);
  EXPECT_EQ(u.gemms.size(), 3u);
  EXPECT_EQ(u.total_bytes(), 128.0 * (11 * 64 + 9 * 4 * 64));

  // Seconds: a kernel measured at 32 and 128 tokens; 64 is halfway in log2, so forward runs at
  // (0.2 + 0.4) / 2 = 0.3 of peak and backward at (0.1 + 0.3) / 2 = 0.2.
  spec::AttentionKernel k;
  k.name = "k";
  k.forward = {{32, 0.2}, {128, 0.4}};
  k.backward = {{32, 0.1}, {128, 0.3}};
  EXPECT_NEAR(attention_efficiency(k.forward, 64), 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(attention_efficiency(k.forward, 16), 0.2);    // flat below
  EXPECT_DOUBLE_EQ(attention_efficiency(k.backward, 4096), 0.3); // and above
  Work both = f;
  both.add(bi);
  EXPECT_NEAR(attention_seconds(both, &k, 1e12), fwd / (1e12 * 0.3) + 2.5 * fwd / (1e12 * 0.2), 1e-18);
  EXPECT_THROW(attention_seconds(both, nullptr, 1e12), std::logic_error);
  // a table measured at the boost clock, kept at 0.8 of it under training load: 1/0.8 the time
  k.sustained = 0.8;
  EXPECT_NEAR(attention_seconds(both, &k, 1e12), (fwd / (1e12 * 0.3) + 2.5 * fwd / (1e12 * 0.2)) / 0.8, 1e-18);
  // the profile's field: read, written back, and refused outside (0, 1] by name
  const spec::Cluster h200 = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "h200-1"));
  const spec::AttentionKernel* fa2 = spec::find_attention_kernel(h200.gpu, "flash");
  ASSERT_NE(fa2, nullptr);
  EXPECT_LT(fa2->sustained, 1.0);
  EXPECT_EQ(spec::find_attention_kernel(spec::cluster_from_json(spec::to_json(h200), "rt.json").gpu, "flash")->sustained,
            fa2->sustained);
  nlohmann::json bad = spec::to_json(h200);
  bad["gpu"]["attention_kernels"][fa2->name]["sustained"] = 0.0;
  try {
    spec::cluster_from_json(bad, "bad.json");
    ADD_FAILURE() << "accepted sustained 0";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("/gpu/attention_kernels/" + fa2->name + "/sustained"), std::string::npos) << e.what();
  }
}

// The kernel a training names: "flash" is the profile's default, another name one it lists, and
// a GPU without measurements cannot run "flash" (the cluster file is named), nor an unknown kernel
// (the training file is named).
TEST(Work, TheAttentionKernelIsTheProfilesOrAnError) {
  spec::Cluster c = cluster_with_curve();
  c.file = "c.json";
  spec::Training t = spec::training_from_json({{"global_batch", 1}, {"dtype", "bf16"}}, "t.json");
  try {
    attention_kernel(c, t);
    ADD_FAILURE() << "no error";
  } catch (const spec::SpecError& e) {
    EXPECT_EQ(e.file(), "c.json");
    EXPECT_EQ(e.pointer(), "/gpu/attention_kernels");
    EXPECT_NE(std::string(e.what()).find("\"unfused\""), std::string::npos) << e.what();
  }
  c.gpu.attention_kernels = {{"fa2", {{512, 0.3}}, {{512, 0.3}}, ""}, {"cudnn", {{512, 0.5}}, {{512, 0.5}}, ""}};
  c.gpu.default_attention_kernel = "fa2";
  EXPECT_EQ(attention_kernel(c, t)->name, "fa2");
  t.attention = "cudnn";
  EXPECT_EQ(attention_kernel(c, t)->name, "cudnn");
  t.attention = "unfused";
  EXPECT_EQ(attention_kernel(c, t), nullptr);
  t.attention = "fa9";
  try {
    attention_kernel(c, t);
    ADD_FAILURE() << "no error";
  } catch (const spec::SpecError& e) {
    EXPECT_EQ(e.file(), "t.json");
    EXPECT_EQ(e.pointer(), "/attention");
    EXPECT_NE(std::string(e.what()).find("\"cudnn\""), std::string::npos) << e.what();
  }
}

// fp8: the tiny model's block GEMMs run at the FP8 peak, looked up on the 16-bit curve at F / r
// (r = 800/400 = 2), with Transformer Engine's casts as memory-bound bytes. Attention unit of
// block 0, micro-batch 2 (T = 128 tokens), 2 micro-batches, h = 64, QKV 64 x 192, out 64 x 64:
//   forward casts  QKV input 1·T·64 (norm-fed) + out input 4·T·64 + weights 4·(64·192 + 64·64)/2
//   backward casts output gradients 4·T·(192 + 64)
TEST(Work, Fp8GemmsAtTheFp8PeakWithTheirCasts) {
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "tiny"));
  spec::Training t;
  t.dtype = spec::Dtype::kFp8;
  const spec::Plan p = plan(1, 1, spec::Schedule::k1F1B, spec::Recompute::kNone, false, 2);
  const WorkModel work(m, t, p);
  const Work f = work.compute(Op::kForward, 1, 2);
  ASSERT_EQ(f.gemms.size(), 2u);
  EXPECT_TRUE(f.gemms[0].fp8 && f.gemms[1].fp8);
  const double T = 128;
  EXPECT_EQ(f.memory_bytes, T * 11 * 64 + 1 * T * 64 + 4 * T * 64 + 4.0 * (64 * 192 + 64 * 64) / 2);
  const Work bi = work.compute(Op::kBackwardInput, 1, 2);
  EXPECT_EQ(bi.memory_bytes, 2 * T * 11 * 64 + 4 * T * (192 + 64));
  // the head stays 16-bit
  const Work head = work.compute(Op::kForward, work.unit_count() - 1, work.unit_count());
  ASSERT_EQ(head.gemms.size(), 1u);
  EXPECT_FALSE(head.gemms[0].fp8);

  spec::Cluster c = cluster_with_curve();
  c.gpu.peak_flops[spec::Dtype::kFp8] = 800e12;
  const double F = 2 * T * 64 * 192;
  const GemmRate r = gemm_rate({F, 1, true}, 400e12, 800e12);
  EXPECT_EQ(r.peak, 800e12);
  EXPECT_EQ(r.curve_flops, F / 2);
  Work one;
  one.add_gemm(F, 1, true);
  EXPECT_NEAR(work_seconds(one, c.gpu, 400e12), F / (800e12 * matmul_efficiency(c.gpu.matmul_efficiency, F / 2)), 1e-18);
  // without an FP8 peak an fp8 training is refused, naming the cluster's /gpu/peak_flops/fp8
  spec::Training unfused = t;
  unfused.attention = "unfused";   // the hand-made GPU lists no fused kernel
  test::expect_spec_error([&] { ComputeModel(m, cluster_with_curve(), unfused, p); }, "/gpu/peak_flops/fp8", "missing");
  // MFU's peak is the 16-bit one
  EXPECT_EQ(ComputeModel(m, c, unfused, p).peak_flops(), 400e12);
}

}  // namespace
}  // namespace stagecraft::sim
