// The time to train with failures and checkpoints: how much of the wall clock trains (goodput),
// from the cluster's reliability section (spec::Reliability) and the simulated step time. run_cost
// calls it for a token budget; every rule of it lives here.
//
// With G GPUs on G/g nodes, a failure rate f per GPU-hour (or f_n per node-hour), C checkpoint
// bytes, a store of bandwidth B, a restart of r seconds and T_s the failure-free time to train:
//   job failure rate       λ = G·f  (or G/g·f_n) per hour: independent components, each failure
//                          stops the synchronous job;  mean time between failures M = 3600/λ s
//   checkpoint bytes       C = P·(w + K): the unique model states, weights and optimizer state
//                          (sim::model_states of the whole model, ZeRO-0, one replica: w = 2, K = 12
//                          for 16-bit training with Adam, w = 4, K = 8 in fp32); gradients are not
//                          saved
//   checkpoint time        δ = C / B (the job waits for it: a synchronous save)
//   restart cost           R = r + C / B (back to training, then the checkpoint read back)
//   interval               τ = √(2δM)·[1 + ⅓·√(δ/2M) + (1/9)·(δ/2M)] − δ  for δ < 2M, else τ = M
//                          (Daly, "A higher order estimate of the optimum checkpoint interval for
//                          restart dumps", Future Generation Computer Systems 22(3), 2006; Young 1974's first-order
//                          √(2δM) is its leading term)
//   expected wall time     T_w = M·e^{R/M}·(e^{(τ+δ)/M} − 1)·T_s/τ  (Daly 2006: exponentially
//                          distributed failures, each segment of τ work + δ save redone from its
//                          start after a failure, the restart itself exposed to failures)
//   goodput                T_s / T_w;  lost time T_w − T_s: checkpoints, recomputed work, restarts
// Each figure scales with T_s, so the step time's 1σ range gives their ranges. Measured at scale:
// Llama 3 405B, 54 days on up to 16,384 H100s, 419 unexpected interruptions, more than 90%
// effective training time (Llama Team, "The Llama 3 Herd of Models", arXiv 2407.21783, §3.3.4).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::sim {

struct Goodput {
  double failures_per_hour = 0;   // λ, the job's
  double mtbf_s = 0;              // M
  double checkpoint_bytes = 0;    // C
  double checkpoint_s = 0;        // δ
  double restart_s = 0;           // R
  double interval_s = 0;          // τ
  double train_s = 0;             // T_s, failure-free
  double wall_s = 0;              // T_w
  double goodput = 0;             // T_s / T_w
  double failures = 0;            // expected failures over the run: T_w / M
};

// C above: the unique model states a checkpoint holds.
double checkpoint_bytes(const spec::Model& m, spec::Dtype dtype);

// The figures above. `reliability.known()`, gpus >= 1, train_s > 0, checkpoint_bytes > 0.
Goodput goodput(const spec::Reliability& reliability, int64_t gpus, int64_t gpus_per_node, double checkpoint_bytes,
                double train_s);

// The goodput as a percentage: "92.6%", with two decimals from 99.5% on ("99.97%", not "100.0%").
std::string goodput_text(double goodput);

// SCHEMAS.md "goodput": failures_per_hour, mtbf_s, checkpoint_bytes, checkpoint_s, restart_s,
// interval_s, wall_s, goodput, failures.
nlohmann::json to_json(const Goodput& g);

}  // namespace stagecraft::sim
