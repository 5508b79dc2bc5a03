// Plan: what the planner chooses (SCHEMAS.md, plan.json): the tp x pp x dp factoring, micro-
// batching, pipeline schedule, stage split, recompute and ZeRO settings. ZeRO sizes count
// elements, as DeepSpeed's do; defaults are DeepSpeed's code defaults (REFERENCE.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stagecraft::spec {

struct Model;
struct Training;

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1 };
enum class Recompute { kNone, kSelective, kFull };
enum class Offload { kNone, kCpu };
// Every value, for tables of names (to_string gives each one's).
inline constexpr Schedule kSchedules[] = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};
inline constexpr Recompute kRecomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
inline constexpr Offload kOffloads[] = {Offload::kNone, Offload::kCpu};

struct ZeroConfig {
  int stage = 0;
  int64_t prefetch_bucket = 50'000'000;          // stage3_prefetch_bucket_size
  int64_t reduce_bucket = 500'000'000;           // reduce_bucket_size
  int64_t allgather_bucket = 500'000'000;        // allgather_bucket_size
  int64_t max_live_parameters = 1'000'000'000;   // stage3_max_live_parameters
  int64_t max_reuse_distance = 1'000'000'000;    // stage3_max_reuse_distance
  int64_t param_persistence_threshold = 100'000; // stage3_param_persistence_threshold
  bool overlap_comm = false;                     // DeepSpeed: true by default only for stage 3
  Offload offload_optimizer = Offload::kNone;
  // ZeRO-3's parameter shards in pinned host memory (DeepSpeed's offload_param, ZeRO-Infinity's
  // CPU offload): each gather first copies the rank's shard to the GPU over PCIe. Needs stage 3 and
  // the optimizer offloaded too (the host optimizer then writes the shard in place).
  Offload offload_param = Offload::kNone;
  // Stagecraft option: keep a stage's ZeRO-3 parameters gathered across its micro-batches
  // (one gather per step instead of one per micro-batch), trading memory for traffic.
  bool keep_gathered_across_microbatches = false;
};

struct Plan {
  int64_t tp = 1, pp = 1, dp = 1;
  int64_t micro_batch = 1;      // sequences per micro-batch
  int64_t micro_batches = 1;    // micro-batches per step per data-parallel rank
  Schedule schedule = Schedule::k1F1B;
  int64_t virtual_stages = 1;   // model chunks per pipeline rank (> 1 only with interleaved)
  std::vector<int64_t> stage_layers;   // empty: balanced by cost at lowering
  bool sequence_parallel = false;
  // Pipeline sends overlap the next compute (true), or the stage waits for each send to finish
  // before computing on (false: what Megatron-LM's and DeepSpeed's schedules do).
  bool overlap_p2p = false;
  Recompute recompute = Recompute::kNone;
  ZeroConfig zero;
  std::string source;
  std::string file;

  int64_t world() const { return tp * pp * dp; }
};

Plan load_plan(const std::string& path);
// Reads and checks the plan on its own (types, ranges, schedule/virtual_stages agreement).
Plan plan_from_json(const nlohmann::json& j, const std::string& file);
// Checks the plan against the model, the training and the GPU count it will run on:
// tp*pp*dp == gpus, global_batch == micro_batch * micro_batches * dp, tp divides heads,
// stage_layers sum to layers, at least one layer per stage and per virtual chunk, ...
// Throws SpecError naming the plan file (or the training file) and the field.
void validate_plan(const Plan& p, const Model& m, const Training& t, int64_t gpus);

nlohmann::json to_json(const Plan& p);
nlohmann::json to_json(const ZeroConfig& z);
const char* to_string(Schedule s);
const char* to_string(Recompute r);
const char* to_string(Offload o);
// One line, e.g. "tp8 pp8 dp16 mb1x96 1f1b zero1 sp recompute=selective".
std::string summary(const Plan& p);

}  // namespace stagecraft::spec
