// What a plan costs to run: GPU-hours, money and energy per step, per million tokens and for a
// token budget, from the simulated step time. Every rule of it lives here; simulate, search and
// their JSON call it.
//
// With G GPUs of the plan, T the simulated step time (s), N = B·s tokens a step (global batch ×
// sequence length), p the price of one GPU-hour (spec::Price, optional) and D a token budget:
//   GPU-hours a step                 H = G·T / 3600
//   cost a step                      C = H·p
//   GPU-hours per million tokens     H·1e6 / N          cost per million tokens   C·1e6 / N
//   steps to train D tokens          k = ⌈D / N⌉
//   time to train                    k·T                 (wall clock, steady-state steps only)
//   GPU-hours, cost to train         k·H, k·C
//   energy to train, at most         k·T·P / 3.6e6 kWh, P = G/g · node_watts (g GPUs a node: the
//                                    nodes' maximum input power, the plan's share of each) when
//                                    the profile gives node_watts, else G · gpu_watts (the GPU
//                                    boards alone, TDP); an upper bound: GPUs draw less than their
//                                    limit when communication or the bubble idles them.
// The time to train counts steady-state steps only: no checkpoint writes, evaluation, restarts
// after failures or warm-up (the step time is the simulator's, with its error bars: the 1σ step
// range gives the range of every figure above, all of them ∝ T). Where the cluster profile has a
// "reliability" section and the caller gives the checkpoint's bytes, the time to train with
// failures, checkpoints and restarts, and its goodput, come from sim/goodput.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/spec/cluster.hpp"
#include "sim/goodput.hpp"

namespace stagecraft::sim {

struct RunCost {
  int64_t gpus = 0;
  double step_time_s = 0;
  double tokens_per_step = 0;
  double gpu_hours_per_step = 0;
  double gpu_hours_per_million_tokens = 0;
  std::optional<double> price_per_gpu_hour;     // absent: no price known
  std::string currency;
  std::string price_source;
  std::optional<double> cost_per_step, cost_per_million_tokens;
  // A token budget, when one is given.
  std::optional<double> tokens;
  int64_t steps = 0;
  double train_seconds = 0;
  double train_gpu_hours = 0;
  std::optional<double> train_cost;
  std::optional<double> train_energy_kwh;        // an upper bound (see above); absent without power data
  std::string energy_basis;                      // "node" or "gpu": which power the bound used
  double power_watts = 0;                        // P above
  std::optional<Goodput> goodput;                // with a budget, a reliability section and checkpoint bytes
};

// The figures above for one plan. `tokens_per_step` > 0, `gpus` > 0, `step_time_s` > 0;
// `checkpoint_bytes` (sim::checkpoint_bytes) > 0 for the time to train with failures.
RunCost run_cost(const spec::Cluster& cluster, int64_t gpus, double tokens_per_step, double step_time_s,
                 std::optional<double> tokens, double checkpoint_bytes = 0);

// A token count as people write it: "1e12", "1T", "300B", "1.5T", "500M", "10K" (decimal: K 1e3,
// M 1e6, B and G 1e9, T 1e12); nullopt when it is not a positive finite count of at most
// spec::limits::kMaxTrainTokens.
std::optional<double> parse_token_count(std::string_view text);
// 1e12 -> "1T", 3e11 -> "300B", 1.5e12 -> "1.5T", 123456 -> "123.5K".
std::string token_count_text(double tokens);
// A duration in the unit that reads best: "41.3 s", "18.2 min", "5.6 h", "37.4 days".
std::string duration_text(double seconds);
// An amount of money: "1,234,567 USD" above 1000, else "12.34 USD".
std::string money_text(double amount, const std::string& currency);

// Text mode, one or two lines ("cost ..." and, with a budget, "train <D> ..."), each ending in a
// newline; `low` and `high` (optional) are the same plan's costs at the ends of its 1σ step range.
std::string run_cost_text(const RunCost& c, const RunCost* low = nullptr, const RunCost* high = nullptr);
// SCHEMAS.md "cost": gpu_hours_per_step, gpu_hours_per_million_tokens, price {per_gpu_hour,
// currency, source} | null, cost_per_step, cost_per_million_tokens (null without a price), and with
// a budget "train": {tokens, steps, seconds, gpu_hours, cost, energy_kwh_max, energy_basis,
// goodput: sim::to_json(Goodput) | null}.
nlohmann::json to_json(const RunCost& c);

}  // namespace stagecraft::sim
