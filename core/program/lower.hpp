// lower(): a validated plan -> the Program both interpreters run (ARCHITECTURE.md, "one Program,
// two interpreters"; docs/program.md). Pure: the same inputs give the same Program.
#pragma once

#include "core/program/program.hpp"

namespace stagecraft::program {

struct LowerOptions {
  // The forward passes only (scoring a model: `stagecraft eval --plan`): each stage's schedule
  // keeps its forward steps in their order, with their receives, sends, tp collectives and ZeRO-3
  // gathers and releases; no backward, gradient reduction, gradient norm or optimizer step.
  bool forward_only = false;
  // Threads that emit the stages' lists (each stage's list is independent of the others'); 1 for
  // callers that already run lowerings in parallel (the planner's search).
  int threads = 1;
  // >= 0: emit this stage's list only, the others' left empty (placement, buckets and chunks are
  // whole). Such a Program is for sim::contention_free_stage_s alone: its stages no longer match.
  int32_t only_stage = -1;
};

// Validates the plan against the model and training (tp*pp*dp ranks) and lowers it.
// Throws spec::SpecError for an invalid plan.
Program lower(const spec::Model& model, const spec::Training& training, const spec::Plan& plan, LowerOptions options = {});

}  // namespace stagecraft::program
