#include "core/spec/cluster.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cmath>
#include <cstdio>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

int64_t non_negative_int(ObjectReader& r, std::string_view key, Quantity kind = Quantity::kCount) {
  int64_t v = r.integer(key, kind);
  if (v < 0) r.fail_value(key, "a non-negative integer");
  return v;
}

std::string g3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A physical quantity in [lo, hi] (spec/limits.hpp): a bandwidth of 1e-300 B/s or a latency of
// 9e18 ns is a typo, and would overflow the simulator's int64 nanoseconds.
double ranged_number(ObjectReader& r, std::string_view key, double lo, double hi, const char* unit,
                     Quantity kind = Quantity::kCount) {
  double v = r.number(key, kind);
  if (!(v >= lo && v <= hi)) r.fail_value(key, "a value from " + g3(lo) + " to " + g3(hi) + " " + unit);
  return v;
}

int64_t ranged_int(ObjectReader& r, std::string_view key, int64_t lo, int64_t hi, const char* unit,
                   Quantity kind = Quantity::kCount) {
  int64_t v = r.integer(key, kind);
  if (v < lo || v > hi) {
    r.fail_value(key, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + " " + unit);
  }
  return v;
}

double bandwidth(ObjectReader& r, std::string_view key) {
  return ranged_number(r, key, limits::kMinBandwidthBps, limits::kMaxBandwidthBps, "bytes/s", Quantity::kBandwidth);
}

int64_t latency(ObjectReader& r, std::string_view key) {
  return ranged_int(r, key, 0, static_cast<int64_t>(limits::kMaxLatencyNs), "ns");
}

double rate(ObjectReader& r, std::string_view key) {
  return ranged_number(r, key, limits::kMinRate, limits::kMaxRate, "per second");
}

// [[x, fraction], ...]: x strictly increasing within [lo, hi] (`x_name` in messages), fractions of
// peak in (0, 1]. matmul_efficiency's x is a GEMM's FLOPs; an attention kernel's, a sequence length.
std::vector<std::pair<double, double>> read_points(ObjectReader& r, std::string_view key, const std::string& x_name,
                                                    double lo, double hi, const std::string& x_range) {
  const json& arr = r.raw(key);
  const std::string pointer = r.pointer_of(key);
  if (!arr.is_array() || arr.empty()) {
    throw SpecError(r.file(), pointer, "expected a non-empty array of [" + x_name + ", fraction] pairs");
  }
  std::vector<std::pair<double, double>> points;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const json& p = arr[i];
    const std::string at = pointer + "/" + std::to_string(i);
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
      throw SpecError(r.file(), at, "expected [" + x_name + ", fraction_of_peak], got " + describe(p));
    }
    const double x = p[0].get<double>(), fraction = p[1].get<double>();
    if (!(x >= lo && x <= hi)) throw SpecError(r.file(), at + "/0", "expected " + x_range + ", got " + describe(p[0]));
    if (!(fraction > 0 && fraction <= 1)) {
      throw SpecError(r.file(), at + "/1", "expected a fraction of peak in (0, 1], got " + describe(p[1]));
    }
    if (!points.empty() && x <= points.back().first) {
      throw SpecError(r.file(), at + "/0", "expected " + x_name + " strictly increasing, got " + describe(p[0]) +
                                               " after " + describe(arr[i - 1][0]));
    }
    points.emplace_back(x, fraction);
  }
  return points;
}

std::vector<std::pair<double, double>> read_efficiency(ObjectReader& r) {
  return read_points(r, "matmul_efficiency", "gemm_flops", std::nextafter(0.0, 1.0), 1e24,
                     "positive GEMM FLOPs up to 1e24");
}

// One attention kernel pass's [[sequence length, fraction], ...].
std::vector<std::pair<double, double>> read_attention_points(ObjectReader& r, std::string_view key) {
  return read_points(r, key, "sequence_length", 1, static_cast<double>(limits::kSeqLen),
                     "a sequence length from 1 to " + std::to_string(limits::kSeqLen));
}

void read_attention_kernels(ObjectReader& gpu_reader, Gpu& g) {
  if (!gpu_reader.has("attention_kernels")) return;
  ObjectReader r = gpu_reader.object("attention_kernels");
  const json& all = gpu_reader.raw("attention_kernels");
  g.default_attention_kernel = r.string("default");
  for (const auto& [name, value] : all.items()) {
    if (name == "default") continue;
    if (name == "flash" || name == "unfused") {
      throw SpecError(r.file(), r.pointer_of(name), "expected a kernel name other than \"flash\" and \"unfused\" "
                                                    "(a training's words for the default kernel and for none)");
    }
    ObjectReader k = r.object(name);
    AttentionKernel kernel;
    kernel.name = name;
    kernel.forward = read_attention_points(k, "forward");
    kernel.backward = read_attention_points(k, "backward");
    kernel.sustained = k.number_or("sustained", 1.0);
    if (!(kernel.sustained > 0 && kernel.sustained <= 1)) {
      k.fail_value("sustained", "the share of the tabled rate kept under training load, in (0, 1]");
    }
    kernel.source = k.string_or("source", "");
    k.finish();
    g.attention_kernels.push_back(std::move(kernel));
  }
  // "unfused": the device has no fused attention kernel (a CPU; V100, which FlashAttention-2 does
  // not support), so "attention": "flash" runs unfused there
  if (g.default_attention_kernel != "unfused" && find_attention_kernel(g, g.default_attention_kernel) == nullptr) {
    r.fail_value("default", "\"unfused\" or the name of one of the kernels listed here");
  }
}

// "memory_kernels": {"strided": f, "dropout": f, "softmax": [[row length, f], ...], "source": "..."},
// every key optional, each f a fraction of hbm_Bps in (0, 1].
void read_memory_kernels(ObjectReader& gpu_reader, Gpu& g) {
  if (!gpu_reader.has("memory_kernels")) return;
  ObjectReader r = gpu_reader.object("memory_kernels");
  const auto fraction = [&r](std::string_view key) {
    if (!r.has(key)) return 0.0;
    const double v = r.number(key);
    if (!(v > 0 && v <= 1)) r.fail_value(key, "a fraction of hbm_Bps in (0, 1]");
    return v;
  };
  g.memory_kernels.strided = fraction("strided");
  g.memory_kernels.dropout = fraction("dropout");
  if (r.has("softmax")) {
    g.memory_kernels.softmax = read_points(r, "softmax", "row_length", 1, static_cast<double>(limits::kSeqLen),
                                           "a row length from 1 to " + std::to_string(limits::kSeqLen));
  }
  g.memory_kernels.source = r.string_or("source", "");
  r.finish();
}

Gpu read_gpu(ObjectReader r) {
  Gpu g;
  g.name = r.string("name");
  g.memory_bytes = ranged_int(r, "memory_bytes", limits::kMinMemoryBytes, limits::kMaxMemoryBytes, "bytes", Quantity::kBytes);
  g.reserved_bytes = non_negative_int(r, "reserved_bytes", Quantity::kBytes);
  if (g.reserved_bytes >= g.memory_bytes) {
    r.fail_value("reserved_bytes", "less than memory_bytes (" + std::to_string(g.memory_bytes) + ")");
  }
  ObjectReader peak = r.object("peak_flops");
  for (Dtype d : {Dtype::kFp32, Dtype::kTf32, Dtype::kFp16, Dtype::kBf16, Dtype::kFp8}) {
    if (peak.has(to_string(d))) g.peak_flops[d] = ranged_number(peak, to_string(d), limits::kMinFlops, limits::kMaxFlops, "FLOP/s");
  }
  peak.finish();
  if (g.peak_flops.empty()) r.fail("peak_flops", "at least one of \"fp32\", \"tf32\", \"fp16\", \"bf16\", \"fp8\"");
  g.hbm_Bps = bandwidth(r, "hbm_Bps");
  g.memory_efficiency = r.number_or("memory_efficiency", 1.0);
  if (!(g.memory_efficiency > 0 && g.memory_efficiency <= 1)) {
    r.fail_value("memory_efficiency", "a fraction of hbm_Bps in (0, 1]");
  }
  if (r.has("activation_elems_per_s")) g.activation_elems_per_s = rate(r, "activation_elems_per_s");
  if (r.has("adam_params_per_s")) g.adam_params_per_s = rate(r, "adam_params_per_s");
  if (r.has("sm_count")) g.sm_count = ranged_int(r, "sm_count", 1, limits::kSmCount, "SMs");
  g.matmul_efficiency = read_efficiency(r);
  read_attention_kernels(r, g);
  read_memory_kernels(r, g);
  g.source = r.string_or("source", "");
  r.finish();
  return g;
}

IntraNode read_intra(ObjectReader r) {
  IntraNode n;
  n.bandwidth_Bps = bandwidth(r, "bandwidth_Bps");
  n.latency_ns = latency(r, "latency_ns");
  n.source = r.string_or("source", "");
  r.finish();
  return n;
}

InterNode read_inter(ObjectReader r) {
  InterNode n;
  n.nics_per_node = ranged_int(r, "nics_per_node", 1, limits::kNicsPerNode, "NICs");
  n.nic_bandwidth_Bps = bandwidth(r, "nic_bandwidth_Bps");
  n.latency_ns = latency(r, "latency_ns");
  n.oversubscription = r.number_or("oversubscription", 1.0);
  if (!(n.oversubscription >= 1.0 && n.oversubscription <= limits::kMaxOversubscription)) {
    r.fail_value("oversubscription", "a taper factor from 1.0 (full bisection) to 1024");
  }
  n.source = r.string_or("source", "");
  r.finish();
  return n;
}

Host read_host(ObjectReader r) {
  Host h;
  h.pcie_Bps = bandwidth(r, "pcie_Bps");
  h.memory_bytes = ranged_int(r, "memory_bytes", limits::kMinMemoryBytes, limits::kMaxMemoryBytes, "bytes", Quantity::kBytes);
  h.adam_params_per_s = rate(r, "adam_params_per_s");
  h.source = r.string_or("source", "");
  r.finish();
  return h;
}

// An optional number in (0, max] (0 when absent), or fail_value "<unit>, above 0 and at most <max>".
double optional_positive(ObjectReader& r, std::string_view key, double max, const std::string& unit) {
  if (!r.has(key)) return 0.0;
  const double v = r.number(key);
  if (!(v > 0 && v <= max)) r.fail_value(key, unit + ", above 0 and at most " + g3(max));
  return v;
}

Power read_power(ObjectReader& parent) {
  Power w;
  if (!parent.has("power")) return w;
  ObjectReader r = parent.object("power");
  w.gpu_watts = optional_positive(r, "gpu_watts", limits::kMaxWatts, "watts");
  w.node_watts = optional_positive(r, "node_watts", limits::kMaxWatts, "watts");
  if (w.gpu_watts == 0 && w.node_watts == 0) r.fail("gpu_watts", "\"gpu_watts\" or \"node_watts\" (or no \"power\" section)");
  w.source = r.string_or("source", "");
  r.finish();
  return w;
}

Price read_price(ObjectReader& parent) {
  Price p;
  if (!parent.has("price")) return p;
  ObjectReader r = parent.object("price");
  p.per_gpu_hour = r.number("per_gpu_hour");
  if (!(p.per_gpu_hour > 0 && p.per_gpu_hour <= limits::kMaxGpuHourPrice)) {
    r.fail_value("per_gpu_hour", "a price above 0 and at most " + g3(limits::kMaxGpuHourPrice) + " per GPU-hour");
  }
  p.currency = r.string_or("currency", "USD");
  if (!valid_currency(p.currency)) r.fail_value("currency", "a three-letter currency code such as \"USD\" or \"EUR\"");
  p.source = r.string_or("source", "");
  r.finish();
  return p;
}

Reliability read_reliability(ObjectReader& parent) {
  Reliability rel;
  if (!parent.has("reliability")) return rel;
  ObjectReader r = parent.object("reliability");
  rel.failures_per_gpu_hour = optional_positive(r, "failures_per_gpu_hour", limits::kMaxFailuresPerHour, "failures per hour");
  rel.failures_per_node_hour = optional_positive(r, "failures_per_node_hour", limits::kMaxFailuresPerHour, "failures per hour");
  if ((rel.failures_per_gpu_hour > 0) == (rel.failures_per_node_hour > 0)) {
    r.fail("failures_per_gpu_hour", "one of \"failures_per_gpu_hour\" and \"failures_per_node_hour\"");
  }
  rel.restart_s = r.number("restart_s");
  if (!(rel.restart_s >= 0 && rel.restart_s <= limits::kMaxRestartSeconds)) {
    r.fail_value("restart_s", "seconds from 0 to " + g3(limits::kMaxRestartSeconds));
  }
  rel.checkpoint_Bps = bandwidth(r, "checkpoint_Bps");
  rel.source = r.string_or("source", "");
  r.finish();
  return rel;
}

std::optional<Straggler> read_straggler(ObjectReader& parent, const Cluster& c) {
  if (!parent.has("straggler")) return std::nullopt;
  ObjectReader r = parent.object("straggler");
  Straggler s;
  const std::string kind = r.choice("kind", {"gpu", "node", "nic"});
  s.kind = kind == "node" ? Straggler::Kind::kNode : kind == "nic" ? Straggler::Kind::kNic : Straggler::Kind::kGpu;
  const int64_t components = s.kind == Straggler::Kind::kGpu    ? c.nodes * c.gpus_per_node
                             : s.kind == Straggler::Kind::kNode ? c.nodes
                                                                : c.nodes * c.inter_node.nics_per_node;
  s.first = r.integer_or("first", 0);
  if (s.first < 0 || s.first >= components) {
    r.fail_value("first", "a " + kind + " index from 0 to " + std::to_string(components - 1) + " (the cluster's " +
                              std::to_string(components) + ")");
  }
  s.count = r.integer_or("count", 1);
  if (s.count < 1 || s.count > components - s.first) {
    r.fail_value("count", "from 1 to " + std::to_string(components - s.first) + " (the " + kind + "s from " +
                              std::to_string(s.first) + " on)");
  }
  s.slowdown = r.number("slowdown");
  if (!(s.slowdown >= 1 && s.slowdown <= 1000)) {
    r.fail_value("slowdown", "a factor from 1 (as the profile says) to 1000: how many times slower the " + kind + " runs");
  }
  r.finish();
  return s;
}

// "2.X" or "2.X.Y" with 7 <= X <= 30: the minor version, or -1.
int nccl_minor(const std::string& v) {
  int major = 0, minor = 0, patch = 0;
  char tail = 0;
  const int n = std::sscanf(v.c_str(), "%d.%d.%d%c", &major, &minor, &patch, &tail);
  if (n != 2 && n != 3) return -1;
  if (v.find_first_not_of("0123456789.") != std::string::npos) return -1;
  if (major != 2 || minor < 7 || minor > 30) return -1;
  return minor;
}

Nccl read_nccl(ObjectReader& parent, const std::string& gpu_name) {
  Nccl n;
  n.gpu_arch = gpu_arch_of_name(gpu_name);
  const auto check_version = [&](ObjectReader& r, std::string_view key, const std::string& v) {
    n.version = v;
    n.minor = nccl_minor(v);
    if (n.minor < 0) r.fail_value(key, "an NCCL version \"2.X\" or \"2.X.Y\" from 2.7 to 2.30");
  };
  if (!parent.has("nccl")) return n;
  if (parent.raw("nccl").is_string()) {
    check_version(parent, "nccl", parent.string("nccl"));
    return n;
  }
  ObjectReader r = parent.object("nccl");
  if (r.has("version")) check_version(r, "version", r.string("version"));
  if (r.has("channels")) n.channels = ranged_int(r, "channels", 1, 64, "channels");
  if (r.has("host_cpu")) {
    const std::string c = r.choice("host_cpu", {"intel", "amd", "other"});
    n.host_cpu = c == "intel" ? HostCpu::kIntel : c == "amd" ? HostCpu::kAmd : HostCpu::kOther;
  }
  if (r.has("gpu_arch")) {
    const std::string a = r.choice("gpu_arch", {"volta", "ampere", "hopper", "blackwell"});
    n.gpu_arch = a == "volta" ? GpuArch::kVolta : a == "ampere" ? GpuArch::kAmpere : a == "hopper" ? GpuArch::kHopper : GpuArch::kBlackwell;
  }
  if (r.has("latency_scale")) n.latency_scale = ranged_number(r, "latency_scale", 1e-3, 1e3, "(a factor)");
  n.source = r.string_or("source", "");
  r.finish();
  return n;
}

json efficiency_json(const std::vector<std::pair<double, double>>& points) {
  json arr = json::array();
  for (const auto& [flops, fraction] : points) arr.push_back({flops, fraction});
  return arr;
}

void put_source(json& j, const std::string& source) {
  if (!source.empty()) j["source"] = source;
}

}  // namespace

std::string to_string(GpuArch a) {
  switch (a) {
    case GpuArch::kVolta: return "volta";
    case GpuArch::kAmpere: return "ampere";
    case GpuArch::kHopper: return "hopper";
    case GpuArch::kBlackwell: return "blackwell";
  }
  return "ampere";
}

std::string to_string(HostCpu c) {
  switch (c) {
    case HostCpu::kIntel: return "intel";
    case HostCpu::kAmd: return "amd";
    case HostCpu::kOther: return "other";
  }
  return "other";
}

GpuArch gpu_arch_of_name(const std::string& gpu_name) {
  std::string n;
  for (char ch : gpu_name) n.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  const auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("V100")) return GpuArch::kVolta;
  if (has("H100") || has("H200") || has("H800") || has("GH200")) return GpuArch::kHopper;
  if (has("B100") || has("B200") || has("GB200")) return GpuArch::kBlackwell;
  return GpuArch::kAmpere;
}

std::string matmul_knot_name(double flops) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "gpu.matmul_efficiency@%.3g", flops);
  return buf;
}

namespace {

const char* const kUncertainParameters[] = {
    "gpu.matmul_efficiency", "gpu.memory_Bps",      "gpu.activation_elems_per_s", "gpu.adam_params_per_s",
    "gpu.attention_efficiency", "gpu.memory_kernels",
    "intra_node.bandwidth_Bps", "intra_node.latency_ns", "inter_node.nic_bandwidth_Bps", "inter_node.latency_ns",
    "host.pcie_Bps",         "host.adam_params_per_s", "nccl.latency"};

std::vector<ParameterUncertainty> read_uncertainty(ObjectReader& parent, const Gpu& gpu) {
  std::vector<ParameterUncertainty> out;
  if (!parent.has("uncertainty")) return out;
  const json& u = parent.raw("uncertainty");
  if (!u.is_object()) parent.fail("uncertainty", "an object of {\"relative\": ..., \"source\": ...} by parameter name");
  ObjectReader r = parent.object("uncertainty");
  for (const auto& [name, value] : u.items()) {
    if (!is_uncertain_parameter(name, gpu)) {
      std::vector<std::string> names(std::begin(kUncertainParameters), std::end(kUncertainParameters));
      for (const auto& [flops, e] : gpu.matmul_efficiency) names.push_back(matmul_knot_name(flops));
      const auto near = did_you_mean(name, names);
      r.fail(name, "a profile parameter (" + std::string(kUncertainParameters[0]) + ", ..., or a knot " +
                       matmul_knot_name(gpu.matmul_efficiency.empty() ? 1e9 : gpu.matmul_efficiency.front().first) + ")" +
                       (near ? "; did you mean \"" + *near + "\"?" : ""));
    }
    if (!value.is_object()) r.fail(name, "an object {\"relative\": ..., \"source\": ...}");
    ObjectReader p = r.object(name);
    ParameterUncertainty pu;
    pu.parameter = name;
    pu.relative = p.number("relative");
    if (!(pu.relative > 0 && pu.relative < 1)) p.fail_value("relative", "a relative standard deviation in (0, 1)");
    pu.source = p.string("source");
    p.finish();
    out.push_back(std::move(pu));
  }
  return out;
}

}  // namespace

const AttentionKernel* find_attention_kernel(const Gpu& gpu, const std::string& name) {
  const std::string& wanted = name == "flash" ? gpu.default_attention_kernel : name;
  for (const AttentionKernel& k : gpu.attention_kernels) {
    if (k.name == wanted) return &k;
  }
  return nullptr;
}

bool valid_currency(const std::string& code) {
  return code.size() == 3 && std::all_of(code.begin(), code.end(), [](unsigned char ch) { return std::isupper(ch) != 0; });
}

bool is_uncertain_parameter(const std::string& name, const Gpu& gpu) {
  for (const char* p : kUncertainParameters) {
    if (name == p) return true;
  }
  for (const auto& [flops, e] : gpu.matmul_efficiency) {
    if (name == matmul_knot_name(flops)) return true;
  }
  return false;
}

Cluster cluster_from_json(const json& j, const std::string& file) {
  ObjectReader r(j, file, "");
  Cluster c;
  c.file = file;
  c.name = r.string("name");
  c.nodes = ranged_int(r, "nodes", 1, limits::kGpus, "nodes");
  c.gpus_per_node = ranged_int(r, "gpus_per_node", 1, limits::kGpusPerNode, "GPUs");
  if (c.nodes * c.gpus_per_node > limits::kGpus) {
    r.fail_value("nodes", "at most " + std::to_string(limits::kGpus) + " GPUs in all (nodes × gpus_per_node)");
  }
  c.gpu = read_gpu(r.object("gpu"));
  c.intra_node = read_intra(r.object("intra_node"));
  c.inter_node = read_inter(r.object("inter_node"));
  c.host = read_host(r.object("host"));
  c.nccl = read_nccl(r, c.gpu.name);
  c.power = read_power(r);
  c.price = read_price(r);
  c.reliability = read_reliability(r);
  c.straggler = read_straggler(r, c);
  c.uncertainty = read_uncertainty(r, c.gpu);
  c.source = r.string_or("source", "");
  r.finish();
  return c;
}

Cluster load_cluster(const std::string& path) { return cluster_from_json(read_json_file(path), path); }

const char* to_string(Straggler::Kind k) {
  switch (k) {
    case Straggler::Kind::kGpu: return "gpu";
    case Straggler::Kind::kNode: return "node";
    case Straggler::Kind::kNic: return "nic";
  }
  return "?";
}

std::string describe(const Straggler& s) {
  std::string out = to_string(s.kind);
  out += s.count == 1 ? " " + std::to_string(s.first) : "s " + std::to_string(s.first) + "-" + std::to_string(s.first + s.count - 1);
  char f[32];
  std::snprintf(f, sizeof f, " ×%.3g", s.slowdown);
  return out + f;
}

json to_json(const Cluster& c) {
  json peak = json::object();
  for (const auto& [d, flops] : c.gpu.peak_flops) peak[to_string(d)] = flops;
  json gpu = {{"name", c.gpu.name},
              {"memory_bytes", c.gpu.memory_bytes},
              {"reserved_bytes", c.gpu.reserved_bytes},
              {"peak_flops", peak},
              {"hbm_Bps", c.gpu.hbm_Bps},
              {"memory_efficiency", c.gpu.memory_efficiency},
              {"matmul_efficiency", efficiency_json(c.gpu.matmul_efficiency)}};
  if (c.gpu.activation_elems_per_s > 0) gpu["activation_elems_per_s"] = c.gpu.activation_elems_per_s;
  if (c.gpu.adam_params_per_s > 0) gpu["adam_params_per_s"] = c.gpu.adam_params_per_s;
  if (c.gpu.sm_count > 0) gpu["sm_count"] = c.gpu.sm_count;
  if (!c.gpu.default_attention_kernel.empty()) {
    json kernels = {{"default", c.gpu.default_attention_kernel}};
    for (const AttentionKernel& k : c.gpu.attention_kernels) {
      json kj = {{"forward", efficiency_json(k.forward)}, {"backward", efficiency_json(k.backward)}};
      if (k.sustained != 1.0) kj["sustained"] = k.sustained;
      put_source(kj, k.source);
      kernels[k.name] = kj;
    }
    gpu["attention_kernels"] = kernels;
  }
  const MemoryKernels& mk = c.gpu.memory_kernels;
  if (mk.any()) {
    json kj = json::object();
    if (mk.strided > 0) kj["strided"] = mk.strided;
    if (mk.dropout > 0) kj["dropout"] = mk.dropout;
    if (!mk.softmax.empty()) kj["softmax"] = efficiency_json(mk.softmax);
    put_source(kj, mk.source);
    gpu["memory_kernels"] = kj;
  }
  put_source(gpu, c.gpu.source);
  json intra = {{"bandwidth_Bps", c.intra_node.bandwidth_Bps}, {"latency_ns", c.intra_node.latency_ns}};
  put_source(intra, c.intra_node.source);
  json inter = {{"nics_per_node", c.inter_node.nics_per_node},
                {"nic_bandwidth_Bps", c.inter_node.nic_bandwidth_Bps},
                {"latency_ns", c.inter_node.latency_ns},
                {"oversubscription", c.inter_node.oversubscription}};
  put_source(inter, c.inter_node.source);
  json host = {{"pcie_Bps", c.host.pcie_Bps},
               {"memory_bytes", c.host.memory_bytes},
               {"adam_params_per_s", c.host.adam_params_per_s}};
  put_source(host, c.host.source);
  json nccl = {{"version", c.nccl.version},
               {"channels", c.nccl.channels},
               {"host_cpu", to_string(c.nccl.host_cpu)},
               {"gpu_arch", to_string(c.nccl.gpu_arch)}};
  if (c.nccl.latency_scale != 1.0) nccl["latency_scale"] = c.nccl.latency_scale;
  put_source(nccl, c.nccl.source);
  json j = {{"name", c.name},   {"nodes", c.nodes},          {"gpus_per_node", c.gpus_per_node},
            {"gpu", gpu},       {"intra_node", intra},       {"inter_node", inter},
            {"host", host},     {"nccl", nccl}};
  if (c.power.gpu_watts > 0 || c.power.node_watts > 0) {
    json power = json::object();
    if (c.power.gpu_watts > 0) power["gpu_watts"] = c.power.gpu_watts;
    if (c.power.node_watts > 0) power["node_watts"] = c.power.node_watts;
    put_source(power, c.power.source);
    j["power"] = power;
  }
  if (c.price.per_gpu_hour > 0) {
    json price = {{"per_gpu_hour", c.price.per_gpu_hour}, {"currency", c.price.currency}};
    put_source(price, c.price.source);
    j["price"] = price;
  }
  if (c.reliability.known()) {
    json rel = json::object();
    if (c.reliability.failures_per_gpu_hour > 0) rel["failures_per_gpu_hour"] = c.reliability.failures_per_gpu_hour;
    if (c.reliability.failures_per_node_hour > 0) rel["failures_per_node_hour"] = c.reliability.failures_per_node_hour;
    rel["restart_s"] = c.reliability.restart_s;
    rel["checkpoint_Bps"] = c.reliability.checkpoint_Bps;
    put_source(rel, c.reliability.source);
    j["reliability"] = rel;
  }
  if (c.straggler) {
    j["straggler"] = {{"kind", to_string(c.straggler->kind)}, {"first", c.straggler->first}, {"count", c.straggler->count},
                      {"slowdown", c.straggler->slowdown}};
  }
  if (!c.uncertainty.empty()) {
    json u = json::object();
    for (const ParameterUncertainty& p : c.uncertainty) u[p.parameter] = {{"relative", p.relative}, {"source", p.source}};
    j["uncertainty"] = u;
  }
  put_source(j, c.source);
  return j;
}

}  // namespace stagecraft::spec
