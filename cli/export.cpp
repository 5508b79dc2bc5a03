// stagecraft export deepspeed --plan P --training T [--model M] [-o ds_config.json]
// Writes the plan as a DeepSpeed config (planner/deepspeed.hpp) and warns, with DeepSpeed's own
// reason, where DeepSpeed cannot run it as Stagecraft would (pipeline + ZeRO >= 2, ...).
// stagecraft export megatron --plan P --training T [--model M] [-o args.sh]
// Writes the plan as Megatron-LM's pretrain_gpt.py arguments (planner/megatron.hpp), one per line,
// and warns where Megatron-LM cannot run it as Stagecraft would (ZeRO-2/3, GPipe, ZB-H1, ...).
// stagecraft export hf --checkpoint DIR -o OUT [--dtype fp32|bf16]
// Writes a Stagecraft checkpoint's parameters (every rank's shard gathered; the optimizer state
// stays behind) as a Hugging Face folder (executor/hf_weights.hpp).
#include <iostream>
#include <memory>
#include <optional>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/io/file.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "executor/checkpoint.hpp"
#include "executor/errors.hpp"
#include "executor/hf_weights.hpp"
#include "planner/deepspeed.hpp"
#include "planner/megatron.hpp"

namespace stagecraft::cli {

namespace {

struct ExportArgs {
  std::string plan, training, model, output;
  std::string checkpoint, hf_output, dtype = "fp32";
};

int run_export_hf(const ExportArgs& a) {
  program::Program prog;
  executor::ModelParams params;
  try {
    params = executor::read_checkpoint_params(a.checkpoint, &prog);
  } catch (const executor::CheckpointError& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kBadInput;
  }
  executor::hf::family_of(prog.model);  // SpecError (exit 2) before anything is written
  refuse_overwriting_input(a.hf_output, {a.checkpoint}, "-o");
  const auto dtype = a.dtype == "bf16" ? io::safetensors::Dtype::kBF16 : io::safetensors::Dtype::kF32;
  executor::hf::write_folder(prog.model, params.values, a.hf_output, dtype);
  std::cerr << "stagecraft: wrote " << a.hf_output << " (" << executor::hf::to_string(executor::hf::family_of(prog.model))
            << ", " << params.values.size() << " parameters, " << a.dtype << ") from " << a.checkpoint << "\n";
  return kOk;
}

int run_export(const ExportArgs& a) {
  using spec::ConfigKind;
  const spec::Plan p = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, a.plan));
  const spec::Training t = spec::load_training(spec::resolve_config(ConfigKind::kTraining, a.training));
  if (!a.model.empty()) {
    const spec::Model m = load_model_arg(a.model);
    warn_training_length(m, &t);
    spec::validate_plan(p, m, t, p.world());
  } else if (spec::checked_mul(p.micro_batch, p.micro_batches, p.dp) != t.global_batch) {
    throw spec::SpecError(p.file, "/micro_batches",
                          "expected micro_batch × micro_batches × dp (" + std::to_string(p.micro_batch) + " × " +
                              std::to_string(p.micro_batches) + " × " + std::to_string(p.dp) + ") to equal global_batch " +
                              std::to_string(t.global_batch) + " of " + t.label() + " (DeepSpeed's train_batch_size identity)");
  }
  const planner::DeepSpeedExport ds = planner::to_deepspeed(p, t);
  for (const std::string& w : ds.warnings) std::cerr << "stagecraft: warning: " << w << "\n";
  if (a.output.empty() || a.output == "-") {
    std::cout << ds.config.dump(2) << "\n";
    return kOk;
  }
  refuse_overwriting_input(a.output, {p.file, t.file}, "-o");
  io::write_file(a.output, ds.config.dump(2) + "\n");
  std::cerr << "stagecraft: wrote " << a.output << " (train_batch_size " << ds.config["train_batch_size"]
            << " = micro " << p.micro_batch << " × accumulation " << p.micro_batches << " × dp " << p.dp << ")\n";
  return kOk;
}

int run_export_megatron(const ExportArgs& a) {
  using spec::ConfigKind;
  const spec::Plan p = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, a.plan));
  const spec::Training t = spec::load_training(spec::resolve_config(ConfigKind::kTraining, a.training));
  std::optional<spec::Model> m;
  if (!a.model.empty()) {
    m = load_model_arg(a.model);
    warn_training_length(*m, &t);
    m = spec::with_training_length(*m, t);
    spec::validate_plan(p, *m, t, p.world());
  } else if (spec::checked_mul(p.micro_batch, p.micro_batches, p.dp) != t.global_batch) {
    throw spec::SpecError(p.file, "/micro_batches",
                          "expected micro_batch × micro_batches × dp (" + std::to_string(p.micro_batch) + " × " +
                              std::to_string(p.micro_batches) + " × " + std::to_string(p.dp) + ") to equal global_batch " +
                              std::to_string(t.global_batch) + " of " + t.label());
  }
  if (m && m->moe.on() && p.ep == 1 && m->moe.experts > 1) {
    std::cerr << "stagecraft: note: ep 1: every GPU holds every expert\n";
  }
  const planner::MegatronExport x = planner::to_megatron(p, t, m ? &*m : nullptr);
  for (const std::string& w : x.warnings) std::cerr << "stagecraft: warning: " << w << "\n";
  if (a.output.empty() || a.output == "-") {
    std::cout << x.text();
    return kOk;
  }
  refuse_overwriting_input(a.output, {p.file, t.file}, "-o");
  io::write_file(a.output, x.text());
  std::cerr << "stagecraft: wrote " << a.output << " (" << x.args.size() << " Megatron-LM arguments for " << spec::summary(p)
            << ")\n";
  return kOk;
}

}  // namespace

Subcommand add_export(CLI::App& root) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* app = root.add_subcommand("export", "Export a plan to another framework's configuration");
  app->require_subcommand(1);
  CLI::App* ds = app->add_subcommand("deepspeed", "Write a DeepSpeed ds_config.json for a plan");
  ds->add_option("--plan", a->plan, "plan file or bundled name")->required();
  ds->add_option("--training", a->training, "training file or bundled name")->required();
  ds->add_option("--model", a->model, "model file or bundled name (checks the plan against it)");
  ds->add_option("-o,--output", a->output, "where to write (default: stdout)")->check(writable_file());
  CLI::App* mg = app->add_subcommand("megatron", "Write a plan as Megatron-LM's pretrain_gpt.py arguments");
  mg->add_option("--plan", a->plan, "plan file or bundled name")->required();
  mg->add_option("--training", a->training, "training file or bundled name")->required();
  mg->add_option("--model", a->model, "model file or bundled name (adds the model's arguments, checks the plan against it)");
  mg->add_option("-o,--output", a->output, "where to write (default: stdout)")->check(writable_file());
  CLI::App* hf = app->add_subcommand("hf", "Write a Stagecraft checkpoint's parameters as a Hugging Face folder");
  hf->add_option("--checkpoint", a->checkpoint, "the folder `run --save` wrote")->required()->check(CLI::ExistingDirectory);
  hf->add_option("-o,--output", a->hf_output, "the folder to write (config.json, model.safetensors, generation_config.json)")
      ->required()
      ->check(writable_dir());
  hf->add_option("--dtype", a->dtype, "fp32 (default) or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  return {app, [a, hf, mg]() { return hf->parsed() ? run_export_hf(*a) : mg->parsed() ? run_export_megatron(*a) : run_export(*a); }};
}

}  // namespace stagecraft::cli
