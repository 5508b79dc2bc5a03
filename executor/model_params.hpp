// The whole model's parameters assembled from every rank (rank 0 gets them), in the
// single-rank layout ParamLayout(model): how a distributed run is compared with a single-rank
// one, and what a run's parameter checksum is computed over. Each rank contributes the
// positions of its own shard (under every ZeRO stage those are valid on it after a step); the
// last stage's copy of a tied embedding table is returned apart, so a caller can check that it
// still equals the table. Not a checkpoint (checkpoint.hpp keeps optimizer state, per rank).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "executor/runner.hpp"

namespace stagecraft::executor {

struct ModelParams {
  std::vector<float> values;      // rank 0: ParamLayout(model).size() values; other ranks: empty
  std::vector<float> tied_copy;   // rank 0: the last stage's copy of embedding.wte, if any
};

// Collective over the runner's communicator.
ModelParams gather_model_params(Runner& runner);

// The same assembly from parts: what one rank contributes (its own shard's positions of `params`,
// the stage's padded flat buffer laid out by `layout`), and the whole model from every world
// rank's contribution, in rank order (how `export hf` reads a checkpoint without running it).
std::string own_records(const StageLayout& layout, std::span<const float> params);
ModelParams assemble_model_params(const program::Program& prog, const std::vector<std::string>& records_by_rank);

// FNV-1a (64-bit, core/text/hash.hpp) of the bytes of `values`, as 16 hex digits.
std::string checksum(std::span<const float> values);

}  // namespace stagecraft::executor
