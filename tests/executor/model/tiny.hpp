// Test helpers for the executor's model math: two tiny models (one per family), random
// parameters and tokens, and a runner that chains the units of one layout like a pipeline stage.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/spec/model.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/params.hpp"

namespace stagecraft::executor::test {

// GPT family: gelu, LayerNorm, learned positions, biases, tied embeddings.
inline spec::Model tiny_gpt() {
  spec::Model m;
  m.name = "tiny-gpt";
  m.layers = 2, m.hidden = 8, m.heads = 2, m.kv_heads = 2, m.ffn_hidden = 16, m.vocab = 11, m.seq_len = 5;
  m.mlp = spec::Mlp::kGelu, m.norm = spec::Norm::kLayerNorm, m.position = spec::Position::kLearned;
  m.tied_embeddings = true, m.set_biases(true);
  return m;
}

// LLaMA family: SwiGLU, RMSNorm, RoPE, no biases, untied head, GQA (4 query heads, 2 K/V heads).
inline spec::Model tiny_llama() {
  spec::Model m;
  m.name = "tiny-llama";
  m.layers = 2, m.hidden = 8, m.heads = 4, m.kv_heads = 2, m.ffn_hidden = 12, m.vocab = 11, m.seq_len = 6;
  m.mlp = spec::Mlp::kSwiglu, m.norm = spec::Norm::kRmsNorm, m.position = spec::Position::kRope;
  m.tied_embeddings = false, m.set_biases(false);
  return m;
}

inline Dims tiny_dims() { return {2, 5}; }

struct Tokens {
  Dims dims;
  std::vector<int32_t> inputs, targets;
  TokenBatch view() const { return {dims, inputs, targets}; }
};

inline Tokens random_tokens(const spec::Model& m, Dims d, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(m.vocab - 1));
  Tokens t{d, std::vector<int32_t>(static_cast<std::size_t>(d.rows())), std::vector<int32_t>(static_cast<std::size_t>(d.rows()))};
  for (auto& v : t.inputs) v = id(gen);
  for (auto& v : t.targets) v = id(gen);
  return t;
}

template <typename S>
std::vector<S> random_vector(int64_t n, uint32_t seed, double scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<S> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<S>(normal(gen));
  return v;
}

// The largest elementwise difference over the largest magnitude of `want`.
inline double max_rel(const std::vector<double>& got, const std::vector<double>& want) {
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    diff = std::max(diff, std::abs(got[i] - want[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

// Parameters of O(0.3) spread so every path (biases, norm weights, attention pattern) matters.
template <typename S>
std::vector<S> random_params(const ParamLayout& layout, uint32_t seed) {
  std::vector<S> p = random_vector<S>(layout.size(), seed, 0.3);
  for (const TensorSlot& t : layout.tensors()) {
    if (t.init != Init::kOnes) continue;
    for (int64_t i = t.offset; i < t.offset + t.size(); ++i) p[static_cast<std::size_t>(i)] += S(1);
  }
  return p;
}

// The units of one layout run in order, as one pipeline stage would run them.
template <typename S>
class StageRunner {
 public:
  explicit StageRunner(const ParamLayout& layout) {
    for (int64_t u = layout.begin(); u < layout.end(); ++u) layers_.emplace_back(layout, u);
    caches_.resize(layers_.size());
  }

  // From tokens (first stage) or activations `x`; returns the last unit's output (the loss for a head).
  std::vector<S> forward(const TokenBatch& t, const std::vector<S>& params, std::vector<S> x,
                         CacheMode mode = CacheMode::kFull) {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      std::vector<S> y(static_cast<std::size_t>(layers_[i].output_size(t.dims)));
      layers_[i].forward(t, params, x, y, caches_[i], mode);
      x = std::move(y);
    }
    return x;
  }

  // Returns dL/d(stage input) (empty when the stage starts with the embedding); adds to grads.
  std::vector<S> backward(const std::vector<S>& params, std::vector<S> dy, std::vector<S>& grads) {
    for (std::size_t i = layers_.size(); i-- > 0;) {
      std::vector<S> dx(static_cast<std::size_t>(layers_[i].input_size(caches_[i].dims)));
      layers_[i].backward(params, dy, dx, grads, caches_[i]);
      dy = std::move(dx);
    }
    return dy;
  }

  const std::vector<Layer<S>>& layers() const { return layers_; }
  std::vector<UnitCache<S>>& caches() { return caches_; }

 private:
  std::vector<Layer<S>> layers_;
  std::vector<UnitCache<S>> caches_;
};

}  // namespace stagecraft::executor::test
