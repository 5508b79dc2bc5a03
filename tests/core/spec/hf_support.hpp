// Helpers of the Hugging Face family tests (test_hf_families.cpp, test_hf_moe_families.cpp): hand
// counts and what a read model says about its own pieces.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/count/count.hpp"
#include "core/count/tensors.hpp"
#include "core/program/units.hpp"
#include "core/spec/model.hpp"

namespace stagecraft::spec::hf_test {

// The units (the pieces pipelining, ZeRO and the executor use) hold exactly the counted parameters.
inline void expect_units_agree(const Model& m) {
  const std::vector<program::Unit> units = program::model_units(m, 1);
  const int64_t sum = std::accumulate(units.begin(), units.end(), int64_t{0},
                                      [](int64_t a, const program::Unit& u) { return a + u.params; });
  EXPECT_EQ(sum, count::parameters(m)) << m.name;
}

inline int64_t lin(int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); }

// The columns of tensor `name` in unit `unit` on one of `tp` ranks, or -1 when the unit has none.
inline int64_t tensor_cols(const Model& m, int32_t unit, int64_t tp, const std::string& name) {
  for (const count::TensorSpec& t : count::unit_tensors(m, unit, tp)) {
    if (t.name == name) return t.cols;
  }
  return -1;
}

inline bool warned(const Model& m, const std::string& text) {
  for (const std::string& w : m.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace stagecraft::spec::hf_test
