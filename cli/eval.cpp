// stagecraft eval --weights DIR --data FILE [--model M] [--sequences N] [--seq-len T]
//                 [--data-format uint16|text] [--json]
// The mean cross-entropy of a Hugging Face checkpoint folder's model on the first N windows of
// T + 1 tokens of FILE (window j: tokens [j*T, j*T + T], the sequential order of `run
// --data-order sequential`), and each window's, forward only (executor/evaluate.hpp). Under
// mpirun the windows are dealt over the ranks. Bad input (a checkpoint that does not match the
// model, a data file with ids past the vocabulary) exits 2 before anything is computed.
#include <cmath>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "executor/errors.hpp"
#include "executor/evaluate.hpp"
#include "executor/hf_weights.hpp"
#include "executor/model/layers.hpp"
#include "executor/world.hpp"

namespace stagecraft::cli {

namespace {

struct EvalArgs {
  std::string model, weights, data, data_format, log_probs;
  int64_t sequences = 8;
  int64_t seq_len = 0;
  bool json = false;
};

int run_eval(const EvalArgs& a) {
  const executor::World world;
  auto fail = [&](const std::string& message) {
    if (world.rank() == 0) std::cerr << "stagecraft: error: " << message << std::endl;
    return kBadInput;
  };
  spec::Model m;
  std::vector<float> params;
  std::optional<executor::Corpus> corpus;
  int64_t bytes_read = 0;
  try {
    m = load_model_arg(a.model.empty() ? a.weights + "/config.json" : a.model);
    if (a.seq_len > 0) {
      if (m.max_positions > 0 && a.seq_len > m.max_positions) {
        throw spec::SpecError("--seq-len", "", "expected at most the model's " + std::to_string(m.max_positions) +
                                                   " positions (" + (m.file.empty() ? m.name : m.file) + "), got " +
                                                   std::to_string(a.seq_len));
      }
      m.seq_len = a.seq_len;
    }
    if (const std::vector<std::string> missing = executor::unsupported_features(m); !missing.empty()) {
      std::string list;
      for (const std::string& f : missing) list += (list.empty() ? "" : "; ") + f;
      throw spec::SpecError(m.file.empty() ? a.model : m.file, "", "the CPU executor does not run " + list);
    }
    executor::hf::HfReader reader(m, a.weights);
    const executor::ParamLayout layout(m);
    params.assign(static_cast<std::size_t>(layout.size()), 0.0f);
    for (const executor::TensorSlot& t : layout.tensors()) {
      reader.read(t, 0, t.size(), std::span<float>(params).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size())));
    }
    bytes_read = reader.bytes_read();
    const std::string format = !a.data_format.empty() ? a.data_format : a.data.ends_with(".txt") ? "text" : "uint16";
    corpus = format == "text" ? executor::Corpus::from_text_file(a.data, m.vocab, m.seq_len, 0)
                              : executor::Corpus::from_token_file(a.data, m.vocab, m.seq_len, 0);
    if (!a.log_probs.empty() && world.size() != 1) {
      throw spec::SpecError("--log-probs", "", "writes one process's log-probabilities: run eval on one rank for it");
    }
  } catch (const spec::SpecError& e) {
    return fail(e.what());
  } catch (const executor::DataError& e) {
    return fail(e.what());
  }
  executor::EvalResult r;
  try {
    std::unique_ptr<executor::Communicator> comm = world.communicator(program::Placement{1, 1, world.size()});
    std::vector<float> logp;
    r = executor::evaluate(m, params, *corpus, a.sequences, *comm, a.log_probs.empty() ? nullptr : &logp);
    if (!a.log_probs.empty()) {
      try {
        io::AtomicFile out(a.log_probs);
        out.write(logp.data(), logp.size() * sizeof(float));
        out.commit();
      } catch (const spec::SpecError& e) {
        std::cerr << "stagecraft: error: " << e.what() << std::endl;
        return kBadInput;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "stagecraft: rank " << world.rank() << ": error: " << e.what() << std::endl;
    return world.abort(3);
  }
  if (world.rank() != 0) return kOk;
  if (a.json) {
    const nlohmann::json j = {{"model", m.name},
                              {"weights", a.weights},
                              {"data", a.data},
                              {"windows", a.sequences},
                              {"seq_len", m.seq_len},
                              {"tokens", r.tokens},
                              {"mean_loss", r.mean},
                              {"perplexity", std::exp(r.mean)},
                              {"losses", r.losses},
                              {"ranks", world.size()},
                              {"bytes_read", bytes_read}};
    std::cout << j.dump(1) << "\n";
    return kOk;
  }
  std::cout << "stagecraft eval: " << m.name << " from " << a.weights << " on " << a.data << ": " << a.sequences
            << " window(s) of " << m.seq_len << " tokens, " << world.size() << " rank(s)\n";
  std::cout.precision(6);
  std::cout << "mean cross-entropy " << r.mean << " nats/token over " << r.tokens << " tokens (perplexity "
            << std::exp(r.mean) << ")\n";
  for (std::size_t j = 0; j < r.losses.size(); ++j) std::cout << "  window " << j << "  " << r.losses[j] << "\n";
  return kOk;
}

}  // namespace

Subcommand add_eval(CLI::App& root) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* app = root.add_subcommand(
      "eval", "Score a Hugging Face checkpoint: the cross-entropy of the first windows of a token file (forward only)");
  app->add_option("--weights", args->weights, "Hugging Face checkpoint folder (config.json, model.safetensors or its index)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("--data", args->data, "little-endian uint16 token ids, or text read as bytes")->required()->check(CLI::ExistingFile);
  app->add_option("--model", args->model, "model file or bundled name (default: the folder's config.json)");
  app->add_option("--data-format", args->data_format, "uint16 or text (default: text for a .txt file, else uint16)")
      ->check(CLI::IsMember({"uint16", "text"}));
  app->add_option("--sequences", args->sequences, "windows to score: window j is tokens [j*T, j*T + T] (default 8)")
      ->check(positive_int(int64_t{1} << 30));
  app->add_option("--seq-len", args->seq_len, "tokens per window T (default: the model's seq_len)")
      ->check(positive_int(int64_t{1} << 24));
  app->add_flag("--json", args->json, "print one JSON document: mean_loss, losses, tokens, ...");
  app->add_option("--log-probs", args->log_probs,
                  "also write log softmax of the logits here: float32 little-endian [sequences, T, vocab] (one rank)")
      ->check(writable_file());
  return {app, [args]() { return run_eval(*args); }};
}

}  // namespace stagecraft::cli
