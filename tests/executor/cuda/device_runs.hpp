// What the CUDA runner tests share: runner options on the CUDA backend (or the CPU one), and a
// short training run's losses and final parameters, through the local transport or NCCL's.
#pragma once

#include <memory>
#include <vector>

#include "executor/comm/local.hpp"
#include "executor/cuda/backend.hpp"
#include "executor/cuda/nccl_communicator.hpp"
#include "executor/data/corpus.hpp"
#include "executor/runner.hpp"

namespace stagecraft::executor::test {

struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
};

inline RunnerOptions options(bool cuda) {
  RunnerOptions o;
  if (cuda) {
    o.make_backend = [](const StageLayout& l, bool offload, MemoryTracker& m, bool fwd, int64_t slots) -> std::unique_ptr<Backend> {
      return std::make_unique<cuda::CudaBackend>(l, offload, m, fwd, slots);
    };
  }
  return o;
}

// `steps` steps of `prog` on the synthetic corpus (seed 7), one rank.
inline Trained train(const program::Program& prog, bool cuda, int steps, bool nccl = false) {
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator local;
  std::unique_ptr<cuda::NcclCommunicator> over_nccl;
  if (nccl) over_nccl = std::make_unique<cuda::NcclCommunicator>(prog, local);
  Communicator& comm = nccl ? static_cast<Communicator&>(*over_nccl) : static_cast<Communicator&>(local);
  Runner runner(prog, comm, corpus, options(cuda));
  Trained r;
  for (int i = 0; i < steps; ++i) r.losses.push_back(runner.step().loss);
  r.params = runner.backend().params_host();
  return r;
}

}  // namespace stagecraft::executor::test
