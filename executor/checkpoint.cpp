#include "executor/checkpoint.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <regex>

#include "core/io/file.hpp"
#include "core/program/lower.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "core/text/hash.hpp"
#include "executor/errors.hpp"
#include "executor/model_params.hpp"

namespace stagecraft::executor {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kMagic[8] = {'S', 'C', 'C', 'K', 'P', 'T', '0', '2'};
constexpr int kVersion = 2;
constexpr std::size_t kHeaderBytes = sizeof(kMagic) + 3 * sizeof(int64_t);
constexpr const char* kManifest = "manifest.json";

std::string generation_dir(int64_t generation) {
  char name[32];
  std::snprintf(name, sizeof(name), "g%06lld", static_cast<long long>(generation));
  return name;
}

// The generation a folder name "gNNNNNN" (generation_dir) holds; nothing for any other name.
std::optional<int64_t> generation_of(const std::string& name) {
  static const std::regex kGeneration("g([0-9]{6})");
  std::smatch m;
  if (!std::regex_match(name, m, kGeneration)) return std::nullopt;
  return std::stoll(m[1].str());
}

std::string rank_file(int64_t generation, int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "/rank-%05lld.bin", static_cast<long long>(rank));
  return generation_dir(generation) + name;
}

// The parts of a spec that decide the training (its "source" citation does not).
json essential(json j) {
  j.erase("source");
  return j;
}

json run_identity(const program::Program& prog, const CheckpointContext& ctx) {
  json data = {{"source", ctx.data_source}, {"seed", ctx.data_seed}};
  if (ctx.data_order != "hashed") data["order"] = ctx.data_order;  // checkpoints of the default order stay as they were
  return {{"plan", essential(spec::to_json(prog.plan))},
          {"model", essential(spec::to_json(prog.model))},
          {"training", essential(spec::to_json(prog.training))},
          {"data", data},
          {"world", prog.placement.world()}};
}

// Every rank's error (empty: none) agreed: if any rank failed, every rank throws, rank 0 with all
// the reasons. Collective.
void agree(Communicator& comm, const std::string& error, const std::string& what) {
  const std::vector<std::string> errors = comm.gather_to_root(error);
  if (comm.all_reduce_max(error.empty() ? 0.0 : 1.0) == 0) return;
  std::string all;
  for (const std::string& e : errors) {
    if (!e.empty()) all += (all.empty() ? "" : "\n") + e;
  }
  throw CheckpointError(comm.rank() == 0 ? what + ":\n" + all : what + " (reasons at rank 0)");
}

bool kills_here(const RunnerOptions& o, FaultKind kind, int64_t rank) {
  return o.fault_kind == kind && o.fault_rank == rank;
}

void write_rank_file(const fs::path& path, int64_t rank, int64_t step, const std::vector<float>& state,
                     bool kill_midway) {
  io::AtomicFile out(path.string());
  const int64_t header[3] = {rank, step, static_cast<int64_t>(state.size())};
  out.write(kMagic, sizeof(kMagic));
  out.write(header, sizeof(header));
  const std::size_t half = state.size() / 2;
  out.write(state.data(), half * sizeof(float));
  if (kill_midway) fault_kill(rank, "halfway through writing its checkpoint file");
  out.write(state.data() + half, (state.size() - half) * sizeof(float));
  out.commit();
}

// A rank file's values, checked against the manifest's entry and the size this rank expects.
std::vector<float> read_rank_file(const fs::path& dir, const ManifestEntry& entry, int64_t step, int64_t expected_elems) {
  const fs::path path = dir / entry.file;
  if (entry.elems != expected_elems) {
    throw CheckpointError(path.string() + ": the manifest gives it " + std::to_string(entry.elems) +
                          " values; this run's rank " + std::to_string(entry.rank) + " holds " +
                          std::to_string(expected_elems));
  }
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw CheckpointError(path.string() + ": missing (" + ec.message() + ")");
  const uintmax_t want = kHeaderBytes + static_cast<uintmax_t>(entry.elems) * sizeof(float);
  if (size != want) {
    throw CheckpointError(path.string() + ": " + std::to_string(size) + " bytes, expected " + std::to_string(want) +
                          " (a header and " + std::to_string(entry.elems) + " values): " +
                          (size < want ? "truncated" : "has trailing bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path.string() + ": cannot be opened");
  char magic[8];
  int64_t header[3] = {-1, -1, -1};
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  if (!in || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError(path.string() + ": not a version " + std::to_string(kVersion) + " Stagecraft checkpoint file");
  }
  if (header[0] != entry.rank || header[1] != step || header[2] != entry.elems) {
    throw CheckpointError(path.string() + ": holds rank " + std::to_string(header[0]) + ", step " +
                          std::to_string(header[1]) + ", " + std::to_string(header[2]) + " values; the manifest says rank " +
                          std::to_string(entry.rank) + ", step " + std::to_string(step) + ", " + std::to_string(entry.elems));
  }
  std::vector<float> values(static_cast<std::size_t>(entry.elems));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!in) throw CheckpointError(path.string() + ": read failed");
  const std::string sum = text::hex16(text::fnv1a(values.data(), values.size() * sizeof(float)));
  if (sum != entry.checksum) {
    throw CheckpointError(path.string() + ": checksum " + sum + " does not match the manifest's " + entry.checksum +
                          " (corrupt)");
  }
  return values;
}

Manifest manifest_from_json(const json& m, const std::string& path);

Manifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifest;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError(path.string() + ": missing (no checkpoint in " + dir.string() + ")");
  json m;
  try {
    m = spec::read_json_file(path.string());
  } catch (const spec::SpecError& e) {
    throw CheckpointError(std::string("malformed checkpoint manifest: ") + e.what());
  }
  return manifest_from_json(m, path.string());
}

// Names the first field where the checkpoint's run differs from this one.
void check_identity(const Manifest& manifest, const json& current, const fs::path& dir) {
  for (const char* key : {"model", "plan", "training", "data", "world"}) {
    if (!manifest.identity.contains(key) || manifest.identity.at(key) != current.at(key)) {
      throw CheckpointError((dir / kManifest).string() + ": /" + key + " is " +
                            (manifest.identity.contains(key) ? spec::describe(manifest.identity.at(key))
                                                             : std::string("missing")) +
                            ", this run has " + spec::describe(current.at(key)));
    }
  }
}

// Everything this rank needs, validated; throws CheckpointError.
struct Loaded {
  int64_t step = 0;
  std::optional<LossScaler::State> loss_scale;
  std::vector<float> own;
  struct Peer {
    int64_t set = 0, shard = 0;  // StageLayout::partition_sets
    std::vector<float> state;    // the shard's owner's
  };
  std::vector<Peer> peers;  // ZeRO 1-2
};

Loaded read_for_rank(Runner& runner, const fs::path& dir, const CheckpointContext& ctx) {
  const program::Program& prog = runner.program();
  const Manifest manifest = read_manifest(dir);
  check_identity(manifest, run_identity(prog, ctx), dir);
  if (manifest.world != runner.comm().size()) {
    throw CheckpointError((dir / kManifest).string() + ": written by " + std::to_string(manifest.world) +
                          " ranks, this job has " + std::to_string(runner.comm().size()));
  }
  Loaded out;
  out.step = manifest.step;
  out.loss_scale = manifest.loss_scale;
  if (runner.loss_scale_state() && !out.loss_scale) {
    throw CheckpointError((dir / kManifest).string() + ": /loss_scale is missing; an fp16 run resumes with its loss scaler's state");
  }
  const int64_t me = runner.comm().rank();
  const int64_t own_elems = runner.backend().owned_state_elems();
  out.own = read_rank_file(dir, manifest.ranks.at(static_cast<std::size_t>(me)), out.step, own_elems);
  const StageLayout& layout = runner.layout();
  // ZeRO 1-2: the other shards of each partition set, each from the peer that owns it: the dense
  // set's over the partition group (its g consecutive dp ranks), the experts' (under the split) over
  // the experts' data-parallel group, in its order
  const bool zero12 = layout.zero_stage() == 1 || layout.zero_stage() == 2;
  const auto& sets = layout.partition_sets();
  for (std::size_t k = 0; zero12 && k < sets.size(); ++k) {
    const StageLayout::PartitionSet& set = sets[k];
    if (!set.reduced) continue;  // one member: this rank holds all of it
    const int64_t first = layout.dp_index() - layout.partition_index();
    const std::vector<int64_t> experts_group =
        set.experts ? prog.placement.group_members(program::Group::kExpertDp, me) : std::vector<int64_t>{};
    for (int64_t i = 0; i < set.group; ++i) {
      if (i == set.index) continue;
      const int64_t peer = set.experts ? experts_group.at(static_cast<std::size_t>(i))
                                       : prog.placement.rank(layout.stage(), first + i, prog.placement.tp_index_of(me));
      // Peers of one stage own equal shards, so equal state sizes (StageLayout pads each set to its group).
      out.peers.push_back({static_cast<int64_t>(k), i,
                           read_rank_file(dir, manifest.ranks.at(static_cast<std::size_t>(peer)), out.step, own_elems)});
    }
  }
  return out;
}

// One more than the committed manifest's generation, or than any generation folder left by a save
// that did not commit (so that nothing of the committed checkpoint is written over).
int64_t next_generation(const fs::path& root) {
  int64_t latest = 0;
  try {
    latest = read_manifest(root).generation;
  } catch (const CheckpointError&) {
    // No manifest, or one this save replaces: only the folders count.
  }
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (const auto g = generation_of(e.path().filename().string())) latest = std::max(latest, *g);
  }
  return latest + 1;
}

// After the commit: older generations and temporaries of killed writers. Best effort: what is
// left is garbage a later save removes, never something a reader follows.
void remove_superseded(const fs::path& root, int64_t generation) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    const std::optional<int64_t> g = generation_of(name);
    if ((g && *g != generation) || name.rfind(std::string(kManifest) + ".tmp-", 0) == 0) {
      doomed.push_back(e.path());
    }
  }
  for (const fs::path& p : doomed) fs::remove_all(p, ec);
}

}  // namespace

Manifest parse_manifest(const std::string& text, const std::string& path) {
  json m;
  try {
    m = spec::parse_json_text(text, path);
  } catch (const spec::SpecError& e) {
    throw CheckpointError(std::string("malformed checkpoint manifest: ") + e.what());
  }
  return manifest_from_json(m, path);
}

namespace {

Manifest manifest_from_json(const json& m, const std::string& path) {
  auto bad = [&path](const std::string& pointer, const std::string& what) {
    return CheckpointError(path + ": " + pointer + ": " + what);
  };
  if (!m.is_object()) throw bad("", "expected an object, got " + spec::describe(m));
  if (!m.contains("format") || m["format"] != "stagecraft-checkpoint") {
    throw bad("/format", "expected \"stagecraft-checkpoint\": not a Stagecraft checkpoint");
  }
  if (!m.contains("version") || m["version"] != kVersion) {
    throw bad("/version", "is " + (m.contains("version") ? spec::describe(m["version"]) : std::string("missing")) +
                              "; this stagecraft reads version " + std::to_string(kVersion) + " checkpoints");
  }
  auto integer = [&](const json& j, const std::string& pointer, int64_t lo, int64_t hi) {
    if (!j.is_number_integer()) throw bad(pointer, "expected an integer, got " + spec::describe(j));
    const int64_t v = j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? hi + 1
                          : j.get<int64_t>();
    if (v < lo || v > hi) throw bad(pointer, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + j.dump());
    return v;
  };
  auto field = [&](const json& j, const std::string& key, const std::string& pointer) -> const json& {
    if (!j.contains(key)) throw bad(pointer + "/" + key, "missing");
    return j.at(key);
  };
  Manifest out;
  out.generation = integer(field(m, "generation", ""), "/generation", 1, 999999);
  out.step = integer(field(m, "step", ""), "/step", 0, INT64_MAX);
  out.world = integer(field(m, "world", ""), "/world", 1, spec::limits::kGpus);
  for (const char* key : {"plan", "model", "training", "data", "world"}) out.identity[key] = field(m, key, "");
  const json& ranks = field(m, "ranks", "");
  if (!ranks.is_array()) throw bad("/ranks", "expected an array, got " + spec::describe(ranks));
  if (static_cast<int64_t>(ranks.size()) != out.world) {
    throw bad("/ranks", "has " + std::to_string(ranks.size()) + " entries for a world of " + std::to_string(out.world));
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::string at = "/ranks/" + std::to_string(r);
    const json& e = ranks[r];
    if (!e.is_object()) throw bad(at, "expected an object, got " + spec::describe(e));
    ManifestEntry entry;
    entry.rank = integer(field(e, "rank", at), at + "/rank", 0, out.world - 1);
    if (entry.rank != static_cast<int64_t>(r)) throw bad(at + "/rank", "is " + std::to_string(entry.rank) + ", expected " + std::to_string(r));
    const json& file = field(e, "file", at);
    // The file must be this generation's, inside the checkpoint: never a path that leaves it.
    if (!file.is_string() || file.get<std::string>() != rank_file(out.generation, entry.rank)) {
      throw bad(at + "/file", "expected \"" + rank_file(out.generation, entry.rank) + "\", got " + spec::describe(file));
    }
    entry.file = file.get<std::string>();
    entry.elems = integer(field(e, "elems", at), at + "/elems", 0, int64_t{1} << 40);
    const json& sum = field(e, "checksum", at);
    static const std::regex kHex("[0-9a-f]{16}");
    if (!sum.is_string() || !std::regex_match(sum.get<std::string>(), kHex)) {
      throw bad(at + "/checksum", "expected 16 hex digits, got " + spec::describe(sum));
    }
    entry.checksum = sum.get<std::string>();
    out.ranks.push_back(std::move(entry));
  }
  if (m.contains("loss_scale")) {
    const json& ls = m.at("loss_scale");
    if (!ls.is_object()) throw bad("/loss_scale", "expected an object, got " + spec::describe(ls));
    const json& scale = field(ls, "scale", "/loss_scale");
    if (!scale.is_number() || !(scale.get<double>() > 0) || !std::isfinite(scale.get<double>())) {
      throw bad("/loss_scale/scale", "expected a positive number, got " + spec::describe(scale));
    }
    LossScaler::State s;
    s.scale = scale.get<double>();
    s.good_steps = integer(field(ls, "good_steps", "/loss_scale"), "/loss_scale/good_steps", 0, INT64_MAX);
    s.hysteresis_left = static_cast<int>(
        integer(field(ls, "hysteresis_left", "/loss_scale"), "/loss_scale/hysteresis_left", -(int64_t{1} << 30), 1 << 30));
    out.loss_scale = s;
  }
  return out;
}

}  // namespace

void check_save_target(const program::Program& prog, const std::string& dir, const CheckpointContext& ctx) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::exists(root / kManifest, ec)) return;
  const std::string refuse = "--save " + dir + " holds a checkpoint of another run, which this run's would replace: ";
  const std::string advice = "; save to another folder, or remove this one";
  try {
    check_identity(read_manifest(root), run_identity(prog, ctx), root);
  } catch (const CheckpointError& e) {
    throw CheckpointError(refuse + e.what() + advice);
  }
}

void save_checkpoint(Runner& runner, const std::string& dir, const CheckpointContext& ctx) {
  Communicator& comm = runner.comm();
  const RunnerOptions& faults = runner.options();
  const fs::path root(dir);
  const std::string what = "cannot save the checkpoint to " + dir + " (the previous one there, if any, is intact)";

  // Rank 0 picks the generation and makes its folder empty; everyone writes into it.
  std::string error;
  int64_t generation = 0;
  if (comm.rank() == 0) {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (!ec) {
      generation = next_generation(root);
      fs::remove_all(root / generation_dir(generation), ec);
      if (!ec) fs::create_directories(root / generation_dir(generation), ec);
    }
    if (ec) error = "rank 0: " + (root / generation_dir(generation)).string() + ": cannot create: " + ec.message();
  }
  agree(comm, error, what);
  generation = std::stoll(comm.broadcast_from_root(std::to_string(generation)));

  // Every rank its file.
  const std::vector<float> state = runner.backend().owned_state();
  const std::string file = rank_file(generation, comm.rank());
  try {
    write_rank_file(root / file, comm.rank(), runner.steps_done(), state,
                    kills_here(faults, FaultKind::kKillWritingCheckpoint, comm.rank()));
  } catch (const spec::SpecError& e) {
    error = "rank " + std::to_string(comm.rank()) + ": " + e.what();
  }
  const json mine = {{"rank", comm.rank()},
                     {"file", file},
                     {"elems", state.size()},
                     {"checksum", text::hex16(text::fnv1a(state.data(), state.size() * sizeof(float)))}};
  const std::vector<std::string> entries = comm.gather_to_root(mine.dump());
  try {
    agree(comm, error, what);
  } catch (const CheckpointError&) {
    std::error_code ec;
    if (comm.rank() == 0) fs::remove_all(root / generation_dir(generation), ec);  // give the space back
    throw;
  }

  // Rank 0 commits: the manifest's rename, then the old generations go.
  if (comm.rank() == 0) {
    json manifest = run_identity(runner.program(), ctx);
    manifest["format"] = "stagecraft-checkpoint";
    manifest["version"] = kVersion;
    manifest["generation"] = generation;
    manifest["step"] = runner.steps_done();
    if (const auto ls = runner.loss_scale_state()) {
      manifest["loss_scale"] = {{"scale", ls->scale}, {"good_steps", ls->good_steps}, {"hysteresis_left", ls->hysteresis_left}};
    }
    manifest["ranks"] = json::array();
    for (const std::string& e : entries) manifest["ranks"].push_back(json::parse(e));
    const std::string text = manifest.dump(1) + "\n";
    try {
      io::sync_directory((root / generation_dir(generation)).string());
      io::AtomicFile out((root / kManifest).string());
      out.write(text.substr(0, text.size() / 2));
      if (kills_here(faults, FaultKind::kKillWritingManifest, 0)) fault_kill(0, "halfway through writing the manifest");
      out.write(text.substr(text.size() / 2));
      out.commit();
    } catch (const spec::SpecError& e) {
      error = std::string("rank 0: ") + e.what();
      std::error_code ec;
      fs::remove_all(root / generation_dir(generation), ec);
    }
    if (error.empty()) remove_superseded(root, generation);
  }
  agree(comm, error, what);
}

void load_checkpoint(Runner& runner, const std::string& dir, const CheckpointContext& ctx) {
  Communicator& comm = runner.comm();
  Loaded loaded;
  std::string error;
  try {
    loaded = read_for_rank(runner, fs::path(dir), ctx);
  } catch (const std::exception& e) {
    error = "rank " + std::to_string(comm.rank()) + ": " + e.what();
  }
  agree(comm, error, "cannot resume from " + dir);
  runner.backend().load_owned_state(loaded.own);
  for (const Loaded::Peer& p : loaded.peers) runner.backend().load_peer_shard(p.set, p.shard, p.state);
  runner.set_steps_done(loaded.step);
  if (loaded.loss_scale) runner.restore_loss_scale(*loaded.loss_scale);
}

ModelParams read_checkpoint_params(const std::string& dir, program::Program* prog_out) {
  const Manifest manifest = read_manifest(fs::path(dir));
  const fs::path manifest_path = fs::path(dir) / kManifest;
  program::Program prog;
  try {
    const spec::Model m = spec::model_from_json(manifest.identity.at("model"), manifest_path.string() + "#/model");
    const spec::Training t = spec::training_from_json(manifest.identity.at("training"), manifest_path.string() + "#/training");
    const spec::Plan p = spec::plan_from_json(manifest.identity.at("plan"), manifest_path.string() + "#/plan");
    prog = program::lower(m, t, p);
  } catch (const spec::SpecError& e) {
    throw CheckpointError(std::string("malformed checkpoint manifest: ") + e.what());
  }
  if (prog.placement.world() != manifest.world) {
    throw CheckpointError(manifest_path.string() + ": /world: " + std::to_string(manifest.world) + ", but its plan has " +
                          std::to_string(prog.placement.world()) + " ranks");
  }
  std::vector<std::string> records;
  for (const ManifestEntry& e : manifest.ranks) {
    const StageLayout layout(prog, prog.placement.stage_of(e.rank), prog.placement.dp_index_of(e.rank),
                             prog.placement.tp_index_of(e.rank));
    const std::vector<float> state =
        read_rank_file(fs::path(dir), e, manifest.step, 3 * layout.owned_elems() + 3 * layout.persistent_elems());
    // The owned state starts with the parameters of the owned positions, packed (StageState::owned_state).
    std::vector<float> params(static_cast<std::size_t>(layout.padded_elems()), std::numeric_limits<float>::quiet_NaN());
    for (const StageLayout::Owned& o : layout.owned()) {
      std::copy(state.begin() + o.packed, state.begin() + o.packed + o.flat.size(), params.begin() + o.flat.begin);
    }
    records.push_back(own_records(layout, params));
  }
  if (prog_out != nullptr) *prog_out = prog;
  return assemble_model_params(prog, records);
}

}  // namespace stagecraft::executor
