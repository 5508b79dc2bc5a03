#include "core/spec/cluster.hpp"

#include <cmath>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

int64_t positive_int(ObjectReader& r, std::string_view key, Quantity kind = Quantity::kCount) {
  int64_t v = r.integer(key, kind);
  if (v < 1) r.fail_value(key, "a positive integer");
  return v;
}

int64_t non_negative_int(ObjectReader& r, std::string_view key, Quantity kind = Quantity::kCount) {
  int64_t v = r.integer(key, kind);
  if (v < 0) r.fail_value(key, "a non-negative integer");
  return v;
}

double positive_number(ObjectReader& r, std::string_view key, Quantity kind = Quantity::kCount) {
  double v = r.number(key, kind);
  if (!(v > 0)) r.fail_value(key, "a positive number");
  return v;
}

std::vector<std::pair<double, double>> read_efficiency(ObjectReader& r) {
  const json& arr = r.raw("matmul_efficiency");
  const std::string pointer = r.pointer_of("matmul_efficiency");
  if (!arr.is_array() || arr.empty()) {
    throw SpecError(r.file(), pointer, "expected a non-empty array of [gemm_flops, fraction] pairs");
  }
  std::vector<std::pair<double, double>> points;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const json& p = arr[i];
    const std::string at = pointer + "/" + std::to_string(i);
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
      throw SpecError(r.file(), at, "expected [gemm_flops, fraction_of_peak], got " + describe(p));
    }
    double flops = p[0].get<double>(), fraction = p[1].get<double>();
    if (!(flops > 0)) throw SpecError(r.file(), at + "/0", "expected positive GEMM FLOPs, got " + describe(p[0]));
    if (!(fraction > 0 && fraction <= 1)) {
      throw SpecError(r.file(), at + "/1", "expected a fraction of peak in (0, 1], got " + describe(p[1]));
    }
    if (!points.empty() && flops <= points.back().first) {
      throw SpecError(r.file(), at + "/0", "expected GEMM FLOPs strictly increasing, got " + describe(p[0]) +
                                               " after " + describe(arr[i - 1][0]));
    }
    points.emplace_back(flops, fraction);
  }
  return points;
}

Gpu read_gpu(ObjectReader r) {
  Gpu g;
  g.name = r.string("name");
  g.memory_bytes = positive_int(r, "memory_bytes", Quantity::kBytes);
  g.reserved_bytes = non_negative_int(r, "reserved_bytes", Quantity::kBytes);
  if (g.reserved_bytes >= g.memory_bytes) {
    r.fail_value("reserved_bytes", "less than memory_bytes (" + std::to_string(g.memory_bytes) + ")");
  }
  ObjectReader peak = r.object("peak_flops");
  for (Dtype d : {Dtype::kFp32, Dtype::kTf32, Dtype::kFp16, Dtype::kBf16, Dtype::kFp8}) {
    if (peak.has(to_string(d))) g.peak_flops[d] = positive_number(peak, to_string(d));
  }
  peak.finish();
  if (g.peak_flops.empty()) r.fail("peak_flops", "at least one of \"fp32\", \"tf32\", \"fp16\", \"bf16\", \"fp8\"");
  g.hbm_Bps = positive_number(r, "hbm_Bps", Quantity::kBandwidth);
  g.memory_efficiency = r.number_or("memory_efficiency", 1.0);
  if (!(g.memory_efficiency > 0 && g.memory_efficiency <= 1)) {
    r.fail_value("memory_efficiency", "a fraction of hbm_Bps in (0, 1]");
  }
  if (r.has("activation_elems_per_s")) g.activation_elems_per_s = positive_number(r, "activation_elems_per_s");
  if (r.has("adam_params_per_s")) g.adam_params_per_s = positive_number(r, "adam_params_per_s");
  g.matmul_efficiency = read_efficiency(r);
  g.source = r.string_or("source", "");
  r.finish();
  return g;
}

IntraNode read_intra(ObjectReader r) {
  IntraNode n;
  n.bandwidth_Bps = positive_number(r, "bandwidth_Bps", Quantity::kBandwidth);
  n.latency_ns = non_negative_int(r, "latency_ns");
  n.source = r.string_or("source", "");
  r.finish();
  return n;
}

InterNode read_inter(ObjectReader r) {
  InterNode n;
  n.nics_per_node = positive_int(r, "nics_per_node");
  n.nic_bandwidth_Bps = positive_number(r, "nic_bandwidth_Bps", Quantity::kBandwidth);
  n.latency_ns = non_negative_int(r, "latency_ns");
  n.oversubscription = r.number_or("oversubscription", 1.0);
  if (!(n.oversubscription >= 1.0)) r.fail_value("oversubscription", "a taper factor >= 1.0 (1.0 = full bisection)");
  n.source = r.string_or("source", "");
  r.finish();
  return n;
}

Host read_host(ObjectReader r) {
  Host h;
  h.pcie_Bps = positive_number(r, "pcie_Bps", Quantity::kBandwidth);
  h.memory_bytes = positive_int(r, "memory_bytes", Quantity::kBytes);
  h.adam_params_per_s = positive_number(r, "adam_params_per_s");
  h.source = r.string_or("source", "");
  r.finish();
  return h;
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

Cluster cluster_from_json(const json& j, const std::string& file) {
  ObjectReader r(j, file, "");
  Cluster c;
  c.file = file;
  c.name = r.string("name");
  c.nodes = positive_int(r, "nodes");
  c.gpus_per_node = positive_int(r, "gpus_per_node");
  c.gpu = read_gpu(r.object("gpu"));
  c.intra_node = read_intra(r.object("intra_node"));
  c.inter_node = read_inter(r.object("inter_node"));
  c.host = read_host(r.object("host"));
  c.source = r.string_or("source", "");
  r.finish();
  return c;
}

Cluster load_cluster(const std::string& path) { return cluster_from_json(read_json_file(path), path); }

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
  json j = {{"name", c.name},   {"nodes", c.nodes},          {"gpus_per_node", c.gpus_per_node},
            {"gpu", gpu},       {"intra_node", intra},       {"inter_node", inter},
            {"host", host}};
  put_source(j, c.source);
  return j;
}

}  // namespace stagecraft::spec
