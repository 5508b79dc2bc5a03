// Backward variants and how units compose: split backward (zero-bubble) equals full backward,
// recompute equals cached, gradients accumulate, a pipeline split with a tied head copy equals
// the single-layout model once the two wte gradients are summed, and bad calls throw.
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "executor/model/layers.hpp"
#include "executor/model/params.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

struct Fixture {
  spec::Model m;
  ParamLayout layout;
  test::Tokens tokens;
  std::vector<double> p;

  explicit Fixture(const spec::Model& model)
      : m(model), layout(model), tokens(test::random_tokens(model, test::tiny_dims(), 11)),
        p(test::random_params<double>(layout, 12)) {}

  std::vector<double> input(const Layer<double>& l, uint32_t seed) const {
    return test::random_vector<double>(l.input_size(tokens.dims), seed, 1.0);
  }
  std::vector<double> dy(const Layer<double>& l, uint32_t seed) const {
    return test::random_vector<double>(l.output_size(tokens.dims), seed, 1.0);
  }
};

std::vector<spec::Model> models() { return {test::tiny_gpt(), test::tiny_llama()}; }

TEST(Split, InputPlusWeightEqualsFullBackwardExactly) {
  for (const spec::Model& m : models()) {
    Fixture f(m);
    for (int64_t u = 0; u < unit_count(m); ++u) {
      const Layer<double> layer(f.layout, u);
      const std::vector<double> x = f.input(layer, 20), dy = f.dy(layer, 21);
      std::vector<double> y(static_cast<std::size_t>(layer.output_size(f.tokens.dims)));
      std::vector<double> dx_full(x.size()), dx_split(x.size());
      std::vector<double> g_full(f.p.size(), 0.0), g_split(f.p.size(), 0.0);
      UnitCache<double> c_full, c_split;
      layer.forward(f.tokens.view(), f.p, x, y, c_full);
      layer.forward(f.tokens.view(), f.p, x, y, c_split);
      layer.backward(f.p, dy, dx_full, g_full, c_full);
      layer.backward_input(f.p, dy, dx_split, c_split);
      EXPECT_TRUE(std::all_of(g_split.begin(), g_split.end(), [](double g) { return g == 0.0; }))
          << unit_name(m, u) << ": backward_input touched no gradient";
      layer.backward_weight(g_split, c_split);
      EXPECT_EQ(dx_split, dx_full) << m.name << " " << unit_name(m, u);
      EXPECT_EQ(g_split, g_full) << m.name << " " << unit_name(m, u);
    }
  }
}

// ZB-H1 order: B(mb0), B(mb1), W(mb1), W(mb0) gives the gradients of two full backwards.
TEST(Split, DeferredWeightGradientsInAnyOrderAccumulate) {
  for (const spec::Model& m : models()) {
    Fixture f(m);
    const Layer<double> layer(f.layout, 3);  // block 1 attention
    const std::vector<double> x0 = f.input(layer, 30), x1 = f.input(layer, 31);
    const std::vector<double> d0 = f.dy(layer, 32), d1 = f.dy(layer, 33);
    std::vector<double> y(x0.size()), dx(x0.size());
    std::vector<double> g_ref(f.p.size(), 0.0), g_zb(f.p.size(), 0.0);
    UnitCache<double> c0, c1;
    layer.forward(f.tokens.view(), f.p, x0, y, c0);
    layer.backward(f.p, d0, dx, g_ref, c0);
    layer.forward(f.tokens.view(), f.p, x1, y, c1);
    layer.backward(f.p, d1, dx, g_ref, c1);

    layer.forward(f.tokens.view(), f.p, x0, y, c0);
    layer.forward(f.tokens.view(), f.p, x1, y, c1);
    layer.backward_input(f.p, d0, dx, c0);
    layer.backward_input(f.p, d1, dx, c1);
    layer.backward_weight(g_zb, c1);
    layer.backward_weight(g_zb, c0);
    for (std::size_t i = 0; i < g_ref.size(); ++i) EXPECT_NEAR(g_zb[i], g_ref[i], 1e-12) << m.name << " " << i;
  }
}

TEST(Split, RecomputeFromInputEqualsKeptActivations) {
  for (const spec::Model& m : models()) {
    Fixture f(m);
    test::StageRunner<double> kept(f.layout), recomputed(f.layout);
    const double loss = kept.forward(f.tokens.view(), f.p, {})[0];
    EXPECT_EQ(recomputed.forward(f.tokens.view(), f.p, {}, CacheMode::kInputOnly)[0], loss);
    for (const UnitCache<double>& c : recomputed.caches()) {
      EXPECT_TRUE(c.xhat.empty() && c.probs.empty() && c.mid.empty()) << "input-only cache kept intermediates";
    }
    EXPECT_EQ(recomputed.caches()[1].input.size(), static_cast<std::size_t>(test::tiny_dims().rows() * m.hidden));
    std::vector<double> g_kept(f.p.size(), 0.0), g_re(f.p.size(), 0.0);
    kept.backward(f.p, {1.0}, g_kept);
    recomputed.backward(f.p, {1.0}, g_re);
    EXPECT_EQ(g_re, g_kept) << m.name;
  }
}

// Two backward passes of the same micro-batch give twice one (the buffer accumulates; Eigen's
// GEMM adds into it blockwise, so up to rounding), and dy = {1/m} on the head scales the
// gradients for a mean over m micro-batches.
TEST(Split, GradientsAccumulateAcrossMicroBatches) {
  for (const spec::Model& m : models()) {
    Fixture f(m);
    test::StageRunner<double> run(f.layout);
    std::vector<double> once(f.p.size(), 0.0), twice(f.p.size(), 0.0), halves(f.p.size(), 0.0);
    run.forward(f.tokens.view(), f.p, {});
    run.backward(f.p, {1.0}, once);
    for (int k = 0; k < 2; ++k) {
      run.forward(f.tokens.view(), f.p, {});
      run.backward(f.p, {1.0}, twice);
      run.forward(f.tokens.view(), f.p, {});
      run.backward(f.p, {0.5}, halves);
    }
    for (std::size_t i = 0; i < once.size(); ++i) {
      EXPECT_NEAR(twice[i], 2.0 * once[i], 1e-14) << m.name << " " << i;
      EXPECT_NEAR(halves[i], once[i], 1e-14) << m.name << " " << i;
    }
  }
}

// Pipeline: stage A = units [0, 3), stage B = [3, 2L+2) with its own copy of the tied table.
// Same initial values and, once the two wte gradients are summed (Megatron's all-reduce), the
// same gradients as the single-layout model.
TEST(Split, PipelineStagesWithTiedCopyEqualSingleLayout) {
  for (const spec::Model& m : models()) {
    const int64_t cut = 3, units = unit_count(m);
    const ParamLayout whole(m), a(m, 0, cut), b(m, cut, units);
    EXPECT_EQ(b.head_has_wte_copy(), m.tied_embeddings);
    std::vector<double> pw(static_cast<std::size_t>(whole.size())), pa(static_cast<std::size_t>(a.size())),
        pb(static_cast<std::size_t>(b.size()));
    whole.init<double>(pw, 42);
    a.init<double>(pa, 42);
    b.init<double>(pb, 42);
    const test::Tokens t = test::random_tokens(m, test::tiny_dims(), 13);
    test::StageRunner<double> rw(whole), ra(a), rb(b);
    const double loss_whole = rw.forward(t.view(), pw, {})[0];
    const double loss_split = rb.forward(t.view(), pb, ra.forward(t.view(), pa, {}))[0];
    EXPECT_EQ(loss_split, loss_whole) << m.name;

    std::vector<double> gw(pw.size(), 0.0), ga(pa.size(), 0.0), gb(pb.size(), 0.0);
    rw.backward(pw, {1.0}, gw);
    ra.backward(pa, rb.backward(pb, {1.0}, gb), ga);
    for (const TensorSlot& s : whole.tensors()) {
      const ParamLayout& own = s.unit < cut ? a : b;
      const std::vector<double>& g = s.unit < cut ? ga : gb;
      const TensorSlot& o = own.find(s.name);
      for (int64_t i = 0; i < s.size(); ++i) {
        double split = g[static_cast<std::size_t>(o.offset + i)];
        if (s.name == "embedding.wte" && b.contains(s.name)) split += gb[static_cast<std::size_t>(b.find(s.name).offset + i)];
        EXPECT_NEAR(split, gw[static_cast<std::size_t>(s.offset + i)], 1e-14) << m.name << " " << s.name << "[" << i << "]";
      }
    }
  }
}

TEST(Split, BadCallsThrowWithContext) {
  Fixture f(test::tiny_gpt());
  const Layer<double> head(f.layout, unit_count(f.m) - 1);
  const Layer<double> attn(f.layout, 1);
  UnitCache<double> c;
  std::vector<double> x(static_cast<std::size_t>(f.tokens.dims.rows() * f.m.hidden)), loss(1);
  std::vector<double> grads(f.p.size());
  EXPECT_THROW(attn.backward_weight(grads, c), std::logic_error);
  EXPECT_THROW(attn.backward_input(f.p, x, x, c), std::logic_error);
  test::Tokens bad = f.tokens;
  bad.targets[3] = static_cast<int32_t>(f.m.vocab);
  try {
    head.forward(bad.view(), f.p, x, loss, c);
    ADD_FAILURE() << "no throw for a target outside the vocab";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("targets[3] = 11"), std::string::npos) << e.what();
  }
  std::vector<double> short_x(x.size() - 1);
  EXPECT_THROW(attn.forward(f.tokens.view(), f.p, short_x, x, c), std::invalid_argument);
  test::Tokens long_seq = test::random_tokens(f.m, {1, f.m.seq_len + 1}, 1);
  std::vector<double> y(static_cast<std::size_t>((f.m.seq_len + 1) * f.m.hidden));
  EXPECT_THROW(attn.forward(long_seq.view(), f.p, y, y, c), std::invalid_argument);
  EXPECT_THROW(Layer<double>(ParamLayout(f.m, 0, 2), 3), std::invalid_argument);
}

}  // namespace
}  // namespace stagecraft::executor
