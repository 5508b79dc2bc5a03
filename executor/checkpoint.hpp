// Checkpoints of a distributed run: every rank writes what it alone owns (StageState's owned
// state: its shard of parameters, Adam m and v, and with ZeRO-3 the persistent tensors) to
// DIR/rank-NNNNN.bin; rank 0 writes DIR/manifest.json with the plan, model, training, data
// seed, step, world size and every file's element count and FNV-1a checksum. Resuming reads
// them back into a freshly built Runner of the same plan, model and world (ZeRO 1-2 ranks also
// read their dp peers' parameter shards, the state an all-gather after the step would give),
// so the run continues bit for bit as if it had not stopped.
//
// Both calls are collective. load_checkpoint validates everything before touching the runner
// and throws CheckpointError on every rank, with every rank's reasons at rank 0, when a file is
// missing or corrupt or the checkpoint does not match the current run. Not a format for
// changing plans between runs (re-sharding) or for other frameworks.
#pragma once

#include <cstdint>
#include <string>

#include "executor/runner.hpp"

namespace stagecraft::executor {

// What, besides the Program, fixes the run a checkpoint belongs to.
struct CheckpointContext {
  std::string data_source = "synthetic";
  uint64_t data_seed = 0;
};

// Writes the runner's state after runner.steps_done() steps into `dir` (created if needed).
void save_checkpoint(Runner& runner, const std::string& dir, const CheckpointContext& ctx);
// Restores the state saved in `dir`; the runner's next step is the checkpoint's step.
void load_checkpoint(Runner& runner, const std::string& dir, const CheckpointContext& ctx);

}  // namespace stagecraft::executor
