#include "sim/run_cost.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/spec/limits.hpp"
#include "core/text/format.hpp"

namespace stagecraft::sim {

RunCost run_cost(const spec::Cluster& cluster, int64_t gpus, double tokens_per_step, double step_time_s,
                 std::optional<double> tokens, double checkpoint_bytes) {
  RunCost c;
  c.gpus = gpus;
  c.step_time_s = step_time_s;
  c.tokens_per_step = tokens_per_step;
  c.gpu_hours_per_step = static_cast<double>(gpus) * step_time_s / 3600.0;
  c.gpu_hours_per_million_tokens = c.gpu_hours_per_step * 1e6 / tokens_per_step;
  if (cluster.price.per_gpu_hour > 0) {
    c.price_per_gpu_hour = cluster.price.per_gpu_hour;
    c.currency = cluster.price.currency;
    c.price_source = cluster.price.source;
    c.cost_per_step = c.gpu_hours_per_step * *c.price_per_gpu_hour;
    c.cost_per_million_tokens = c.gpu_hours_per_million_tokens * *c.price_per_gpu_hour;
  }
  if (cluster.power.node_watts > 0 && cluster.gpus_per_node > 0) {
    c.energy_basis = "node";
    c.power_watts = static_cast<double>(gpus) / static_cast<double>(cluster.gpus_per_node) * cluster.power.node_watts;
  } else if (cluster.power.gpu_watts > 0) {
    c.energy_basis = "gpu";
    c.power_watts = static_cast<double>(gpus) * cluster.power.gpu_watts;
  }
  if (tokens) {
    c.tokens = tokens;
    c.steps = static_cast<int64_t>(std::ceil(*tokens / tokens_per_step));
    const double steps = static_cast<double>(c.steps);
    c.train_seconds = steps * step_time_s;
    c.train_gpu_hours = steps * c.gpu_hours_per_step;
    if (c.cost_per_step) c.train_cost = steps * *c.cost_per_step;
    if (c.power_watts > 0) c.train_energy_kwh = c.train_seconds * c.power_watts / 3.6e6;
    if (cluster.reliability.known() && checkpoint_bytes > 0) {
      c.goodput = goodput(cluster.reliability, gpus, cluster.gpus_per_node, checkpoint_bytes, c.train_seconds);
    }
  }
  return c;
}

std::optional<double> parse_token_count(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double scale = 1;
  switch (text.back()) {
    case 'K': case 'k': scale = 1e3; break;
    case 'M': scale = 1e6; break;
    case 'B': case 'G': scale = 1e9; break;
    case 'T': scale = 1e12; break;
    default: break;
  }
  if (scale != 1) text.remove_suffix(1);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  v *= scale;
  if (!std::isfinite(v) || !(v >= 1) || v > spec::limits::kMaxTrainTokens) return std::nullopt;
  return v;
}

namespace {

using text::fmt;

// 1234567.4 -> "1,234,567"
std::string grouped(double v) { return text::with_commas(static_cast<int64_t>(std::llround(v))); }

}  // namespace

std::string token_count_text(double tokens) {
  struct Unit { double scale; const char* suffix; };
  for (const Unit u : {Unit{1e12, "T"}, Unit{1e9, "B"}, Unit{1e6, "M"}, Unit{1e3, "K"}}) {
    if (tokens >= u.scale) return fmt("%.4g", tokens / u.scale) + u.suffix;
  }
  return fmt("%.0f", tokens);
}

std::string duration_text(double seconds) {
  if (seconds < 120) return fmt("%.3g s", seconds);
  if (seconds < 2 * 3600) return fmt("%.3g min", seconds / 60);
  if (seconds < 2 * 86400) return fmt("%.3g h", seconds / 3600);
  return fmt("%.4g days", seconds / 86400);
}

std::string money_text(double amount, const std::string& currency) {
  return (amount >= 1000 ? grouped(amount) : fmt(amount >= 1 ? "%.2f" : "%.4g", amount)) + " " + currency;
}

std::string run_cost_text(const RunCost& c, const RunCost* low, const RunCost* high) {
  const bool range = low != nullptr && high != nullptr;
  std::string out = "cost        " + std::to_string(c.gpus) + " GPUs × " + fmt("%.4g", c.step_time_s) +
                    " s = " + fmt("%.4g", c.gpu_hours_per_step) + " GPU-hours a step, " +
                    fmt("%.4g", c.gpu_hours_per_million_tokens) + " per million tokens";
  if (c.cost_per_step) {
    out += "; " + money_text(*c.cost_per_step, c.currency) + " a step, " +
           money_text(*c.cost_per_million_tokens, c.currency) + " per million tokens (at " +
           money_text(*c.price_per_gpu_hour, c.currency) + " per GPU-hour" +
           (c.price_source.empty() ? "" : ", " + c.price_source) + ")";
  } else {
    out += " (no price: --gpu-hour-price, or \"price\" in the cluster file)";
  }
  out += "\n";
  if (!c.tokens) return out;
  std::string label = "train " + token_count_text(*c.tokens);
  label.resize(std::max<std::size_t>(label.size() + 1, 12), ' ');
  out += label + grouped(static_cast<double>(c.steps)) + " steps of " +
         token_count_text(c.tokens_per_step) + " tokens: " + duration_text(c.train_seconds);
  if (range) out += " (1σ " + duration_text(low->train_seconds) + " .. " + duration_text(high->train_seconds) + ")";
  out += ", " + grouped(c.train_gpu_hours) + " GPU-hours";
  if (c.train_cost) {
    out += ", " + money_text(*c.train_cost, c.currency);
    if (range && low->train_cost && high->train_cost) {
      out += " (1σ " + money_text(*low->train_cost, c.currency) + " .. " + money_text(*high->train_cost, c.currency) + ")";
    }
  }
  if (c.train_energy_kwh) {
    const double kwh = *c.train_energy_kwh;
    out += ", at most " + (kwh >= 1000 ? fmt("%.4g MWh", kwh / 1000) : fmt("%.4g kWh", kwh)) + " (" +
           fmt("%.4g", c.power_watts / 1000) + " kW: " +
           (c.energy_basis == "node" ? "the nodes' maximum input power" : "the GPUs' board power limit") + ")";
  }
  out += "; steady-state steps only (no checkpoints, evaluation or restarts)\n";
  if (c.goodput) {
    const Goodput& g = *c.goodput;
    out += "failures    " + duration_text(g.wall_s);
    if (range && low->goodput && high->goodput) {
      out += " (1σ " + duration_text(low->goodput->wall_s) + " .. " + duration_text(high->goodput->wall_s) + ")";
    }
    out += " with failures, checkpoints and restarts: goodput " + goodput_text(g.goodput) + "; the job fails every " +
           duration_text(g.mtbf_s) + " (" + fmt("%.3g", g.failures) + " failures expected), a checkpoint of " +
           text::short_bytes(g.checkpoint_bytes) + " takes " + duration_text(g.checkpoint_s) + " every " +
           duration_text(g.interval_s) + " (Daly's interval), a restart " + duration_text(g.restart_s) + "\n";
  }
  return out;
}

nlohmann::json to_json(const RunCost& c) {
  using nlohmann::json;
  const auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json j = {{"gpus", c.gpus},
            {"step_time_s", c.step_time_s},
            {"tokens_per_step", c.tokens_per_step},
            {"gpu_hours_per_step", c.gpu_hours_per_step},
            {"gpu_hours_per_million_tokens", c.gpu_hours_per_million_tokens},
            {"price", c.price_per_gpu_hour ? json{{"per_gpu_hour", *c.price_per_gpu_hour},
                                                  {"currency", c.currency},
                                                  {"source", c.price_source}}
                                           : json(nullptr)},
            {"cost_per_step", opt(c.cost_per_step)},
            {"cost_per_million_tokens", opt(c.cost_per_million_tokens)}};
  if (c.tokens) {
    j["train"] = {{"tokens", *c.tokens},
                  {"steps", c.steps},
                  {"seconds", c.train_seconds},
                  {"gpu_hours", c.train_gpu_hours},
                  {"cost", opt(c.train_cost)},
                  {"energy_kwh_max", opt(c.train_energy_kwh)},
                  {"energy_basis", c.energy_basis.empty() ? json(nullptr) : json(c.energy_basis)},
                  {"power_watts", c.power_watts > 0 ? json(c.power_watts) : json(nullptr)},
                  {"goodput", c.goodput ? to_json(*c.goodput) : json(nullptr)}};
  }
  return j;
}

}  // namespace stagecraft::sim
