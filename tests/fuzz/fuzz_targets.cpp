// One fuzz target per parser and loader (docs/reliability.md, "Fuzzing"), selected at compile
// time by STAGECRAFT_FUZZ_TARGET. Each takes arbitrary bytes as the content of one input file and
// must either accept it or throw the loader's documented input error (spec::SpecError,
// planner::StoreError, executor::CheckpointError); any other exception, a crash, a hang or a sanitizer report is a bug.
//
// Built two ways (tests/fuzz/CMakeLists.txt): with libFuzzer (clang, -fsanitize=fuzzer) for
// bench/fuzz.sh, and as a plain program (standalone_main.cpp) that the normal test suite runs over
// every file of tests/fuzz/corpus/<target>/, so each input a fuzzer ever found stays a test.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/spec/cluster.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"
#include "executor/checkpoint.hpp"
#include "executor/errors.hpp"
#include "planner/deepspeed.hpp"
#include "planner/store.hpp"
#include "traces/io/trace_io.hpp"

namespace {

using namespace stagecraft;

// The bytes as a file of its own (for the loaders that take a path): one per process, rewritten.
[[maybe_unused]] std::string as_file(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/stagecraft-fuzz-" + std::to_string(::getpid()) + suffix;
  }();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                               static_cast<std::streamsize>(size));
  return path;
}

void run(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
#if defined(STAGECRAFT_FUZZ_quantity)
  for (spec::Quantity q : {spec::Quantity::kCount, spec::Quantity::kBytes, spec::Quantity::kBandwidth}) {
    (void)spec::parse_quantity(text, q);
    (void)spec::parse_quantity(text, q, true);
  }
#elif defined(STAGECRAFT_FUZZ_trace)
  (void)traces::read_trace_files({as_file(data, size, ".json")});
#elif defined(STAGECRAFT_FUZZ_checkpoint)
  (void)executor::parse_manifest(text, "manifest.json");  // a checkpoint's manifest.json
#elif defined(STAGECRAFT_FUZZ_store)
  planner::Store store(as_file(data, size, ".sqlite"), /*read_only=*/true);
  for (const planner::StoredSearch& s : store.searches()) (void)store.plans(s.id, "", 20);
#else
  const nlohmann::json j = spec::parse_json_text(text, "fuzz.json");
#if defined(STAGECRAFT_FUZZ_model)
  (void)spec::model_from_json(j, "fuzz.json");  // Stagecraft model.json and Hugging Face config.json
#elif defined(STAGECRAFT_FUZZ_cluster)
  (void)spec::cluster_from_json(j, "fuzz.json");
#elif defined(STAGECRAFT_FUZZ_training)
  (void)spec::training_from_json(j, "fuzz.json");
#elif defined(STAGECRAFT_FUZZ_plan)
  (void)spec::plan_from_json(j, "fuzz.json");
#elif defined(STAGECRAFT_FUZZ_deepspeed)
  (void)planner::from_deepspeed(j, "fuzz.json", 64, 32);
#else
#error "STAGECRAFT_FUZZ_TARGET: model, cluster, training, plan, deepspeed, trace, checkpoint, store or quantity"
#endif
#endif
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    run(data, size);
  } catch (const spec::SpecError&) {
  } catch (const planner::StoreError&) {
  } catch (const executor::CheckpointError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an undocumented exception escaped the loader: %s\n", e.what());
    std::abort();
  }
  return 0;
}
