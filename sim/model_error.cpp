#include "sim/model_error.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/text/format.hpp"

namespace stagecraft::sim {

namespace {

CheckedRun run_from_json(const nlohmann::json& j, const std::string& file, const std::string& pointer) {
  if (!j.is_object()) throw spec::SpecError(file, pointer, "expected an object (one checked run), got " + spec::describe(j));
  spec::ObjectReader r(j, file, pointer);
  CheckedRun run;
  run.set = r.string("set");
  run.id = r.string("id");
  run.source = r.string_or("source", "");
  const std::string framework = r.string("framework");
  const std::optional<spec::Framework> f = spec::parse_framework(framework);
  if (!f) r.fail_value("framework", "deepspeed, deepspeed-0.5, fsdp, fsdp2, megatron or megatron-2021");
  run.framework = *f;
  run.gpu = r.string_or("gpu", "");
  run.gpus = r.integer("gpus");
  if (run.gpus < 1) r.fail_value("gpus", "a positive number of GPUs");
  const int64_t stage = r.integer("zero_stage");
  if (stage < 0 || stage > 3) r.fail_value("zero_stage", "a ZeRO stage, 0 to 3");
  run.zero_stage = static_cast<int>(stage);
  run.variant = r.choice_or("variant", {"", "zeropp", "shard", "moe"}, "");
  run.measured_over_simulated = r.number("measured_over_simulated");
  if (!std::isfinite(run.measured_over_simulated) || run.measured_over_simulated <= 0) {
    r.fail_value("measured_over_simulated", "a positive ratio of step times");
  }
  r.finish();
  return run;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

ValidationRecord read_validation_record(const std::string& path) {
  const nlohmann::json j = spec::read_json_file(path);
  if (!j.is_object()) throw spec::SpecError(path, "", "expected an object {\"about\", \"runs\"}, got " + spec::describe(j));
  spec::ObjectReader r(j, path, "");
  r.string_or("about", "");
  const nlohmann::json& runs = r.raw("runs");
  if (!runs.is_array()) r.fail("runs", "an array of checked runs");
  r.finish();
  ValidationRecord record;
  record.file = path;
  for (size_t i = 0; i < runs.size(); ++i) record.runs.push_back(run_from_json(runs[i], path, "/runs/" + std::to_string(i)));
  return record;
}

std::string bundled_validation_record_path() {
  return (std::filesystem::path(spec::config_dir()) / "validation" / "runs.json").string();
}

std::optional<ValidationRecord> bundled_validation_record() {
  const std::string path = bundled_validation_record_path();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return read_validation_record(path);
}

std::string gpu_family(const std::string& gpu_name) { return gpu_name.substr(0, gpu_name.find_first_of(" -")); }

namespace {
// The runs of `framework` and the ZeRO class of `zero_stage`; of GPU family `family` only, unless empty.
ModelError of_framework(const ValidationRecord& record, spec::Framework framework, int zero_stage, const std::string& variant,
                        const std::string& family_only = "") {
  ModelError e;
  e.framework = framework;
  e.zero3 = zero_stage == 3;
  e.variant = variant;
  e.record = record.file;
  std::vector<double> r;
  for (const CheckedRun& run : record.runs) {
    if (run.framework != framework || (run.zero_stage == 3) != e.zero3 || run.variant != variant) continue;
    const std::string family = gpu_family(run.gpu);
    if (!family_only.empty() && family != family_only) continue;
    e.run_ids.push_back(run.set + "/" + run.id);
    r.push_back(run.measured_over_simulated);
    if (!family.empty() && std::find(e.gpu_families.begin(), e.gpu_families.end(), family) == e.gpu_families.end()) {
      e.gpu_families.push_back(family);
    }
    e.min_gpus = e.min_gpus == 0 ? run.gpus : std::min(e.min_gpus, run.gpus);
    e.max_gpus = std::max(e.max_gpus, run.gpus);
  }
  if (!r.empty()) {
    std::sort(r.begin(), r.end());
    e.low = r.front();
    e.high = r.back();
    e.median = median_of(r);
    if (r.size() >= 4) {
      const std::size_t half = r.size() / 2;  // an odd count's middle value is in neither half
      e.q1 = median_of({r.begin(), r.begin() + static_cast<std::ptrdiff_t>(half)});
      e.q3 = median_of({r.end() - static_cast<std::ptrdiff_t>(half), r.end()});
    }
  }
  return e;
}
}  // namespace

ModelError model_error(const ValidationRecord& record, spec::Framework framework, int zero_stage, const std::string& plan_gpu,
                       const std::string& variant) {
  ModelError e = of_framework(record, framework, zero_stage, variant);
  e.plan_gpu_family = gpu_family(plan_gpu);
  if (e.runs() > 0) {
    if (!e.plan_gpu_family.empty()) {
      ModelError same = of_framework(record, framework, zero_stage, variant, e.plan_gpu_family);
      if (same.runs() > 0) e.same_gpu.push_back(std::move(same));
    }
    return e;
  }
  for (spec::Framework other : spec::kFrameworks) {
    if (other == framework) continue;
    ModelError o = of_framework(record, other, zero_stage, variant);
    if (o.runs() > 0) e.other_frameworks.push_back(std::move(o));
  }
  return e;
}

namespace {
std::string zero_class(const ModelError& e) {
  return std::string(e.zero3 ? "ZeRO-3" : "ZeRO 0-2") +
         (e.variant == "zeropp" ? " with ZeRO++" : e.variant == "shard" ? " sharded in groups" : e.variant == "moe" ? " mixture-of-experts" : "");
}
}  // namespace

std::string model_error_text(const ModelError& e) {
  const std::string what = std::string(spec::to_string(e.framework)) + " " + zero_class(e);
  if (e.runs() == 0) {
    std::string others;
    for (const ModelError& o : e.other_frameworks) {
      others += std::string(others.empty() ? "; " + zero_class(e) + " under " : ", ") + spec::to_string(o.framework) + " (" +
                std::to_string(o.runs()) + (o.runs() == 1 ? " run) " : " runs) ") +
                (o.runs() == 1 ? text::fmt("%.2fx", o.low) : text::fmt("%.2f", o.low) + "-" + text::fmt("%.2fx", o.high));
    }
    return "no published " + what + " run has been checked against its simulation (docs/validation.md): the "
           "model error here is unmeasured" + others;
  }
  auto range = [](const ModelError& m) {
    if (m.runs() == 1) return text::fmt("%.2fx", m.low);
    const std::string middle = m.runs() >= 4 ? ", middle half " + text::fmt("%.2f", m.q1) + "-" + text::fmt("%.2fx", m.q3) : "";
    return text::fmt("%.2f", m.low) + "-" + text::fmt("%.2fx", m.high) + " (median " + text::fmt("%.2fx", m.median) + middle + ")";
  };
  auto sizes = [](const ModelError& m, bool families) {  // "A100, H100; 8-512 GPUs"
    std::string on;
    if (families) {
      for (const std::string& f : m.gpu_families) on += (on.empty() ? "" : ", ") + f;
      on += on.empty() ? "" : "; ";
    }
    on += m.min_gpus == m.max_gpus ? std::to_string(m.min_gpus) : std::to_string(m.min_gpus) + "-" + std::to_string(m.max_gpus);
    return on + " GPUs";
  };
  auto runs = [&](const ModelError& m) { return std::to_string(m.runs()) + " published " + what + (m.runs() == 1 ? " run" : " runs"); };
  const std::string all = runs(e) + " (" + sizes(e, true) + ") took " + range(e) + " their simulated step time";
  const std::string source = " (docs/validation.md)";
  // every run on the plan's GPU family, or no family given: one range
  if (e.plan_gpu_family.empty() || (!e.same_gpu.empty() && e.same_gpu.front().runs() == e.runs())) return all + source;
  if (e.same_gpu.empty()) return "no checked run on " + e.plan_gpu_family + "; " + all + source;
  const ModelError& same = e.same_gpu.front();
  return runs(same) + " on " + e.plan_gpu_family + " (" + sizes(same, false) + ") took " + range(same) +
         " their simulated step time; on every GPU, " + std::to_string(e.runs()) + " runs (" + sizes(e, true) + "): " + range(e) +
         source;
}

nlohmann::json to_json(const ModelError& e) {
  nlohmann::json j = {{"framework", spec::to_string(e.framework)},
                      {"zero", zero_class(e)},
                      {"runs", e.runs()},
                      {"ids", e.run_ids},
                      {"gpu_families", e.gpu_families},
                      {"gpus", {{"min", e.min_gpus}, {"max", e.max_gpus}}},
                      {"record", e.record}};
  j["measured_over_simulated"] = e.runs() == 0 ? nlohmann::json(nullptr)
                                               : nlohmann::json{{"low", e.low}, {"median", e.median}, {"high", e.high}};
  if (e.runs() >= 4) {
    j["measured_over_simulated"]["q1"] = e.q1;
    j["measured_over_simulated"]["q3"] = e.q3;
  }
  if (e.runs() == 0) {
    j["other_frameworks"] = nlohmann::json::array();
    for (const ModelError& o : e.other_frameworks) j["other_frameworks"].push_back(to_json(o));
  }
  if (!e.plan_gpu_family.empty()) {
    j["gpu_family"] = e.plan_gpu_family;
    j["same_gpu"] = e.same_gpu.empty() ? nlohmann::json(nullptr) : to_json(e.same_gpu.front());
  }
  return j;
}

}  // namespace stagecraft::sim
