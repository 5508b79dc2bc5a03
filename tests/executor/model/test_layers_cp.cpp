// Context parallelism at the unit level (LayerT::cp_*, attention_cp_impl.hpp): cp ranks run the
// attention unit's phases, the collectives between them done here by hand (all-gather:
// concatenation in member order; reduce-scatter: block c summed over the ranks; all-to-all: block
// j of rank c's send is block c of rank j's receive), and every rank's output and input-gradient
// rows equal the whole-sequence unit's rows at its positions, and the ranks' parameter gradients
// sum to the whole's. In double, so the only differences are summation orders: 1e-10.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "executor/model/layers.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

constexpr double kCpTol = 1e-10;
using test::max_rel;

// A model with 8 tokens per sequence (cp 2 and 4 both cut it into 2·cp chunks) and GQA heads a2a
// can split at cp 2: 4 query heads on 2 K/V heads of width 2.
spec::Model cp_model(spec::Position position) {
  spec::Model m = position == spec::Position::kRope ? test::tiny_llama() : test::tiny_gpt();
  m.seq_len = 8, m.heads = 4, m.kv_heads = 2;
  m.name += "-cp";
  return m;
}

// The rows of rank c of a [B·T, w] whole-sequence tensor, in its order.
std::vector<double> rank_rows(const std::vector<double>& whole, const Dims& local, int64_t w) {
  const std::vector<int64_t> pos = local.positions();
  const int64_t full = local.full_seq();
  std::vector<double> out;
  for (int64_t b = 0; b < local.batch; ++b) {
    for (int64_t p : pos) {
      const auto at = whole.begin() + (b * full + p) * w;
      out.insert(out.end(), at, at + w);
    }
  }
  return out;
}

using Blocks = std::vector<std::vector<double>>;  // per rank

Blocks all_gather(const Blocks& send) {
  std::vector<double> all;
  for (const auto& s : send) all.insert(all.end(), s.begin(), s.end());
  return Blocks(send.size(), all);
}
Blocks reduce_scatter(const Blocks& send) {
  const std::size_t cp = send.size(), piece = send[0].size() / cp;
  Blocks out(cp, std::vector<double>(piece, 0.0));
  for (std::size_t c = 0; c < cp; ++c) {
    for (const auto& s : send) {
      for (std::size_t i = 0; i < piece; ++i) out[c][i] += s[c * piece + i];
    }
  }
  return out;
}
Blocks all_to_all(const Blocks& send) {
  const std::size_t cp = send.size(), piece = send[0].size() / cp;
  Blocks out(cp, std::vector<double>(send[0].size()));
  for (std::size_t c = 0; c < cp; ++c) {
    for (std::size_t j = 0; j < cp; ++j) {
      std::copy_n(send[j].begin() + static_cast<std::ptrdiff_t>(c * piece), piece,
                  out[c].begin() + static_cast<std::ptrdiff_t>(j * piece));
    }
  }
  return out;
}

struct CpCase {
  spec::Position position;
  int64_t cp;
  spec::CpComm comm;
  bool recompute;    // forward keeping only the input, the phases re-run from it before backward
  bool split;        // zero-bubble: the finish leaves the weight gradients to backward_weight
};

void check_attention(const CpCase& k) {
  const spec::Model m = cp_model(k.position);
  const std::string what = m.name + " cp " + std::to_string(k.cp) + " " + spec::to_string(k.comm) +
                           (k.recompute ? " recompute" : "") + (k.split ? " split" : "");
  const ParamLayout layout(m);
  const int64_t u = 1, h = m.hidden;  // the first block's attention
  const Layer<double> unit(layout, u);
  const std::vector<double> p = test::random_params<double>(layout, 5);
  const test::Tokens tokens = test::random_tokens(m, Dims{2, m.seq_len}, 6);
  const Dims whole_dims = tokens.dims;
  const std::vector<double> x = test::random_vector<double>(whole_dims.rows() * h, 7, 1.0);
  const std::vector<double> dy = test::random_vector<double>(whole_dims.rows() * h, 8, 1.0);
  std::vector<double> y(x.size()), dx(x.size()), grads(p.size(), 0.0);
  UnitCache<double> whole_cache;
  unit.forward(tokens.view(), p, x, y, whole_cache);
  unit.backward(p, dy, dx, grads, whole_cache);

  const auto cp = static_cast<std::size_t>(k.cp);
  std::vector<Dims> dims;
  std::vector<UnitCache<double>> caches(cp);
  for (int64_t c = 0; c < k.cp; ++c) dims.push_back(Dims{2, m.seq_len / k.cp, CpSplit{k.cp, c, k.comm}});
  const bool a2a = k.comm == spec::CpComm::kA2a;
  auto phase = [&](CpPhase ph, auto&& run) {  // one phase on every rank: its outputs
    Blocks out(cp);
    for (std::size_t c = 0; c < cp; ++c) {
      out[c].resize(static_cast<std::size_t>(unit.cp_sizes(dims[c], ph).out));
      run(c, out[c]);
    }
    return out;
  };
  auto forward = [&](bool recompute) {
    const Blocks sent = phase(CpPhase::kProject, [&](std::size_t c, std::vector<double>& out) {
      const std::vector<double> xc = recompute ? std::vector<double>{} : rank_rows(x, dims[c], h);
      unit.cp_project(dims[c], p, xc, k.recompute && !recompute, out, caches[c]);
    });
    const Blocks got = a2a ? all_to_all(sent) : all_gather(sent);
    Blocks outs = phase(CpPhase::kAttend, [&](std::size_t c, std::vector<double>& out) { unit.cp_attend(p, got[c], out, caches[c]); });
    if (a2a) {
      const Blocks back = all_to_all(outs);
      outs = phase(CpPhase::kFinishForward,
                   [&](std::size_t c, std::vector<double>& out) { unit.cp_finish_forward(p, back[c], out, caches[c]); });
    }
    return outs;
  };
  const Blocks ys = forward(false);
  for (std::size_t c = 0; c < cp; ++c) {
    EXPECT_LE(max_rel(ys[c], rank_rows(y, dims[c], h)), kCpTol) << what << " rank " << c << ": output rows";
  }
  if (k.recompute) {
    for (std::size_t c = 0; c < cp; ++c) EXPECT_TRUE(caches[c].qkv.empty() && caches[c].probs.empty()) << what << ": kept only the input";
    forward(true);
  }

  const Blocks sent = phase(CpPhase::kBackwardSend, [&](std::size_t c, std::vector<double>& out) {
    unit.cp_backward_send(p, rank_rows(dy, dims[c], h), out, caches[c]);
  });
  const Blocks got = a2a ? all_to_all(sent) : all_gather(sent);
  const Blocks parts =
      phase(CpPhase::kBackwardAttend, [&](std::size_t c, std::vector<double>& out) { unit.cp_backward_attend(p, got[c], out, caches[c]); });
  const Blocks owned = a2a ? all_to_all(parts) : reduce_scatter(parts);
  std::vector<double> grad_sum(p.size(), 0.0);
  for (std::size_t c = 0; c < cp; ++c) {
    std::vector<double> g(p.size(), 0.0), dxc(static_cast<std::size_t>(unit.cp_sizes(dims[c], CpPhase::kBackwardFinish).out));
    unit.cp_backward_finish(p, owned[c], dxc, g, k.split, caches[c]);
    if (k.split) {
      for (double v : g) EXPECT_EQ(v, 0.0) << what << ": weight gradients before backward_weight";
      unit.backward_weight(g, caches[c]);
    }
    EXPECT_LE(max_rel(dxc, rank_rows(dx, dims[c], h)), kCpTol) << what << " rank " << c << ": input-gradient rows";
    for (std::size_t i = 0; i < g.size(); ++i) grad_sum[i] += g[i];
  }
  EXPECT_LE(max_rel(grad_sum, grads), kCpTol) << what << ": parameter gradients summed over the ranks";
}

TEST(ContextParallelLayers, AttentionRanksGiveTheWholeSequencesRowsAndGradients) {
  for (spec::Position pos : {spec::Position::kRope, spec::Position::kLearned}) {
    for (spec::CpComm comm : spec::kCpComms) {
      for (int64_t cp : {2, 4}) {
        if (comm == spec::CpComm::kA2a && cp == 4) continue;  // 2 K/V heads: a2a splits heads over cp
        check_attention({pos, cp, comm, false, false});
      }
      check_attention({pos, 2, comm, true, false});
      check_attention({pos, 2, comm, false, true});
    }
  }
}

// The embedding at the rank's positions (learned positions: wpe rows pos[i]); its table
// gradients summed over the ranks are the whole sequence's.
TEST(ContextParallelLayers, EmbeddingReadsAndWritesTheRanksPositions) {
  const spec::Model m = cp_model(spec::Position::kLearned);
  const ParamLayout layout(m);
  const Layer<double> unit(layout, 0);
  const std::vector<double> p = test::random_params<double>(layout, 5);
  const test::Tokens tokens = test::random_tokens(m, Dims{2, m.seq_len}, 6);
  const int64_t h = m.hidden, rows = tokens.dims.rows();
  const std::vector<double> dy = test::random_vector<double>(rows * h, 8, 1.0);
  std::vector<double> y(static_cast<std::size_t>(rows * h)), grads(p.size(), 0.0), none;
  UnitCache<double> cache;
  unit.forward(tokens.view(), p, none, y, cache);
  unit.backward(p, dy, none, grads, cache);
  std::vector<double> sum(p.size(), 0.0);
  for (int64_t c = 0; c < 2; ++c) {
    const Dims d{2, m.seq_len / 2, CpSplit{2, c, spec::CpComm::kP2p}};
    std::vector<int32_t> in;
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t pos : d.positions()) in.push_back(tokens.inputs[static_cast<std::size_t>(b * m.seq_len + pos)]);
    }
    std::vector<double> yc(static_cast<std::size_t>(d.rows() * h));
    UnitCache<double> cc;
    unit.forward(TokenBatch{d, in, {}}, p, none, yc, cc);
    EXPECT_LE(max_rel(yc, rank_rows(y, d, h)), kCpTol) << "rank " << c;
    unit.backward(p, rank_rows(dy, d, h), none, sum, cc);
  }
  EXPECT_LE(max_rel(sum, grads), kCpTol);
}

}  // namespace
}  // namespace stagecraft::executor
