#include "planner/result.hpp"

namespace stagecraft::planner {

Metrics metrics_of(const sim::SimResult& r) {
  Metrics m;
  m.step_time_s = r.step_time_s;
  m.tokens_per_s = r.tokens_per_s;
  m.model_tflops_per_gpu = r.model_tflops_per_gpu;
  m.hardware_tflops_per_gpu = r.hardware_tflops_per_gpu;
  m.mfu = r.mfu;
  m.bubble_fraction = r.bubble_fraction;
  m.compute_s = r.time.compute_s;
  m.exposed_comm_s = r.time.exposed_comm_s;
  m.bubble_s = r.time.bubble_s;
  m.tp_s = r.time.tp_s;
  m.pp_s = r.time.pp_s;
  m.dp_s = r.time.dp_s;
  m.peak_memory_bytes = r.peak_memory_bytes;
  m.peak_rank = r.peak_rank;
  m.params = r.memory.params;
  m.grads = r.memory.grads;
  m.optimizer = r.memory.optimizer;
  m.activations = r.memory.activations;
  m.buffers = r.memory.buffers;
  m.reserved = r.memory.reserved;
  m.fits = r.fits ? 1 : 0;
  return m;
}

namespace {

std::string fit_reason(const Metrics& m, int64_t capacity) {
  const std::pair<const char*, int64_t> terms[] = {{"params", m.params},           {"grads", m.grads},
                                                   {"optimizer", m.optimizer},     {"activations", m.activations},
                                                   {"buffers", m.buffers},         {"reserved", m.reserved}};
  const auto* top = std::max_element(std::begin(terms), std::end(terms),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  return "peak memory " + std::to_string(m.peak_memory_bytes) + " bytes on rank " + std::to_string(m.peak_rank) +
         " exceeds the GPU's " + std::to_string(capacity) + " bytes; largest term: " + top->first + " (" +
         std::to_string(top->second) + " bytes)";
}

}  // namespace

nlohmann::json to_json(const Metrics& m, const spec::Plan& plan, int64_t capacity) {
  nlohmann::json j = {
      {"step_time_s", m.step_time_s},
      {"tokens_per_s", m.tokens_per_s},
      {"model_tflops_per_gpu", m.model_tflops_per_gpu},
      {"hardware_tflops_per_gpu", m.hardware_tflops_per_gpu},
      {"mfu", m.mfu},
      {"bubble_fraction", m.bubble_fraction},
      {"fits", m.fits != 0},
      {"peak_memory_bytes", m.peak_memory_bytes},
      {"memory",
       {{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer}, {"activations", m.activations},
        {"buffers", m.buffers}, {"reserved", m.reserved}}},
      {"time",
       {{"compute_s", m.compute_s},
        {"exposed_comm_s", m.exposed_comm_s},
        {"bubble_s", m.bubble_s},
        {"comm_s", {{"tp", m.tp_s}, {"pp", m.pp_s}, {"dp", m.dp_s}}}}},
      {"plan", spec::to_json(plan)}};
  if (m.fits == 0 && m.failed == 0) j["fit_reason"] = fit_reason(m, capacity);
  return j;
}

Metrics metrics_from_json(const nlohmann::json& j) {
  Metrics m;
  m.step_time_s = j.at("step_time_s").get<double>();
  m.tokens_per_s = j.at("tokens_per_s").get<double>();
  m.model_tflops_per_gpu = j.at("model_tflops_per_gpu").get<double>();
  m.hardware_tflops_per_gpu = j.at("hardware_tflops_per_gpu").get<double>();
  m.mfu = j.at("mfu").get<double>();
  m.bubble_fraction = j.at("bubble_fraction").get<double>();
  m.fits = j.at("fits").get<bool>() ? 1 : 0;
  m.peak_memory_bytes = j.at("peak_memory_bytes").get<int64_t>();
  const auto& mem = j.at("memory");
  m.params = mem.at("params").get<int64_t>();
  m.grads = mem.at("grads").get<int64_t>();
  m.optimizer = mem.at("optimizer").get<int64_t>();
  m.activations = mem.at("activations").get<int64_t>();
  m.buffers = mem.at("buffers").get<int64_t>();
  m.reserved = mem.at("reserved").get<int64_t>();
  const auto& t = j.at("time");
  m.compute_s = t.at("compute_s").get<double>();
  m.exposed_comm_s = t.at("exposed_comm_s").get<double>();
  m.bubble_s = t.at("bubble_s").get<double>();
  m.tp_s = t.at("comm_s").at("tp").get<double>();
  m.pp_s = t.at("comm_s").at("pp").get<double>();
  m.dp_s = t.at("comm_s").at("dp").get<double>();
  return m;
}

bool better(const Evaluated& a, const Evaluated& b) {
  if (a.metrics.tokens_per_s != b.metrics.tokens_per_s) return a.metrics.tokens_per_s > b.metrics.tokens_per_s;
  return a.key < b.key;
}

nlohmann::json to_json(const Counts& c) {
  return {{"candidates", c.candidates},       {"dominated", c.dominated}, {"pruned_memory", c.pruned_memory},
          {"pruned_bound", c.pruned_bound},   {"pruned_critical_path", c.pruned_critical_path},
          {"evaluated", c.evaluated}, {"reused", c.reused},
          {"fitting", c.fitting},             {"failed", c.failed},       {"unexplored", c.unexplored}};
}

}  // namespace stagecraft::planner
