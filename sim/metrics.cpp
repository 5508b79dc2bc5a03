#include "sim/metrics.hpp"

namespace stagecraft::sim {

std::string fit_reason(const Metrics& m) {
  if (m.fits || m.failed) return "";
  trace::MemoryKind top = trace::MemoryKind::kParams;
  for (trace::MemoryKind k : trace::kMemoryKinds) {
    if (m.memory[k] > m.memory[top]) top = k;
  }
  return "peak memory " + std::to_string(m.peak_memory_bytes) + " bytes on rank " + std::to_string(m.peak_rank) +
         " exceeds the GPU's " + std::to_string(m.capacity_bytes) + " bytes; largest term: " + trace::to_string(top) +
         " (" + std::to_string(m.memory[top]) + " bytes)";
}

nlohmann::json to_json(const Metrics& m, const spec::Plan& plan) {
  nlohmann::json memory = nlohmann::json::object();
  for (trace::MemoryKind k : trace::kMemoryKinds) memory[trace::to_string(k)] = m.memory[k];
  nlohmann::json j = {
      {"step_time_s", m.step_time_s},
      {"tokens_per_s", m.tokens_per_s},
      {"model_tflops_per_gpu", m.model_tflops_per_gpu},
      {"hardware_tflops_per_gpu", m.hardware_tflops_per_gpu},
      {"mfu", m.mfu},
      {"bubble_fraction", m.bubble_fraction},
      {"fits", m.fits},
      {"peak_memory_bytes", m.peak_memory_bytes},
      {"memory", std::move(memory)},
      {"time",
       {{"compute_s", m.time.compute_s},
        {"exposed_comm_s", m.time.exposed_comm_s},
        {"bubble_s", m.time.bubble_s},
        {"comm_s", {{"tp", m.time.tp_s}, {"pp", m.time.pp_s}, {"dp", m.time.dp_s}, {"cp", m.time.cp_s}, {"ep", m.time.ep_s}}}}},
      {"dp_internode_bytes_per_micro_batch", m.dp_internode_bytes},
      {"ep_intranode_bytes_per_step", m.ep_intranode_bytes},
      {"ep_internode_bytes_per_step", m.ep_internode_bytes},
      {"plan", spec::to_json(plan)}};
  const std::string why = fit_reason(m);
  if (!why.empty()) j["fit_reason"] = why;
  return j;
}

}  // namespace stagecraft::sim
