#include "sim/goodput.hpp"

#include <cmath>

#include "core/count/count.hpp"
#include "core/text/format.hpp"
#include "sim/models/memory.hpp"

namespace stagecraft::sim {

double checkpoint_bytes(const spec::Model& m, spec::Dtype dtype) {
  const ModelStates s = model_states(count::parameters(m), 0, spec::ZeroConfig{}, 1, dtype);
  return static_cast<double>(s.params + s.optimizer);
}

Goodput goodput(const spec::Reliability& rel, int64_t gpus, int64_t gpus_per_node, double checkpoint_bytes, double train_s) {
  Goodput g;
  g.failures_per_hour = rel.failures_per_gpu_hour > 0
                            ? static_cast<double>(gpus) * rel.failures_per_gpu_hour
                            : static_cast<double>(gpus) / static_cast<double>(gpus_per_node) * rel.failures_per_node_hour;
  const double M = 3600.0 / g.failures_per_hour;
  g.mtbf_s = M;
  g.checkpoint_bytes = checkpoint_bytes;
  const double delta = checkpoint_bytes / rel.checkpoint_Bps;
  g.checkpoint_s = delta;
  g.restart_s = rel.restart_s + delta;
  const double x = delta / (2 * M);
  g.interval_s = delta < 2 * M ? std::sqrt(2 * delta * M) * (1 + std::sqrt(x) / 3 + x / 9) - delta : M;
  g.train_s = train_s;
  // expm1 keeps (e^{(τ+δ)/M} − 1) exact when τ + δ ≪ M
  g.wall_s = M * std::exp(g.restart_s / M) * std::expm1((g.interval_s + delta) / M) * train_s / g.interval_s;
  g.goodput = train_s / g.wall_s;
  g.failures = g.wall_s / M;
  return g;
}

std::string goodput_text(double goodput) {
  return text::fmt(goodput >= 0.995 ? "%.2f%%" : "%.1f%%", 100 * goodput);
}

nlohmann::json to_json(const Goodput& g) {
  return {{"failures_per_hour", g.failures_per_hour}, {"mtbf_s", g.mtbf_s},       {"checkpoint_bytes", g.checkpoint_bytes},
          {"checkpoint_s", g.checkpoint_s},           {"restart_s", g.restart_s}, {"interval_s", g.interval_s},
          {"wall_s", g.wall_s},                       {"goodput", g.goodput},     {"failures", g.failures}};
}

}  // namespace stagecraft::sim
