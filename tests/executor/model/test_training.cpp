// End to end on one process: units + AdamW + synthetic corpus. The loss must fall well below
// its starting value ln(V) within a few dozen steps, for both model families.
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "executor/data/corpus.hpp"
#include "executor/model/adamw.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

// Trains `steps` steps of 2 micro-batches x 4 sequences; returns {first loss, mean of last 5}.
std::pair<double, double> train(spec::Model m, int steps) {
  m.vocab = 32, m.seq_len = 16, m.hidden = 32, m.ffn_hidden = 64;
  const ParamLayout layout(m);
  const Corpus corpus = Corpus::synthetic(m.vocab, m.seq_len, 5);
  std::vector<float> p(static_cast<std::size_t>(layout.size())), g(p.size()), mom(p.size()), var(p.size());
  layout.init<float>(p, 1);
  test::StageRunner<float> run(layout);
  const AdamWConfig cfg{3e-3, 0.9, 0.95, 1e-8, 0.01};
  const std::vector<Range> decayed = layout.decayed_ranges();
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    std::fill(g.begin(), g.end(), 0.0f);
    double loss = 0;
    for (int mb = 0; mb < 2; ++mb) {
      const Batch b = corpus.sample(step, mb * 4, 4);
      loss += run.forward(b.view(), p, {})[0] / 2;
      run.backward(p, {0.5f}, g);  // mean over the 2 micro-batches
    }
    const float scale = clip_scale(std::sqrt(global_norm_sq(g)), 1.0);
    adamw_step(cfg, step + 1, {0, p, g, mom, var}, decayed, scale);
    if (step == 0) first = loss;
    if (step >= steps - 5) last += loss / 5;
  }
  std::printf("  %s: loss %.3f -> %.3f (ln V = %.3f, chain entropy %.3f)\n", m.name.c_str(), first, last,
              std::log(static_cast<double>(m.vocab)), Corpus::synthetic_entropy());
  return {first, last};
}

TEST(Training, LossFallsOnSyntheticCorpus) {
  for (const spec::Model& m : {test::tiny_gpt(), test::tiny_llama()}) {
    const auto [first, last] = train(m, 80);
    EXPECT_NEAR(first, std::log(32.0), 0.2) << m.name;
    EXPECT_LT(last, first - 1.0) << m.name;
  }
}

}  // namespace
}  // namespace stagecraft::executor
