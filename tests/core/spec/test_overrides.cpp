// --set KEY=VALUE (core/spec/overrides.hpp): parsing, applying through the file's own loader, and
// the errors that name --set, the file and the field.
#include "core/spec/overrides.hpp"

#include <gtest/gtest.h>

#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"

namespace stagecraft::spec {
namespace {

std::string cluster_file() { return resolve_config(ConfigKind::kCluster, "dgx-h100-ndr"); }
std::string training_file() { return resolve_config(ConfigKind::kTraining, "demo-13b-1024"); }

TEST(Overrides, KeysAreATargetAndAPathValuesAreJsonOrText) {
  const Override o = parse_override("cluster.inter_node.nic_bandwidth_Bps=25e9");
  EXPECT_EQ(o.target, "cluster");
  EXPECT_EQ(o.path, (std::vector<std::string>{"inter_node", "nic_bandwidth_Bps"}));
  EXPECT_EQ(o.pointer(), "/inter_node/nic_bandwidth_Bps");
  EXPECT_EQ(o.key(), "cluster.inter_node.nic_bandwidth_Bps");
  ASSERT_TRUE(o.value.is_number());
  EXPECT_EQ(o.value.get<double>(), 25e9);
  EXPECT_EQ(parse_override("training.dtype=fp8").value, nlohmann::json("fp8")) << "not JSON: the text";
  EXPECT_EQ(parse_override("training.dtype=\"fp8\"").value, nlohmann::json("fp8"));
  EXPECT_EQ(parse_override("cluster.nodes=16").value, nlohmann::json(16));
  for (const char* bad : {"cluster.nodes", "=3", "cluster.nodes=", "model.layers=2", "nodes=3", "cluster..x=1", "cluster=1"}) {
    try {
      parse_override(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find("--set"), std::string::npos) << e.what();
    }
  }
}

TEST(Overrides, AppliedValuesAreReadByTheLoaderAndRecordedInTheSource) {
  const Cluster base = load_cluster(cluster_file());
  // 200 Gb/s per NIC, the loader's human form: 200e9 / 8 bytes per second
  const Cluster c = load_cluster(cluster_file(), parse_overrides({"cluster.inter_node.nic_bandwidth_Bps=200Gbps",
                                                                   "cluster.inter_node.nics_per_node=4", "cluster.nodes=16"}));
  EXPECT_DOUBLE_EQ(c.inter_node.nic_bandwidth_Bps, 200e9 / 8);
  EXPECT_EQ(c.inter_node.nics_per_node, 4);
  EXPECT_EQ(c.nodes, 16);
  EXPECT_EQ(c.gpu.memory_bytes, base.gpu.memory_bytes) << "everything else as in the file";
  EXPECT_NE(c.source.find("what-if: --set inter_node.nic_bandwidth_Bps=200Gbps"), std::string::npos) << c.source;
  EXPECT_EQ(c.file, cluster_file());
  // training overrides leave the cluster alone, and the other way round
  const Training t = load_training(training_file(), parse_overrides({"training.global_batch=512", "cluster.nodes=2"}));
  EXPECT_EQ(t.global_batch, 512);
  EXPECT_EQ(load_cluster(cluster_file(), parse_overrides({"training.global_batch=512"})).nodes, base.nodes);
}

TEST(Overrides, ErrorsNameTheFileTheSetAndTheField) {
  try {
    load_cluster(cluster_file(), parse_overrides({"cluster.inter_node.nics_per_node=0"}));
    FAIL() << "0 NICs accepted";
  } catch (const SpecError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dgx-h100-ndr.json"), std::string::npos) << what;
    EXPECT_NE(what.find("--set cluster.inter_node.nics_per_node=0"), std::string::npos) << what;
    EXPECT_EQ(e.pointer(), "/inter_node/nics_per_node");
  }
  try {
    load_cluster(cluster_file(), parse_overrides({"cluster.inter_nod.nics_per_node=4"}));
    FAIL() << "a misspelt object accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(e.pointer(), "/inter_nod");
  }
  // a misspelt last name: the loader's unknown-key check
  EXPECT_THROW(load_cluster(cluster_file(), parse_overrides({"cluster.inter_node.nic_bandwith_Bps=1e9"})), SpecError);
}

}  // namespace
}  // namespace stagecraft::spec
