#include "executor/checkpoint.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/spec/json_reader.hpp"
#include "core/text/hash.hpp"
#include "executor/errors.hpp"
#include "executor/model_params.hpp"

namespace stagecraft::executor {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr char kMagic[8] = {'S', 'C', 'C', 'K', 'P', 'T', '0', '1'};
constexpr int kVersion = 1;

std::string rank_file(int64_t rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05lld.bin", static_cast<long long>(rank));
  return name;
}

// The parts of a spec that decide the training (its "source" citation does not).
json essential(json j) {
  j.erase("source");
  return j;
}

json run_identity(const program::Program& prog, const CheckpointContext& ctx) {
  return {{"plan", essential(spec::to_json(prog.plan))},
          {"model", essential(spec::to_json(prog.model))},
          {"training", essential(spec::to_json(prog.training))},
          {"data", {{"source", ctx.data_source}, {"seed", ctx.data_seed}}},
          {"world", prog.placement.world()}};
}

void write_rank_file(const fs::path& path, int64_t rank, int64_t step, const std::vector<float>& state) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const int64_t header[3] = {rank, step, static_cast<int64_t>(state.size())};
  out.write(kMagic, sizeof(kMagic));
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(state.data()), static_cast<std::streamsize>(state.size() * sizeof(float)));
  if (!out) throw CheckpointError(path.string() + ": cannot write the checkpoint file");
}

// A rank file's values, checked against its header and the manifest's entry.
std::vector<float> read_rank_file(const fs::path& dir, const json& entry, int64_t rank, int64_t step) {
  const fs::path path = dir / entry.at("file").get<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path.string() + ": missing");
  char magic[8];
  int64_t header[3] = {-1, -1, -1};
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  if (!in || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError(path.string() + ": not a Stagecraft checkpoint file");
  }
  const int64_t elems = entry.at("elems").get<int64_t>();
  if (header[0] != rank || header[1] != step || header[2] != elems) {
    throw CheckpointError(path.string() + ": holds rank " + std::to_string(header[0]) + ", step " +
                          std::to_string(header[1]) + ", " + std::to_string(header[2]) + " values; the manifest says rank " +
                          std::to_string(rank) + ", step " + std::to_string(step) + ", " + std::to_string(elems));
  }
  std::vector<float> values(static_cast<std::size_t>(elems));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!in || in.peek() != std::char_traits<char>::eof()) {
    throw CheckpointError(path.string() + ": truncated or has trailing bytes (expected " + std::to_string(elems) +
                          " values)");
  }
  const std::string sum = text::hex16(text::fnv1a(values.data(), values.size() * sizeof(float)));
  if (sum != entry.at("checksum").get<std::string>()) {
    throw CheckpointError(path.string() + ": checksum " + sum + " does not match the manifest's " +
                          entry.at("checksum").get<std::string>() + " (corrupt)");
  }
  return values;
}

json read_manifest(const fs::path& dir) {
  const fs::path path = dir / "manifest.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError(path.string() + ": missing (no checkpoint in " + dir.string() + ")");
  try {
    json m = spec::read_json_file(path.string());
    if (m.value("format", "") != "stagecraft-checkpoint" || m.value("version", 0) != kVersion) {
      throw CheckpointError(path.string() + ": not a version " + std::to_string(kVersion) + " Stagecraft checkpoint");
    }
    return m;
  } catch (const spec::SpecError& e) {
    throw CheckpointError(std::string("malformed checkpoint manifest: ") + e.what());
  } catch (const json::exception& e) {
    throw CheckpointError(path.string() + ": malformed: " + e.what());
  }
}

// Names the first field where the checkpoint's run differs from this one.
void check_identity(const json& manifest, const json& current, const fs::path& dir) {
  for (const char* key : {"model", "plan", "training", "data", "world"}) {
    if (!manifest.contains(key) || manifest.at(key) != current.at(key)) {
      throw CheckpointError((dir / "manifest.json").string() + ": /" + key + " is " +
                            (manifest.contains(key) ? manifest.at(key).dump() : std::string("missing")) +
                            ", this run has " + current.at(key).dump());
    }
  }
}

// Everything this rank needs, validated; throws CheckpointError.
struct Loaded {
  int64_t step = 0;
  std::vector<float> own;
  std::vector<std::pair<int64_t, std::vector<float>>> peers;  // (dp index, state), ZeRO 1-2
};

Loaded read_for_rank(Runner& runner, const fs::path& dir, const CheckpointContext& ctx) {
  const program::Program& prog = runner.program();
  const json manifest = read_manifest(dir);
  check_identity(manifest, run_identity(prog, ctx), dir);
  Loaded out;
  out.step = manifest.at("step").get<int64_t>();
  const json& ranks = manifest.at("ranks");
  const int64_t me = runner.comm().rank();
  out.own = read_rank_file(dir, ranks.at(static_cast<std::size_t>(me)), me, out.step);
  const StageLayout& layout = runner.layout();
  const bool needs_peers = (layout.zero_stage() == 1 || layout.zero_stage() == 2) && layout.dp() > 1;
  for (int64_t d = 0; needs_peers && d < layout.dp(); ++d) {
    if (d == layout.dp_index()) continue;
    const int64_t peer = prog.placement.rank(layout.stage(), d, prog.placement.tp_index_of(me));
    out.peers.emplace_back(d, read_rank_file(dir, ranks.at(static_cast<std::size_t>(peer)), peer, out.step));
  }
  return out;
}

}  // namespace

void save_checkpoint(Runner& runner, const std::string& dir, const CheckpointContext& ctx) {
  Communicator& comm = runner.comm();
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw CheckpointError(dir + ": cannot create the checkpoint directory: " + ec.message());
  const std::vector<float> state = runner.state().owned_state();
  write_rank_file(root / rank_file(comm.rank()), comm.rank(), runner.steps_done(), state);
  const json mine = {{"rank", comm.rank()},
                     {"file", rank_file(comm.rank())},
                     {"elems", state.size()},
                     {"checksum", text::hex16(text::fnv1a(state.data(), state.size() * sizeof(float)))}};
  const std::vector<std::string> entries = comm.gather_to_root(mine.dump());
  if (comm.rank() == 0) {
    json manifest = run_identity(runner.program(), ctx);
    manifest["format"] = "stagecraft-checkpoint";
    manifest["version"] = kVersion;
    manifest["step"] = runner.steps_done();
    manifest["ranks"] = json::array();
    for (const std::string& e : entries) manifest["ranks"].push_back(json::parse(e));
    const fs::path tmp = root / "manifest.json.tmp";
    {
      std::ofstream out(tmp);
      out << manifest.dump(1) << "\n";
      if (!out) throw CheckpointError(tmp.string() + ": cannot write the manifest");
    }
    fs::rename(tmp, root / "manifest.json");
  }
  comm.barrier();
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
  const std::vector<std::string> errors = comm.gather_to_root(error);
  if (comm.all_reduce_max(error.empty() ? 0.0 : 1.0) > 0) {
    std::string all;
    for (const std::string& e : errors) {
      if (!e.empty()) all += (all.empty() ? "" : "\n") + e;
    }
    throw CheckpointError(comm.rank() == 0 ? "cannot resume from " + dir + ":\n" + all
                                           : "cannot resume from " + dir + " (reasons at rank 0)");
  }
  runner.state().load_owned_state(loaded.own);
  for (const auto& [d, state] : loaded.peers) runner.state().load_peer_shard(d, state);
  runner.set_steps_done(loaded.step);
}

}  // namespace stagecraft::executor
