// The search's explanation (planner/explain.hpp), axis by axis: what it says of a value no plan was
// simulated with.
#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "planner/explain.hpp"

namespace stagecraft::planner {
namespace {

// The tiny model on the 2 ranks of cpu-local, offload none or cpu: every plan fits without
// offloading, so each offloading plan is dominated by its twin without it (prune.hpp) and none is
// simulated or given a memory bound. The explanation says that, and never prints the unset bound
// (INT64_MAX bytes read as "8589934592.0 GiB per GPU").
TEST(Explain, AValueWhosePlansAreAllDominatedSaysSoWithoutAMemoryBound) {
  SpaceLimits limits;
  limits.offload = {spec::Offload::kNone, spec::Offload::kCpu};
  const spec::Training t = spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, "tiny-cpu"));
  const Space space(test::bundled_model("tiny"), test::bundled_cluster("cpu-local", 1), t, 2, limits);
  SearchOptions o;
  o.threads = 1;
  const SearchResult r = search(space, o);
  ASSERT_FALSE(r.top.empty());
  const auto cell = r.axes.at("offload").at("cpu");
  ASSERT_GT(cell.candidates, 0);
  EXPECT_EQ(cell.min_memory_lb, INT64_MAX) << "every offloading plan is dominated: no bound was taken";
  const Explanation x = explain(r);
  const AxisAlternative* offload = nullptr;
  for (const AxisExplanation& ax : x.axes) {
    if (ax.axis != "offload") continue;
    EXPECT_EQ(ax.best_value, "none");
    for (const AxisAlternative& alt : ax.alternatives) {
      if (alt.value == "cpu") offload = &alt;
    }
  }
  ASSERT_NE(offload, nullptr) << "the explanation names the offload alternative";
  EXPECT_EQ(offload->verdict, "dominated");
  EXPECT_NE(offload->reason.find("offloads the optimizer where the same plan without offload fits"), std::string::npos)
      << offload->reason;
  EXPECT_EQ(offload->reason.find("GiB"), std::string::npos) << offload->reason;
  for (const std::string& line : x.lines()) EXPECT_EQ(line.find("8589934592"), std::string::npos) << line;
}

}  // namespace
}  // namespace stagecraft::planner
