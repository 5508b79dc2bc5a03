// Every bundled config loads, carries its source, and every bundled plan is valid for the case it
// was written for.
#include "core/spec/bundled.hpp"

#include <gtest/gtest.h>

#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"
#include "support.hpp"

namespace stagecraft::spec {
namespace {

std::string path(ConfigKind kind, const std::string& name) { return resolve_config(kind, name); }

TEST(Bundled, EveryModelLoadsWithASource) {
  const auto names = bundled_names(ConfigKind::kModel);
  for (const char* required : {"gpt2-124m", "gpt2-1.5b", "gpt3-1.3b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
                               "megatron-22b", "turing-530b", "megatron-1t", "llama2-7b", "llama2-13b",
                               "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b", "tiny"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    Model m = load_model(path(ConfigKind::kModel, n));
    EXPECT_EQ(m.name, n);
    EXPECT_FALSE(m.source.empty());
  }
}

TEST(Bundled, EveryClusterLoadsWithSources) {
  const auto names = bundled_names(ConfigKind::kCluster);
  for (const char* required : {"dgx-a100-80g-hdr", "dgx-h100-ndr", "h200-1", "h100-1", "dgx-h100-roce-100g", "h100-roce-400g-16k", "dgx-h100-ndr-16k", "cpu-local"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  }
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    Cluster c = load_cluster(path(ConfigKind::kCluster, n));
    EXPECT_EQ(c.name, n);
    for (const std::string* s : {&c.source, &c.gpu.source, &c.intra_node.source, &c.inter_node.source,
                                 &c.host.source}) {
      EXPECT_FALSE(s->empty());
    }
    if (c.reliability.known()) {
      EXPECT_FALSE(c.reliability.source.empty());  // a failure rate names where it comes from
    }
  }
}

TEST(Bundled, EveryTrainingLoads) {
  for (const std::string& n : bundled_names(ConfigKind::kTraining)) {
    SCOPED_TRACE(n);
    EXPECT_FALSE(load_training(path(ConfigKind::kTraining, n)).source.empty());
  }
}

struct Case {
  const char* plan;
  const char* model;
  const char* training;
  int64_t gpus;
};

TEST(Bundled, EveryPlanIsValidForItsCase) {
  const Case cases[] = {
      {"gpt3-175b-1024gpu", "gpt3-175b", "gpt3-175b-1536", 128 * 8},
      {"demo-13b", "gpt3-13b", "demo-13b-1024", 8 * 8},
      {"tiny-pp2-dp2", "tiny", "tiny-cpu", 4},
      {"tiny-zero3", "tiny", "tiny-cpu", 2},
      {"tiny-moe-ep2-pp2-dp2", "tiny-moe", "tiny-cpu", 4},
      {"tiny-tp2-pp2-dp2", "tiny", "tiny-cpu", 8},
      {"tiny-cp2-dp2", "tiny", "tiny-cpu", 4},
      {"one-gpu", "gpt2-124m", "tiny-cpu", 1},
      {"mixtral-8x7b-64gpu", "mixtral-8x7b", "mixtral-8x7b-256", 8 * 8},
  };
  EXPECT_EQ(bundled_names(ConfigKind::kPlan).size(), std::size(cases)) << "a bundled plan without a case here";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.plan);
    Plan p = load_plan(path(ConfigKind::kPlan, c.plan));
    EXPECT_NO_THROW(validate_plan(p, load_model(path(ConfigKind::kModel, c.model)),
                                  load_training(path(ConfigKind::kTraining, c.training)), c.gpus));
  }
}

TEST(Bundled, UnknownNameListsTheBundledOnes) {
  test::expect_spec_error([] { resolve_config(ConfigKind::kModel, "gpt5"); }, "", "bundled: ");
}

}  // namespace
}  // namespace stagecraft::spec
