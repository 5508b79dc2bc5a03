#include "sim/report.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>

#include "core/text/format.hpp"

namespace stagecraft::sim {

using text::short_bytes;

std::string report_text(const Metrics& m, const spec::Plan& plan, int64_t world, const std::string& cluster) {
  using trace::MemoryKind;
  auto bytes = [](int64_t b) { return short_bytes(static_cast<double>(b)); };
  char buf[1024];
  std::string out;
  std::snprintf(buf, sizeof buf, "plan        %s on %lld GPUs (%s)\n", spec::summary(plan).c_str(),
                static_cast<long long>(world), cluster.c_str());
  out += buf;
  std::snprintf(buf, sizeof buf,
                "step time   %.4f s   %s tokens/s   %.1f model TFLOP/s/GPU (MFU %.1f%%)   %.1f hardware TFLOP/s/GPU\n",
                m.step_time_s, text::short_count(m.tokens_per_s).c_str(), m.model_tflops_per_gpu, 100 * m.mfu,
                m.hardware_tflops_per_gpu);
  out += buf;
  std::snprintf(buf, sizeof buf, "time        compute %.4f s, exposed communication %.4f s, bubble %.4f s (%.1f%%)\n",
                m.time.compute_s, m.time.exposed_comm_s, m.time.bubble_s, 100 * m.bubble_fraction);
  out += buf;
  std::snprintf(buf, sizeof buf, "comm busy   tp %.4f s, pp %.4f s, dp %.4f s", m.time.tp_s, m.time.pp_s, m.time.dp_s);
  out += buf;
  if (m.time.cp_s > 0) out += text::fmt(", cp %.4f s", m.time.cp_s);
  if (m.time.ep_s > 0) out += text::fmt(", ep %.4f s", m.time.ep_s);
  out += "\n";
  out += "memory      peak " + bytes(m.peak_memory_bytes) + " of " + bytes(m.capacity_bytes) + " on rank " +
         std::to_string(m.peak_rank) + ":";
  for (MemoryKind k : trace::kMemoryKinds) {
    out += std::string(k == MemoryKind::kParams ? " " : ", ") + trace::to_string(k) + " " + bytes(m.memory[k]);
  }
  out += "\n";
  out += std::string("fits        ") + (m.fits ? "yes" : "no: " + fit_reason(m)) + "\n";
  out += "limits      " + limit_text(m) + "\n";
  return out;
}

namespace {

std::string pct(double x) { return text::fmt("%.0f%%", 100 * x); }
std::string gib(double bytes) { return text::gib(bytes) + " GiB"; }

// The memory kinds in words (trace::MemoryKind order).
constexpr const char* kMemoryWords[trace::kMemoryKindCount] = {"parameters",  "gradients", "optimizer states",
                                                               "activations", "buffers",   "reserved"};

}  // namespace

std::string limit_text(const Metrics& m, std::string* term) {
  using text::fmt;
  const double step = m.step_time_s;
  const std::pair<double, std::string> parts[] = {
      {m.time.compute_s, "compute"}, {m.time.exposed_comm_s, "exposed communication"}, {m.time.bubble_s, "pipeline bubble"}};
  const auto* top = std::max_element(std::begin(parts), std::end(parts),
                                     [](const auto& x, const auto& y) { return x.first < y.first; });
  if (term != nullptr) *term = top->second;
  std::string s = "limited by " + top->second + ": " + fmt("%.3f s", top->first) + " of the " + fmt("%.3f s", step) +
                  " step (" + pct(step > 0 ? top->first / step : 0) + ")";
  if (top->second == "compute") s += ", at " + pct(m.mfu) + " MFU";
  s += "; compute " + fmt("%.3f s", m.time.compute_s) + ", exposed communication " + fmt("%.3f s", m.time.exposed_comm_s) +
       ", bubble " + fmt("%.3f s", m.time.bubble_s) + "; communication lanes busy: tp " + fmt("%.3f s", m.time.tp_s) +
       ", pp " + fmt("%.3f s", m.time.pp_s) + ", dp " + fmt("%.3f s", m.time.dp_s);
  if (m.time.cp_s > 0) s += ", cp " + fmt("%.3f s", m.time.cp_s);
  if (m.time.ep_s > 0) s += ", ep " + fmt("%.3f s", m.time.ep_s);
  return s;
}

std::string memory_text(const Metrics& m) {
  trace::MemoryKind top = trace::MemoryKind::kParams;
  for (trace::MemoryKind k : trace::kMemoryKinds) {
    if (m.memory[k] > m.memory[top]) top = k;
  }
  const int64_t capacity = m.capacity_bytes;
  return "peak memory " + gib(static_cast<double>(m.peak_memory_bytes)) + " of " + gib(static_cast<double>(capacity)) +
         " (" + pct(capacity > 0 ? static_cast<double>(m.peak_memory_bytes) / static_cast<double>(capacity) : 0) +
         "), largest term " + kMemoryWords[static_cast<int>(top)] + " " + gib(static_cast<double>(m.memory[top]));
}

std::vector<StageMemory> stage_memory(const std::vector<trace::MemorySample>& peaks, const program::Placement& placement) {
  std::vector<StageMemory> out;
  for (const trace::MemorySample& p : peaks) {
    const int64_t stage = placement.stage_of(p.rank);
    auto it = std::find_if(out.begin(), out.end(), [&](const StageMemory& s) { return s.stage == stage; });
    if (it == out.end()) {
      out.push_back({stage, p.rank, p.time_ns, p.bytes});
    } else if (p.total() > it->total()) {
      *it = {stage, p.rank, p.time_ns, p.bytes};
    }
  }
  std::sort(out.begin(), out.end(), [](const StageMemory& a, const StageMemory& b) { return a.stage < b.stage; });
  return out;
}

std::string stage_memory_text(const std::vector<StageMemory>& stages, int64_t capacity_bytes) {
  std::string out = "memory by stage, GiB (each stage's rank with the largest peak, at its peak):\n"
                    "  stage   rank   params    grads  optimizer  activations  buffers  reserved   peak / capacity\n";
  std::size_t tight = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].total() > stages[tight].total()) tight = i;
  }
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const StageMemory& s = stages[i];
    char line[256];
    const auto g = [&](trace::MemoryKind k) { return text::gib(static_cast<double>(s.bytes[k])); };
    std::snprintf(line, sizeof line, "  %5lld  %5lld  %7s  %7s  %9s  %11s  %7s  %8s  %7s / %s%s\n", static_cast<long long>(s.stage),
                  static_cast<long long>(s.rank), g(trace::MemoryKind::kParams).c_str(), g(trace::MemoryKind::kGrads).c_str(),
                  g(trace::MemoryKind::kOptimizer).c_str(), g(trace::MemoryKind::kActivations).c_str(),
                  g(trace::MemoryKind::kBuffers).c_str(), g(trace::MemoryKind::kReserved).c_str(),
                  text::gib(static_cast<double>(s.total())).c_str(), text::gib(static_cast<double>(capacity_bytes)).c_str(),
                  stages.size() > 1 && i == tight ? "  <- the tightest" : "");
    out += line;
  }
  return out;
}

nlohmann::json to_json(const std::vector<StageMemory>& stages) {
  nlohmann::json out = nlohmann::json::array();
  for (const StageMemory& s : stages) {
    nlohmann::json memory = nlohmann::json::object();
    for (trace::MemoryKind k : trace::kMemoryKinds) memory[trace::to_string(k)] = s.bytes[k];
    out.push_back({{"stage", s.stage}, {"rank", s.rank}, {"time_s", static_cast<double>(s.time_ns) * 1e-9},
                   {"peak_memory_bytes", s.total()}, {"memory", memory}});
  }
  return out;
}

std::string table_header() { return "  step s   tokens/s     MFU  bubble  exp.comm s  peak / capacity GiB"; }

std::string table_cells(const Metrics& m) {
  char line[256];
  std::snprintf(line, sizeof line, "%7.3f  %9s  %5.1f%%  %5.1f%%  %10.3f  %5s / %s", m.step_time_s,
                text::short_rate(m.tokens_per_s).c_str(), 100 * m.mfu, 100 * m.bubble_fraction, m.time.exposed_comm_s,
                text::gib(static_cast<double>(m.peak_memory_bytes)).c_str(),
                text::gib(static_cast<double>(m.capacity_bytes)).c_str());
  return line;
}

}  // namespace stagecraft::sim
