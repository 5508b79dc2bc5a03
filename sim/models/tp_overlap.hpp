// Transformer Engine's tensor-parallel communication overlap (training.json "tp_comm_overlap";
// Megatron-LM --tp-comm-overlap, NeMo tp_comm_overlap), with sequence parallelism: each block
// linear's all-gather or reduce-scatter runs in chunks beside its GEMM through userbuffers. The
// methods and their resources are TE's defaults (transformer_engine/pytorch/module/base.py,
// initialize_ub: methods, get_default_config):
//   forward   AG -> QKV, fc1 GEMM       ring exchange, num_splits = t, copy engines (num_sm 1)
//             proj, fc2 GEMM -> RS      pipeline, num_splits 4, 16 SMs taken from the GEMM
//   backward  AG (output grad) -> proj, fc2 dgrad GEMM   ring exchange
//             RS (input grad) beside the QKV, fc1 wgrad GEMM   bulk, 16 SMs
// A collective of contention-free time T beside a GEMM of time g then holds the compute for
//   ring exchange  D = max(0, T - (t-1)/t * g)           the first chunk's GEMM needs no data,
//                                                        each later one hides one exchange step
//   pipeline (n = 4)  D = max(T/n, T - (n-1)/n * g') + (g' - g)   the last chunk's RS is exposed
//   bulk           D = max(0, T - g') + (g' - g)          the whole collective beside the GEMM
// with g' = g * SM / (SM - 16), the GEMM on the SMs the communication kernels leave (set_sm_margin;
// g' = g when the profile has no sm_count). D replaces T as the collective's duration: the
// Program keeps the collective between the computes it joins, and D is what the overlapped pair
// adds to the GEMM alone. The embedding's and the head's collectives are not overlapped (TE's
// userbuffers serve the block linears only); without sequence parallelism nothing is (TE requires
// it). The planner's step-time bounds take the same D (planner/prune.cpp).
//
// Without TE's overlap, Megatron-LM's own (framework "megatron", FrameworkProfile::tp_grad_overlap:
// ColumnParallelLinearWithAsyncAllreduce since 2021-09, the sequence-parallel reduce-scatter since
// 2022-03) issues the input gradient's all-reduce (or reduce-scatter) after a block's backward
// asynchronously and computes the QKV / fc1 weight gradient beside it (the head's logits linear
// likewise: its all-reduce beside its weight gradient), NCCL's kernels holding
// f = channels / SM of the SMs while they run (the simulator's SM-sharing rule, simulation.hpp:
// the compute beside them min(T, g) · f/(1 - f) longer):
//   D = max(T - g, min(T, g) · f/(1 - f))
#pragma once

#include <array>
#include <cstdint>

#include "core/program/instruction.hpp"
#include "core/program/units.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::sim {

// A unit's overlapped GEMMs, for one micro-batch: the column-parallel linears (QKV; fc1, or gate
// and up; the head's logits) and the row-parallel one (attention output; fc2), seconds. Their
// dgrad and wgrad GEMMs have the same shapes.
struct TpOverlapGemms {
  double column_s = 0;
  double row_s = 0;
};

struct TpOverlap {
  bool on = false;              // TE: tp_comm_overlap, sequence parallelism and tp > 1
  bool async_grad = false;      // Megatron-LM: the backward all-reduce / reduce-scatter beside the wgrad GEMM
  double nccl_share = 0;        // f of the SMs NCCL's kernels hold (async_grad), 0 without sm_count
  int64_t tp = 1;
  int64_t sm_count = 0;         // the GPU's, 0 when the profile has none
  std::array<TpOverlapGemms, 4> gemms{};   // by UnitKind (the embedding: none)
};

// f = min(nccl.channels, SMs) / SMs: the share of the GPU's SMs NCCL's kernels hold while a
// collective runs (one CTA per channel, enqueue.cc); 0 when the profile has no sm_count. The
// simulator's SM-sharing rule (simulation.hpp) and Megatron-LM's overlap here both use it.
double nccl_sm_fraction(const spec::Cluster& cluster);

// Which overlaps a (training, plan) has: `on` (TE: tp_comm_overlap with sequence parallelism over
// tp > 1) and `async_grad` (the framework's tp_grad_overlap with tp > 1); tp set, no GEMM times.
TpOverlap tp_overlap_modes(const spec::Training& training, const spec::Plan& plan);

inline constexpr int64_t kTpOverlapSms = 16;     // num_sm of the pipeline and bulk methods
inline constexpr int32_t kTpOverlapSplits = 4;   // num_splits of the pipeline method

// The time D a tensor-parallel collective `op` (TpAllGather or TpReduceScatter) of contention-free
// time T_s adds around unit kind `kind`'s pass (`backward`: a backward or backward-input pass; else
// forward or recompute), seconds; T_s itself where nothing overlaps it.
double tp_overlapped_s(const TpOverlap& o, program::UnitKind kind, program::Op op, bool backward, double T_s);
// Whether an overlap applies to that collective at all (tp_overlapped_s may then differ from T_s):
// what calibrate needs to know to leave its time out of the link fit.
bool tp_overlapped(const TpOverlap& o, program::UnitKind kind, program::Op op, bool backward);

}  // namespace stagecraft::sim
