// Checkpoints of a distributed run: every rank writes what it alone owns (StageState's owned
// state: its shard of parameters, Adam m and v, and with ZeRO-3 the persistent tensors) to
// DIR/gNNNNNN/rank-NNNNN.bin; rank 0 then writes DIR/manifest.json with the plan, model, training,
// data seed, step, world size, the generation and every file's element count and FNV-1a checksum.
// Resuming reads them back into a freshly built Runner of the same plan, model and world (ZeRO 1-2
// ranks also read their dp peers' parameter shards, the state an all-gather after the step would
// give), so the run continues bit for bit as if it had not stopped.
//
// A save never touches the checkpoint it replaces until the new one is complete (docs/reliability.md,
// "Faults"): each save writes a new generation folder (one more than the manifest's), every file
// through io::AtomicFile (temporary, fsync, rename); the manifest's rename is the commit, and only
// then are older generations removed. A save killed or failing anywhere (a rank killed, a full
// disk) leaves the previous manifest and the files it names intact.
//
// Both calls are collective and agree on failure: every rank throws CheckpointError, rank 0's
// message carrying every rank's reasons, so no rank is left waiting. load_checkpoint validates
// everything before touching the runner: a missing, truncated or corrupt file, a manifest that is
// malformed, or a checkpoint of another plan, model, training, data or world size (naming the field
// that differs). Not a format for changing plans between runs (re-sharding) or for other frameworks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/model_params.hpp"
#include "executor/runner.hpp"

namespace stagecraft::executor {

// What, besides the Program, fixes the run a checkpoint belongs to.
struct CheckpointContext {
  std::string data_source = "synthetic";
  uint64_t data_seed = 0;
  std::string data_order = "hashed";  // corpus.hpp's DataOrder; recorded when sequential
};

// DIR/manifest.json, read and checked field by field (no file is opened). Throws CheckpointError
// naming `path` and the field.
struct ManifestEntry {
  int64_t rank = 0;
  std::string file;      // relative to DIR: gNNNNNN/rank-NNNNN.bin
  int64_t elems = 0;
  std::string checksum;  // 16 hex digits, FNV-1a of the values
};
struct Manifest {
  int64_t generation = 0;
  int64_t step = 0;
  int64_t world = 0;
  nlohmann::json identity;  // plan, model, training, data, world: what must match to resume
  std::vector<ManifestEntry> ranks;  // ranks[r].rank == r
  // fp16: the loss scaler's state after `step` steps ("loss_scale": {"scale", "good_steps",
  // "hysteresis_left"}), so a resumed run scales as the uninterrupted one
  std::optional<LossScaler::State> loss_scale;
};
Manifest parse_manifest(const std::string& text, const std::string& path);

// Before a run that will save into `dir`: a checkpoint there of another run (another model, plan,
// training, data or world size) would be replaced by this one's, so it is refused (CheckpointError
// naming the field that differs), as is a manifest.json that is not a checkpoint's. A checkpoint of
// this same run (the one --resume continues) may be saved over. Every rank reads the same file.
void check_save_target(const program::Program& prog, const std::string& dir, const CheckpointContext& ctx);

// Writes the runner's state after runner.steps_done() steps into `dir` (created if needed).
void save_checkpoint(Runner& runner, const std::string& dir, const CheckpointContext& ctx);
// Restores the state saved in `dir`; the runner's next step is the checkpoint's step.
void load_checkpoint(Runner& runner, const std::string& dir, const CheckpointContext& ctx);

// The whole model's parameters (model_params.hpp) from the checkpoint in `dir`, read and checked
// (manifest, sizes, checksums) in one process, without the run's world: each rank file's own
// shard placed as gather_model_params would. `prog` receives the Program lowered from the
// manifest's model, training and plan. Throws CheckpointError naming the file.
ModelParams read_checkpoint_params(const std::string& dir, program::Program* prog = nullptr);

}  // namespace stagecraft::executor
