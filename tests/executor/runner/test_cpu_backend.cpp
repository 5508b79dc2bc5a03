// CpuBackend (executor/cpu_backend.hpp), the Backend the Program interpreter runs on: its element
// moves, and its units against Layer<float> called directly on the same parameters.
#include "executor/cpu_backend.hpp"

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "core/program/units.hpp"
#include "executor/data/corpus.hpp"
#include "executor/errors.hpp"
#include "plans.hpp"
#include "support.hpp"

namespace stagecraft::executor {
namespace {

struct OneStage {
  program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan({.micro_batches = 8}));
  StageLayout layout{prog, 0, 0, 0};
  MemoryTracker memory;
  CpuBackend backend{layout, false, memory, false, prog.plan.micro_batches};
};

TEST(CpuBackend, BuffersStartAtZeroAndMovesCheckTheirSizes) {
  OneStage f;
  Buffer a = f.backend.alloc(4), b = f.backend.alloc(4);
  for (float v : a.view()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(a.bytes(), 16);
  f.backend.fill(a.view(), 1.5f);
  f.backend.fill(b.view().subspan(1, 2), 2.0f);  // b = 0 2 2 0
  f.backend.add(a.view(), b.view());             // a = 1.5 3.5 3.5 1.5
  EXPECT_EQ(f.backend.read(a.view(), 1), 3.5f);
  f.backend.copy(b.view().first(2), a.view().last(2));  // b = 3.5 1.5 2 0
  EXPECT_EQ(f.backend.read(b.view(), 0), 3.5f);
  EXPECT_EQ(f.backend.read(b.view(), 3), 0.0f);
  EXPECT_THROW(f.backend.copy(a.view(), b.view().first(3)), ExecutorError);
  EXPECT_THROW(f.backend.add(a.view().first(1), b.view()), ExecutorError);
  Buffer moved = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from Buffer is empty
  EXPECT_EQ(moved.size(), 4);
}

// Every unit forward then backward through the backend, and the same calls on Layer<float> with
// the backend's own parameters: the same loss and the same gradients, bit for bit, and the slot
// idle once each cache was spent.
TEST(CpuBackend, UnitsEqualTheLayersCalledDirectly) {
  OneStage f;
  f.backend.init_params(3);
  const Corpus corpus = Corpus::synthetic(f.prog.model.vocab, f.prog.model.seq_len, 7);
  const Batch batch = corpus.sample(0, 0, f.prog.plan.micro_batch);
  const TokenBatch tb = batch.view();
  const int32_t units = program::unit_count(f.prog.model);
  const int64_t slot = 1;

  Buffer x;
  for (int32_t u = 0; u < units; ++u) x = f.backend.forward(0, u, slot, tb, x.view(), false);
  const float loss = f.backend.read(x.view(), 0);
  EXPECT_GT(f.backend.cache_bytes(), 0) << "the forward left its caches in the slot";
  Buffer dy = f.backend.alloc(1);
  f.backend.fill(dy.view(), 0.5f);
  for (int32_t u = units - 1; u >= 0; --u) dy = f.backend.backward(0, u, slot, dy.view(), false);
  EXPECT_TRUE(f.backend.slot_idle(slot));
  const std::vector<float> grads(f.backend.grads().begin(), f.backend.grads().end());

  const ParamLayout& pl = f.layout.chunk(0);
  const std::vector<float> params = f.backend.params_host();
  std::vector<float> ref_grads(params.size(), 0.0f);
  std::vector<UnitCache<float>> caches(static_cast<std::size_t>(units));
  std::vector<float> a;
  for (int32_t u = 0; u < units; ++u) {
    Layer<float> l(pl, u);
    std::vector<float> y(static_cast<std::size_t>(l.output_size(tb.dims)));
    l.forward(tb, params, a, y, caches[static_cast<std::size_t>(u)]);
    a = std::move(y);
  }
  EXPECT_EQ(a.at(0), loss);
  std::vector<float> g{0.5f};
  for (int32_t u = units - 1; u >= 0; --u) {
    Layer<float> l(pl, u);
    UnitCache<float>& c = caches[static_cast<std::size_t>(u)];
    std::vector<float> dx(static_cast<std::size_t>(l.input_size(c.dims)));
    l.backward(params, g, dx, ref_grads, c);
    g = std::move(dx);
  }
  EXPECT_EQ(grads, ref_grads);
  f.backend.clear_slot(slot);
  EXPECT_EQ(f.backend.cache_bytes(), 0);
}

}  // namespace
}  // namespace stagecraft::executor
