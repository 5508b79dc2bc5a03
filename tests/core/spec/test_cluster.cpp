#include "core/spec/cluster.hpp"

#include <gtest/gtest.h>

#include "support.hpp"

namespace stagecraft::spec {
namespace {

using nlohmann::json;
using test::expect_spec_error;

json small_cluster() {
  return json::parse(R"({
    "name": "c", "nodes": 2, "gpus_per_node": 4,
    "gpu": { "name": "G", "memory_bytes": "16GiB", "reserved_bytes": 1073741824,
             "peak_flops": {"bf16": 1e14, "fp32": 1e13}, "hbm_Bps": "1TB/s",
             "matmul_efficiency": [[1e9, 0.5], [1e12, 0.8]] },
    "intra_node": { "bandwidth_Bps": 1e11, "latency_ns": 2000 },
    "inter_node": { "nics_per_node": 4, "nic_bandwidth_Bps": "200Gbps", "latency_ns": 5000 },
    "host": { "pcie_Bps": 2.5e10, "memory_bytes": 1099511627776, "adam_params_per_s": 1e9 } })");
}

TEST(Cluster, LoadsWithHumanUnits) {
  Cluster c = cluster_from_json(small_cluster(), "c.json");
  EXPECT_EQ(c.gpus(), 2 * 4);
  EXPECT_EQ(c.gpu.memory_bytes, int64_t{16} * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(c.gpu.hbm_Bps, 1e12);
  EXPECT_DOUBLE_EQ(c.inter_node.nic_bandwidth_Bps, 200e9 / 8);  // bits to bytes
  EXPECT_DOUBLE_EQ(c.inter_node.oversubscription, 1.0);           // default: full bisection
  EXPECT_DOUBLE_EQ(c.gpu.peak_flops.at(Dtype::kBf16), 1e14);
  EXPECT_EQ(c.gpu.peak_flops.count(Dtype::kFp16), 0u);
  Cluster again = cluster_from_json(to_json(c), "again.json");
  EXPECT_EQ(to_json(again), to_json(c));
}

TEST(Cluster, ArithmeticRatesAreOptionalAndRoundTrip) {
  Cluster c = cluster_from_json(small_cluster(), "c.json");
  EXPECT_EQ(c.gpu.activation_elems_per_s, 0.0);  // absent: no activation term
  EXPECT_EQ(c.gpu.adam_params_per_s, 0.0);       // nor an Adam one
  EXPECT_FALSE(to_json(c)["gpu"].contains("activation_elems_per_s"));
  EXPECT_FALSE(to_json(c)["gpu"].contains("adam_params_per_s"));
  json j = small_cluster();
  j["gpu"]["activation_elems_per_s"] = 5e7;
  j["gpu"]["adam_params_per_s"] = 3e8;
  c = cluster_from_json(j, "c.json");
  EXPECT_DOUBLE_EQ(c.gpu.activation_elems_per_s, 5e7);
  EXPECT_DOUBLE_EQ(c.gpu.adam_params_per_s, 3e8);
  const Cluster again = cluster_from_json(to_json(c), "again.json");
  EXPECT_DOUBLE_EQ(again.gpu.activation_elems_per_s, 5e7);
  EXPECT_DOUBLE_EQ(again.gpu.adam_params_per_s, 3e8);
}

// A GPU's fused attention kernels: each pass's (sequence length, fraction of peak) points, the
// default that "attention": "flash" means, and the lot written back unchanged.
TEST(Cluster, AttentionKernelsAreReadAndRoundTrip) {
  json j = small_cluster();
  j["gpu"]["attention_kernels"] = {{"default", "fa2"},
                                   {"fa2", {{"forward", {{512, 0.2}, {16384, 0.34}}}, {"backward", {{512, 0.21}}}, {"source", "s"}}},
                                   {"cudnn", {{"forward", {{512, 0.3}}}, {"backward", {{512, 0.3}}}}}};
  const Cluster c = cluster_from_json(j, "c.json");
  ASSERT_EQ(c.gpu.attention_kernels.size(), 2u);
  EXPECT_EQ(find_attention_kernel(c.gpu, "flash")->name, "fa2");
  EXPECT_EQ(find_attention_kernel(c.gpu, "cudnn")->forward.front().second, 0.3);
  EXPECT_EQ(find_attention_kernel(c.gpu, "fa3"), nullptr);
  EXPECT_EQ(find_attention_kernel(c.gpu, "fa2")->forward.back(), std::make_pair(16384.0, 0.34));
  const Cluster again = cluster_from_json(to_json(c), "again.json");
  EXPECT_EQ(to_json(again), to_json(c));
  EXPECT_FALSE(to_json(cluster_from_json(small_cluster(), "c.json"))["gpu"].contains("attention_kernels"));
}

TEST(Cluster, PowerAndPriceAreOptionalAndRoundTrip) {
  Cluster plain = cluster_from_json(small_cluster(), "c.json");
  EXPECT_EQ(plain.power.node_watts, 0.0);
  EXPECT_EQ(plain.price.per_gpu_hour, 0.0);
  EXPECT_FALSE(to_json(plain).contains("power"));
  json j = small_cluster();
  j["power"] = {{"gpu_watts", 700}, {"node_watts", 10200}, {"source", "datasheet"}};
  j["price"] = {{"per_gpu_hour", 2.5}, {"currency", "EUR"}};
  const Cluster c = cluster_from_json(j, "c.json");
  EXPECT_EQ(c.power.gpu_watts, 700.0);
  EXPECT_EQ(c.power.node_watts, 10200.0);
  EXPECT_EQ(c.price.per_gpu_hour, 2.5);
  EXPECT_EQ(c.price.currency, "EUR");
  EXPECT_EQ(to_json(cluster_from_json(to_json(c), "again.json")), to_json(c));
  json bad = j;
  bad["power"]["gpu_watts"] = 0;
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/power/gpu_watts", "above 0");
  bad = j;
  bad["power"] = json::object();
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/power/gpu_watts", "\"node_watts\"");
  bad = j;
  bad["price"]["per_gpu_hour"] = -1;
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/price/per_gpu_hour", "above 0");
  bad = j;
  bad["price"]["currency"] = "euro";
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/price/currency", "three-letter");
  bad = j;
  bad["price"]["per_gpu_hr"] = 1;
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/price/per_gpu_hr", "per_gpu_hour");
}

TEST(Cluster, ReliabilityIsOptionalOneRateAndRoundTrips) {
  EXPECT_FALSE(cluster_from_json(small_cluster(), "c.json").reliability.known());
  json j = small_cluster();
  j["reliability"] = {{"failures_per_gpu_hour", 2e-5}, {"restart_s", 600}, {"checkpoint_Bps", "2TB/s"}, {"source", "paper"}};
  const Cluster c = cluster_from_json(j, "c.json");
  EXPECT_TRUE(c.reliability.known());
  EXPECT_EQ(c.reliability.failures_per_gpu_hour, 2e-5);
  EXPECT_EQ(c.reliability.checkpoint_Bps, 2e12);
  EXPECT_EQ(to_json(cluster_from_json(to_json(c), "again.json")), to_json(c));
  json bad = j;
  bad["reliability"]["failures_per_node_hour"] = 1e-4;   // both rates
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/reliability/failures_per_gpu_hour", "one of");
  bad = j;
  bad["reliability"].erase("failures_per_gpu_hour");     // neither
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/reliability/failures_per_gpu_hour", "one of");
  bad = j;
  bad["reliability"]["failures_per_gpu_hour"] = 2;       // more than one an hour
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/reliability/failures_per_gpu_hour", "at most 1");
  bad = j;
  bad["reliability"]["restart_s"] = -1;
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/reliability/restart_s", "seconds from 0");
  bad = j;
  bad["reliability"].erase("checkpoint_Bps");
  expect_spec_error([&] { cluster_from_json(bad, "c.json"); }, "/reliability/checkpoint_Bps", "");
}

TEST(Cluster, NcclSectionAsAVersionOrAnObject) {
  Cluster c = cluster_from_json(small_cluster(), "c.json");
  EXPECT_EQ(c.nccl.version, "2.30");          // default: the newest band
  EXPECT_EQ(c.nccl.gpu_arch, GpuArch::kAmpere);  // "G" names no known GPU
  json j = small_cluster();
  j["nccl"] = "2.18.5";
  EXPECT_EQ(cluster_from_json(j, "c.json").nccl.minor, 18);
  j["nccl"] = {{"version", "2.12"}, {"channels", 8}, {"host_cpu", "amd"}};
  j["gpu"]["name"] = "H100-SXM5-80GB";
  c = cluster_from_json(j, "c.json");
  EXPECT_EQ(c.nccl.minor, 12);
  EXPECT_EQ(c.nccl.channels, 8);
  EXPECT_EQ(c.nccl.host_cpu, HostCpu::kAmd);
  EXPECT_EQ(c.nccl.gpu_arch, GpuArch::kHopper);   // from the name
  const Cluster again = cluster_from_json(to_json(c), "again.json");
  EXPECT_EQ(to_json(again), to_json(c));
}

TEST(Cluster, UncertaintyNamesProfileParametersAndRoundTrips) {
  json j = small_cluster();
  j["nccl"] = {{"latency_scale", 1.25}};
  j["uncertainty"] = {{"inter_node.nic_bandwidth_Bps", {{"relative", 0.04}, {"source", "nccl-tests spread"}}},
                      {"nccl.latency", {{"relative", 0.25}, {"source", "a model's spread"}}},
                      {"gpu.matmul_efficiency", {{"relative", 0.05}, {"source", "GEMM guide range"}}}};
  const Cluster c = cluster_from_json(j, "c.json");
  ASSERT_EQ(c.uncertainty.size(), 3u);
  EXPECT_DOUBLE_EQ(c.nccl.latency_scale, 1.25);
  EXPECT_TRUE(is_uncertain_parameter("intra_node.bandwidth_Bps", c.gpu));
  EXPECT_FALSE(is_uncertain_parameter("gpu.name", c.gpu));
  EXPECT_EQ(to_json(cluster_from_json(to_json(c), "again.json")), to_json(c));
}

struct BadCluster {
  const char* what;
  json patch;
  const char* pointer;
  const char* fragment;
};

TEST(Cluster, RejectsBadInputs) {
  const BadCluster cases[] = {
      {"typo", {{"gpus_per_nod", 8}}, "/gpus_per_nod", "did you mean \"gpus_per_node\""},
      {"zero nodes", {{"nodes", 0}}, "/nodes", "expected an integer from 1 to 1048576 nodes, got 0"},
      {"reserved >= memory", {{"gpu", {{"reserved_bytes", "16GiB"}}}}, "/gpu/reserved_bytes", "less than memory_bytes"},
      {"unknown dtype", {{"gpu", {{"peak_flops", {{"int4", 1e15}}}}}}, "/gpu/peak_flops/int4", "unknown key"},
      {"negative peak", {{"gpu", {{"peak_flops", {{"bf16", -1}}}}}}, "/gpu/peak_flops/bf16", "a value from 1e+06 to 1e+18 FLOP/s, got -1"},
      {"efficiency above 1", {{"gpu", {{"matmul_efficiency", {{1e9, 1.5}}}}}}, "/gpu/matmul_efficiency/0/1", "(0, 1]"},
      {"efficiency not increasing", {{"gpu", {{"matmul_efficiency", {{1e12, 0.5}, {1e9, 0.8}}}}}},
       "/gpu/matmul_efficiency/1/0", "strictly increasing"},
      {"bandwidth unit on a size", {{"gpu", {{"memory_bytes", "16Gbps"}}}}, "/gpu/memory_bytes", "a number of bytes"},
      {"oversubscription below 1", {{"inter_node", {{"oversubscription", 0.5}}}}, "/inter_node/oversubscription", "from 1.0 (full bisection) to 1024"},
      {"no nics", {{"inter_node", {{"nics_per_node", 0}}}}, "/inter_node/nics_per_node", "an integer from 1 to 1024 NICs"},
      {"negative latency", {{"intra_node", {{"latency_ns", -1}}}}, "/intra_node/latency_ns", "an integer from 0 to 100000000000 ns"},
      {"host typo", {{"host", {{"pcie_bps", 1e9}}}}, "/host/pcie_bps", "did you mean \"pcie_Bps\""},
      {"memory efficiency above 1", {{"gpu", {{"memory_efficiency", 1.2}}}}, "/gpu/memory_efficiency", "(0, 1]"},
      {"nccl version too old", {{"nccl", "2.6"}}, "/nccl", "2.7 to 2.30"},
      {"nccl version not a version", {{"nccl", {{"version", "latest"}}}}, "/nccl/version", "2.7 to 2.30"},
      {"nccl host cpu", {{"nccl", {{"host_cpu", "power"}}}}, "/nccl/host_cpu", "amd"},
      {"nccl typo", {{"nccl", {{"channel", 16}}}}, "/nccl/channel", "did you mean \"channels\""},
      {"activation rate zero", {{"gpu", {{"activation_elems_per_s", 0}}}}, "/gpu/activation_elems_per_s",
       "a value from 1000 to 1e+16 per second"},
      {"activation rate typo", {{"gpu", {{"activation_elem_per_s", 1e8}}}}, "/gpu/activation_elem_per_s",
       "did you mean \"activation_elems_per_s\""},
      {"negative adam rate", {{"gpu", {{"adam_params_per_s", -1}}}}, "/gpu/adam_params_per_s", "a value from 1000"},
      // Physical ranges: 1e-300 B/s or 9e18 ns would overflow the simulator's int64 nanoseconds.
      {"bandwidth of 1e-300", {{"inter_node", {{"nic_bandwidth_Bps", 1e-300}}}}, "/inter_node/nic_bandwidth_Bps",
       "a value from 1000 to 1e+15 bytes/s, got 1e-300"},
      {"latency of 9e18 ns", {{"inter_node", {{"latency_ns", 9e18}}}}, "/inter_node/latency_ns", "to 100000000000 ns"},
      {"more than 2^20 GPUs", {{"nodes", 1 << 18}, {"gpus_per_node", 8}}, "/nodes", "at most 1048576 GPUs in all"},
      {"a count in quotes", {{"gpus_per_node", "8"}}, "/gpus_per_node", "numbers are written without quotes"},
      {"uncertainty of no parameter", {{"uncertainty", {{"gpu.matmul_eficiency", {{"relative", 0.1}, {"source", "s"}}}}}},
       "/uncertainty/gpu.matmul_eficiency", "did you mean \"gpu.matmul_efficiency\""},
      {"uncertainty of 100%", {{"uncertainty", {{"host.pcie_Bps", {{"relative", 1.0}, {"source", "s"}}}}}},
       "/uncertainty/host.pcie_Bps/relative", "in (0, 1)"},
      {"uncertainty without a source", {{"uncertainty", {{"host.pcie_Bps", {{"relative", 0.1}}}}}},
       "/uncertainty/host.pcie_Bps/source", ""},
      {"attention default not listed",
       {{"gpu", {{"attention_kernels", {{"default", "fa3"}, {"fa2", {{"forward", {{512, 0.3}}}, {"backward", {{512, 0.3}}}}}}}}}},
       "/gpu/attention_kernels/default", "one of the kernels listed here"},
      {"attention lengths not increasing",
       {{"gpu", {{"attention_kernels", {{"default", "fa2"}, {"fa2", {{"forward", {{1024, 0.3}, {512, 0.4}}}, {"backward", {{512, 0.3}}}}}}}}}},
       "/gpu/attention_kernels/fa2/forward/1/0", "strictly increasing"},
      {"attention fraction above 1",
       {{"gpu", {{"attention_kernels", {{"default", "fa2"}, {"fa2", {{"forward", {{512, 0.3}}}, {"backward", {{512, 1.3}}}}}}}}}},
       "/gpu/attention_kernels/fa2/backward/0/1", "(0, 1]"},
      {"attention kernel called flash",
       {{"gpu", {{"attention_kernels", {{"default", "flash"}, {"flash", {{"forward", {{512, 0.3}}}, {"backward", {{512, 0.3}}}}}}}}}},
       "/gpu/attention_kernels/flash", "other than \"flash\""},
  };
  for (const BadCluster& c : cases) {
    SCOPED_TRACE(c.what);
    json j = small_cluster();
    j.merge_patch(c.patch);
    expect_spec_error([&] { cluster_from_json(j, "bad.json"); }, c.pointer, c.fragment);
  }
}

}  // namespace
}  // namespace stagecraft::spec
