// stagecraft info --model M [--seq-len S] [--json]: what a model is and what it costs.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/count/report.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/limits.hpp"

namespace stagecraft::cli {

namespace {

void print_table(const nlohmann::json& r, const spec::Model& m) {
  std::printf("%s  (%s)\n", m.name.c_str(), m.file.c_str());
  std::printf("  layers %lld, hidden %lld, heads %lld (kv %lld), ffn %lld, vocab %lld, seq %lld",
              static_cast<long long>(m.layers), static_cast<long long>(m.hidden), static_cast<long long>(m.heads),
              static_cast<long long>(m.kv_heads), static_cast<long long>(m.ffn_hidden),
              static_cast<long long>(m.vocab), static_cast<long long>(m.seq_len));
  if (m.max_positions > 0) std::printf(" (at most %lld)", static_cast<long long>(m.max_positions));
  std::printf("\n");
  std::printf("  %s\n", spec::architecture_text(m).c_str());
  auto row = [](const char* label, int64_t v, const std::string& note) {
    std::printf("  %-28s %22s  %s\n", label, with_commas(v).c_str(), note.c_str());
  };
  const int64_t total = r["parameters"];
  const int64_t block = r["block_parameters"];
  std::printf("parameters\n");
  row("total", total, "(" + short_count(static_cast<double>(total)) + ")");
  if (m.moe.on()) {
    const int64_t active = r["active_parameters"];
    row("active (one token's forward)", active, "(" + short_count(static_cast<double>(active)) + ": the router's " +
                                                    std::to_string(m.moe.top_k) + " of " + std::to_string(m.moe.experts) +
                                                    " experts; embedding and head included)");
  }
  row("embedding", r["embedding_parameters"], "");
  if (m.moe.on()) {
    const int64_t moe = r["moe_layers"], dense = m.layers - moe;
    const int64_t moe_block = r["moe_block_parameters"], dense_block = r["dense_block_parameters"];
    if (dense > 0) row("per dense block", dense_block, "x " + std::to_string(dense) + " = " + with_commas(dense_block * dense));
    row("per MoE block", moe_block, "x " + std::to_string(moe) + " = " + with_commas(moe_block * moe));
    row("  one routed expert", r["expert_parameters"], "");
  } else {
    row("per block", block, "x " + std::to_string(m.layers) + " = " + with_commas(block * m.layers));
  }
  row("head (final norm + LM head)", r["head_parameters"], m.tied_embeddings ? "(LM head tied to embedding)" : "");
  auto flops = [](const char* label, double v) {
    std::printf("  %-28s %22s  FLOP/token\n", label, short_count(v).c_str());
  };
  std::printf("FLOPs per token (GEMMs + attention scores%s)\n", m.moe.on() ? ", the experts a token is routed to" : "");
  flops("forward", r["flops_per_token_fwd"]);
  flops("train (fwd + bwd)", r["model_flops_per_token_train"]);
  flops("train, selective recompute", r["hardware_flops_per_token_train"]["selective"]);
  flops("train, full recompute", r["hardware_flops_per_token_train"]["full"]);
}

}  // namespace

Subcommand add_info(CLI::App& root) {
  auto model = std::make_shared<std::string>();
  auto json_out = std::make_shared<bool>(false);
  auto seq_len = std::make_shared<int64_t>(0);
  CLI::App* app = root.add_subcommand("info", "Parameters and FLOPs of a model (model.json or a Hugging Face config.json)");
  app->add_option("--model", *model, "model file, or the name of a bundled model (e.g. gpt3-175b)")->required();
  app->add_option("--seq-len", *seq_len, "tokens per sequence for the attention FLOPs (default: the model's)")
      ->check(positive_int(spec::limits::kSeqLen));
  app->add_flag("--json", *json_out, "print one JSON document");
  return {app, [model, json_out, seq_len]() {
            spec::Model m = load_model_arg(*model);
            const spec::Training length = spec::with_overrides({}, {*seq_len > 0 ? std::optional<int64_t>(*seq_len) : std::nullopt, {}, {}});
            warn_training_length(m, &length);
            if (*seq_len > 0) m = spec::with_training_length(m, length);
            nlohmann::json r = count::model_report(m);
            if (*json_out) {
              std::cout << r.dump(2) << "\n";
            } else {
              print_table(r, m);
            }
            return static_cast<int>(kOk);
          }};
}

}  // namespace stagecraft::cli
