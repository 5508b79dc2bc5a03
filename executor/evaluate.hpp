// evaluate(): the cross-entropy of a model on a corpus's first N windows, forward only — how a
// checkpoint is scored without training (`stagecraft eval`). Window j is the sequential order's
// (corpus.hpp): tokens [j*T, j*T + T] of the file, T = seq_len, the first T the inputs and the last
// T their targets. Each window's loss is the mean over its T tokens of -log softmax(logits)[target]
// (transformers' causal-LM loss on that window); the mean is over all N*T tokens, which with equal
// windows is the mean of the windows' losses.
//
// Under mpirun the windows are dealt round-robin over the ranks (rank r scores windows r, r + W,
// ...), each rank holding the whole model; every rank returns every window's loss.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/spec/model.hpp"
#include "executor/comm/communicator.hpp"
#include "executor/data/corpus.hpp"

namespace stagecraft::executor {

struct EvalResult {
  std::vector<double> losses;  // per window, nats
  double mean = 0;             // over every token, nats
  int64_t tokens = 0;          // N * T
};

// `params`: the whole model in ParamLayout(m)'s order; `corpus` must be a file corpus of m's
// vocab and seq_len (its order is ignored: windows are sequential). Collective over `comm`.
// `log_probs` (one rank only): receives log softmax of the logits, [windows, T, V] row-major,
// the log of the head's softmax (exact to float rounding where a probability is above ~1e-38).
EvalResult evaluate(const spec::Model& m, std::span<const float> params, const Corpus& corpus, int64_t windows,
                    Communicator& comm, std::vector<float>* log_probs = nullptr);

}  // namespace stagecraft::executor
